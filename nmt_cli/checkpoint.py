"""Checkpoints: atomic save, safe load, naming, pruning and averaging.

A checkpoint is self-contained: the resolved run config, the model weights, the sentencepiece
model bytes and, for training checkpoints, the optimizer, loss scaler, RNG states and data
position. `Checkpoint` is its one typed form: `to_dict`, `from_dict` and `_upgrade` (for those
of earlier releases) are the only code that knows the on-disk keys. It is saved atomically
(temporary file, fsync, rename) and loaded with `weights_only=True`, so loading runs no pickled
code; `checkpoint_damage` says why a file that cannot be loaded is unusable.
"""

from __future__ import annotations

import os
import re
import zipfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from nmt_cli import recipe

# DamagedCheckpoint is read as checkpoint.DamagedCheckpoint where a resume falls back on another file.
from nmt_cli.checkpoint_damage import NOT_OURS, check_integrity, unreadable
from nmt_cli.checkpoint_damage import DamagedCheckpoint as DamagedCheckpoint
from nmt_cli.config import RunConfig
from nmt_cli.errors import InputError, Terminated
from nmt_cli.files import output_file, process_alive, write_failure

FORMAT_VERSION = 1
NUMBERED = re.compile(r"^checkpoint_(\d+)\.pt$")


TEMPORARY = re.compile(r"^\..+\.(?:tmp|link)-(\d+)$")  # atomic_write's and replace_with_link's


@dataclass
class TrainState:
    """What an exact resume needs besides the weights (training checkpoints only)."""

    optimizer: dict[str, Any]
    scaler: dict[str, Any]
    """Empty when the run had no loss scaling (bf16, fp32)."""
    rng: dict[str, Any]


@dataclass
class Checkpoint:
    kind: str
    """"train" (written every N updates), "best", "average" or "import"."""
    config: dict[str, Any]
    """The resolved run config, as `recipe.to_dict` writes it."""
    model: dict[str, torch.Tensor]
    spm: dict[str, bytes]
    """Serialized sentencepiece models, "src" and "tgt" (or an imported model's Moses + BPE,
    `data.tokenizer.serialized`)."""
    languages: tuple[str, str] | None = None
    """(source, target) of the corpus it was trained on; None in checkpoints written before
    checkpoints recorded them."""
    progress: dict[str, Any] | None = None
    """Where training stood (training.loop.Progress as a dict); None for an average."""
    train_state: TrainState | None = None
    averaged_from: list[dict[str, Any]] | None = None
    """For an average: the path and update of each source."""
    imported_from: dict[str, Any] | None = None
    """For a model `nmt import` read from another toolkit: the toolkit and the source path."""
    tokenizers: dict[str, dict[str, Any]] | None = None
    """How an imported model reads text besides its sentencepiece models, by side ("src"): Marian's
    language codes (`data.tokenizer.LANGUAGE_CODES`). Training, averaging and shortlisting carry
    them on; None in checkpoints of nmt's own models and those written before they were carried."""
    shortlist: dict[str, torch.Tensor] | None = None
    """A vocabulary shortlist learned by `nmt shortlist` (`data.shortlist.Shortlist.to_dict`)."""

    @property
    def update(self) -> int:
        """The update it was written at; -1 when it has none (an average)."""
        return int(self.progress["update"]) if self.progress is not None else -1

    def run_config(self, path: Path) -> RunConfig:
        """The run config, validated like a recipe."""
        return recipe.from_dict(self.config, f"checkpoint {path}")

    def to_dict(self) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "format": FORMAT_VERSION,
            "kind": self.kind,
            "config": self.config,
            "model": self.model,
            "spm": self.spm,
        }
        if self.progress is not None:
            payload["progress"] = self.progress
        if self.train_state is not None:
            state = self.train_state
            payload.update(optimizer=state.optimizer, scaler=state.scaler, rng=state.rng)
        recorded = {
            "averaged_from": self.averaged_from,
            "imported_from": self.imported_from,
            "tokenizers": self.tokenizers,
            "languages": list(self.languages) if self.languages is not None else None,
            "shortlist": self.shortlist,
        }
        payload.update({key: value for key, value in recorded.items() if value is not None})
        return payload

    @classmethod
    def from_dict(cls, payload: object, path: Path) -> Checkpoint:
        """Check a loaded payload's shape; one clear line for anything that is not ours. One written
        by an earlier nmt is first brought up to date (`_upgrade`)."""
        if not isinstance(payload, dict) or "model" not in payload or "config" not in payload:
            raise InputError(
                f"checkpoint {path}: not an nmt checkpoint (no model and config inside){NOT_OURS}"
            )
        if payload.get("format") != FORMAT_VERSION:
            raise InputError(
                f"checkpoint {path}: format version {payload.get('format')!r}, this nmt reads version "
                f"{FORMAT_VERSION}; use the nmt release that wrote it"
            )
        payload = _upgrade(payload)
        spm, languages, shortlist = payload.get("spm"), payload["languages"], payload["shortlist"]
        if not isinstance(spm, dict) or not all(isinstance(spm.get(side), bytes) for side in ("src", "tgt")):
            raise InputError(f"checkpoint {path}: no sentencepiece models inside{NOT_OURS}")
        if languages is not None and not (
            isinstance(languages, list) and len(languages) == 2 and all(isinstance(x, str) for x in languages)
        ):
            raise InputError(f"checkpoint {path}: its languages are not a (source, target) pair{NOT_OURS}")
        if shortlist is not None and not (
            isinstance(shortlist, dict)
            and all(isinstance(shortlist.get(key), torch.Tensor) for key in ("candidates", "frequent"))
        ):
            raise InputError(f"checkpoint {path}: its shortlist is not one nmt wrote{NOT_OURS}")
        state = None
        if all(key in payload for key in ("optimizer", "scaler", "rng")):
            state = TrainState(payload["optimizer"], payload["scaler"], payload["rng"])
        return cls(
            kind=str(payload["kind"]),
            config=payload["config"],
            model=payload["model"],
            spm=spm,
            progress=payload["progress"],
            train_state=state,
            averaged_from=payload["averaged_from"],
            imported_from=payload["imported_from"],
            tokenizers=payload["tokenizers"],
            languages=(languages[0], languages[1]) if languages is not None else None,
            shortlist=shortlist,
        )


NOT_RECORDED: dict[str, Any] = {"kind": "train"} | dict.fromkeys(
    ("progress", "averaged_from", "imported_from", "tokenizers", "languages", "shortlist")
)


def _upgrade(payload: dict[str, Any]) -> dict[str, Any]:
    """A format-1 payload of any nmt in the keys this one reads: the one place that knows how
    checkpoints changed within the format. A key a writer leaves out when it has nothing to record
    (`to_dict`), or that an earlier nmt did not write yet (languages, tokenizers, imported_from,
    shortlist), reads as NOT_RECORDED says; every nmt wrote a kind, one without reads as training's.
    A key added later goes into NOT_RECORDED; a change an old checkpoint cannot be read through
    raises FORMAT_VERSION instead."""
    return NOT_RECORDED | payload


def numbered_name(update: int) -> str:
    return f"checkpoint_{update}.pt"


HALF = {"bf16": torch.bfloat16, "fp16": torch.float16}


def numbered_weights(
    weights: dict[str, torch.Tensor], kept_in: str, precision: str
) -> dict[str, torch.Tensor]:
    """The weights a numbered checkpoint keeps: as they are (`kept_in` "fp32"), or with
    `kept_in` "train" the floating ones in the training `precision` (bf16, fp16: half the disk)."""
    half = HALF.get(precision) if kept_in == "train" else None
    if half is None:
        return weights
    return mapped(weights, lambda t: t.to(half) if t.is_floating_point() else t)


def mapped(
    weights: dict[str, torch.Tensor], change: Callable[[torch.Tensor], torch.Tensor]
) -> dict[str, torch.Tensor]:
    """`change` applied to each tensor once: names that share one (tied embeddings) still share
    the result, so a checkpoint holds it once and a model loaded from it stays tied."""
    done: dict[tuple, torch.Tensor] = {}
    for tensor in weights.values():
        key = same_tensor(tensor)
        if key not in done:
            done[key] = change(tensor)
    return {name: done[same_tensor(tensor)] for name, tensor in weights.items()}


def same_tensor(tensor: torch.Tensor) -> tuple:
    """What two names holding one tensor have alike."""
    storage = tensor.untyped_storage().data_ptr() if tensor.device.type != "meta" else id(tensor)
    return storage, tensor.storage_offset(), tuple(tensor.shape), tuple(tensor.stride()), tensor.dtype


def save(ckpt: Checkpoint, path: Path, name: str = "checkpoint") -> None:
    """Write `ckpt` to `path` so that `path` is either the old file or the complete new one
    (`files.output_file`: a link is written through, what is not a file is refused; `name` says
    which option named it, or "checkpoint" for one a run names itself)."""
    try:
        with output_file(path, name, binary=True, durable=True) as stream:
            torch.save(ckpt.to_dict(), stream)
    except (OSError, RuntimeError) as err:
        # torch's zip writer reports what stopped a write (a full disk, Ctrl-C or SIGTERM raised
        # in the middle of it) as a RuntimeError raised while handling it; anything else of
        # torch's is not a write failure.
        failed = _what_stopped(err)
        if isinstance(failed, KeyboardInterrupt | Terminated):
            raise failed from None
        if not isinstance(failed, OSError):
            raise
        option = name if name.startswith("-") else None
        raise write_failure(failed, f"{name} {path}", option) from None


def _what_stopped(err: BaseException) -> BaseException:
    """The first interrupt or OSError in `err`'s chain of causes, or `err` itself."""
    seen: BaseException | None = err
    for _ in range(16):  # a chain is short; the bound guards against a cycle
        if seen is None or isinstance(seen, OSError | KeyboardInterrupt | Terminated):
            break
        seen = seen.__cause__ or seen.__context__
    return seen or err


def remove_stale_temporaries(checkpoint_dir: Path) -> None:
    """Delete the temporary files (`.NAME.tmp-PID`, `.NAME.link-PID`) that a killed process left
    half-written; those of a process still alive are its own business."""
    if not checkpoint_dir.is_dir():
        return
    for entry in checkpoint_dir.iterdir():
        match = TEMPORARY.match(entry.name)
        if match and int(match.group(1)) != os.getpid() and not process_alive(int(match.group(1))):
            entry.unlink(missing_ok=True)


def load(path: Path) -> Checkpoint:
    """Load a checkpoint onto the CPU, with one clear error for every way it can be unusable."""
    try:
        path.stat()
    except (FileNotFoundError, NotADirectoryError):
        raise InputError(f"checkpoint {path}: no such file") from None
    except OSError as err:  # a name too long, a directory that may not be searched, a link loop
        raise InputError(f"checkpoint {path}: cannot read it ({err.strerror or err})") from None
    if path.is_dir():
        raise InputError(f"checkpoint {path}: is a directory, not a checkpoint file")
    if not path.is_file():  # a device, a FIFO, a socket: reading one would block or mean nothing
        raise InputError(f"checkpoint {path}: not a regular file; give a checkpoint file (.pt)")
    # The checksums are read beside the load, as zlib lets go of the interpreter's lock (the time
    # saved: docs/benchmarks.md). A damaged tensor is the first thing to report, so the check's
    # answer is awaited before any other.
    with ThreadPoolExecutor(1) as pool:
        checked = pool.submit(check_integrity, path)
        try:
            payload = torch.load(path, map_location="cpu", weights_only=True)
        except (RuntimeError, EOFError, zipfile.BadZipFile, ValueError, OSError) as err:
            raise unreadable(path, err, members=checked.result()) from None
        except Exception as err:  # noqa: BLE001 - pickle errors of arbitrary kinds from foreign files
            checked.result()
            raise InputError(
                f"checkpoint {path}: not an nmt checkpoint ({type(err).__name__}){NOT_OURS}"
            ) from None
        checked.result()
    return Checkpoint.from_dict(payload, path)


def numbered_or_last(path: Path) -> bool:
    """Whether `path` names a training checkpoint of a run (RUN/checkpoints/checkpoint_N.pt or
    checkpoint_last.pt), which `nmt train` reads to resume."""
    in_run = path.parent.name == "checkpoints"
    return in_run and (path.name == "checkpoint_last.pt" or NUMBERED.match(path.name) is not None)


def numbered(checkpoint_dir: Path) -> list[tuple[int, Path]]:
    """The numbered checkpoints of a run, oldest first by update number (not file time)."""
    found = []
    if checkpoint_dir.is_dir():
        for entry in checkpoint_dir.iterdir():
            match = NUMBERED.match(entry.name)
            if match:
                found.append((int(match.group(1)), entry))
    return sorted(found)


def prune(checkpoint_dir: Path, keep_last: int) -> None:
    """Delete numbered checkpoints beyond the newest `keep_last` (best and last are separate files)."""
    found = numbered(checkpoint_dir)
    stale = found if keep_last == 0 else found[:-keep_last]
    for _, path in stale:
        path.unlink(missing_ok=True)


def one_direction(
    seen: tuple[Path, tuple[str, str]] | None, ckpt: Checkpoint, path: Path, action: str
) -> tuple[Path, tuple[str, str]] | None:
    """The first (path, languages) recorded among checkpoints being combined, `ckpt` included;
    one of another direction is refused (a joint vocabulary cannot tell them apart). Checkpoints
    of an older nmt record none and fit any."""
    if ckpt.languages is None:
        return seen
    if seen is None:
        return path, ckpt.languages
    if seen[1] != ckpt.languages:
        raise InputError(
            f"cannot {action} {seen[0]} and {path}: they translate different directions "
            f"({'-'.join(seen[1])} vs {'-'.join(ckpt.languages)})"
        )
    return seen
