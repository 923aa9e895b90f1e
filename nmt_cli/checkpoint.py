"""Checkpoints: atomic save, safe load, naming, pruning and averaging.

A checkpoint is one self-contained dict: the format version, the resolved run config,
the model weights, the sentencepiece model bytes and, for training checkpoints, the
optimizer, loss scaler, RNG states and data position. It is saved atomically (temporary
file, fsync, rename) and loaded with `weights_only=True`, so loading runs no pickled code.
Imports torch, `config` and `errors`.
"""

from __future__ import annotations

import os
import re
import zipfile
from pathlib import Path

import torch

from nmt_cli.config import ModelConfig, RunConfig, from_dict
from nmt_cli.errors import InputError, RunFailure
from nmt_cli.files import atomic_write, process_alive

FORMAT_VERSION = 1
NUMBERED = re.compile(r"^checkpoint_(\d+)\.pt$")
NOT_OURS = "; give a .pt file written by `nmt train` or `nmt average`"
TEMPORARY = re.compile(r"^\..+\.(?:tmp|link)-(\d+)$")  # save()'s and the training loop's


def numbered_name(update: int) -> str:
    return f"checkpoint_{update}.pt"


def save(payload: dict, path: Path) -> None:
    """Write `payload` to `path` so that `path` is either the old file or the complete new one."""
    payload = {"format": FORMAT_VERSION, **payload}
    try:
        with atomic_write(path, binary=True, durable=True) as stream:
            torch.save(payload, stream)
    except OSError as err:
        raise RunFailure(
            f"cannot write checkpoint {path}: {err.strerror or err}; free some disk space or "
            "choose another run directory"
        ) from None


def remove_stale_temporaries(checkpoint_dir: Path) -> None:
    """Delete the temporary files (`.NAME.tmp-PID`, `.NAME.link-PID`) that a killed process left
    half-written; those of a process still alive are its own business."""
    if not checkpoint_dir.is_dir():
        return
    for entry in checkpoint_dir.iterdir():
        match = TEMPORARY.match(entry.name)
        if match and int(match.group(1)) != os.getpid() and not process_alive(int(match.group(1))):
            entry.unlink(missing_ok=True)


def load(path: Path) -> dict:
    """Load a checkpoint onto the CPU, with one clear error for every way it can be unusable."""
    if not path.exists():
        raise InputError(f"checkpoint {path}: no such file")
    if not path.is_file():
        raise InputError(f"checkpoint {path}: is a directory, not a checkpoint file")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except (RuntimeError, EOFError, zipfile.BadZipFile, ValueError, OSError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise InputError(
            f"checkpoint {path}: not a readable nmt checkpoint (truncated or corrupted?): {first[:200]}; "
            "use another one, e.g. an earlier checkpoint_N.pt of the run"
        ) from None
    except Exception as err:  # noqa: BLE001 - pickle errors of arbitrary kinds from foreign files
        raise InputError(
            f"checkpoint {path}: not an nmt checkpoint ({type(err).__name__}){NOT_OURS}"
        ) from None
    if not isinstance(payload, dict) or "model" not in payload or "config" not in payload:
        raise InputError(f"checkpoint {path}: not an nmt checkpoint (no model and config inside){NOT_OURS}")
    if payload.get("format") != FORMAT_VERSION:
        raise InputError(
            f"checkpoint {path}: format version {payload.get('format')!r}, this nmt reads version "
            f"{FORMAT_VERSION}; use the nmt release that wrote it"
        )
    return payload


def run_config(payload: dict, path: Path) -> RunConfig:
    """The run config stored in a checkpoint, validated like a recipe."""
    return from_dict(payload["config"], f"checkpoint {path}")


def model_config(payload: dict, path: Path) -> ModelConfig:
    return run_config(payload, path).model


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


def average(paths: list[Path]) -> dict:
    """A checkpoint whose parameters are the elementwise mean of those in `paths`, accumulated in fp32.

    Loads one checkpoint at a time (memory: the sum plus one checkpoint). Refuses checkpoints
    whose model configuration, sentencepiece models or parameter shapes differ, naming the
    first difference. The result carries no optimizer state and lists its sources.
    """
    first = load(paths[0])
    total = {name: t.float().clone() for name, t in first["model"].items()}
    sources = [_provenance(paths[0], first)]
    for path in paths[1:]:
        payload = load(path)
        _check_compatible(first, paths[0], payload, path)
        for name, tensor in payload["model"].items():
            total[name] += tensor.float()
        sources.append(_provenance(path, payload))
    averaged = {name: (t / len(paths)).to(first["model"][name].dtype) for name, t in total.items()}
    return {
        "kind": "average",
        "config": first["config"],
        "model": averaged,
        "spm": first["spm"],
        "averaged_from": sources,
    }


def _provenance(path: Path, payload: dict) -> dict:
    return {"path": str(path), "update": int(payload.get("progress", {}).get("update", -1))}


def _check_compatible(first: dict, first_path: Path, other: dict, path: Path) -> None:
    prefix = f"cannot average {first_path} and {path}"
    for key, value in first["config"]["model"].items():
        if other["config"]["model"].get(key) != value:
            raise InputError(
                f"{prefix}: model.{key} differs ({value!r} vs {other['config']['model'].get(key)!r})"
            )
    if other["spm"] != first["spm"]:
        raise InputError(f"{prefix}: they were trained with different sentencepiece models")
    for name, tensor in first["model"].items():
        theirs = other["model"].get(name)
        if theirs is None or theirs.shape != tensor.shape:
            shape = tuple(theirs.shape) if theirs is not None else "missing"
            raise InputError(f"{prefix}: parameter {name} has shape {tuple(tensor.shape)} vs {shape}")
