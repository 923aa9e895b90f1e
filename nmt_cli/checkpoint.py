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

FORMAT_VERSION = 1
NUMBERED = re.compile(r"^checkpoint_(\d+)\.pt$")


def numbered_name(update: int) -> str:
    return f"checkpoint_{update}.pt"


def save(payload: dict, path: Path) -> None:
    """Write `payload` to `path` so that `path` is either the old file or the complete new one."""
    payload = {"format": FORMAT_VERSION, **payload}
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            torch.save(payload, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        raise RunFailure(f"cannot write checkpoint {path}: {err.strerror or err}; free some disk space or "
                         "choose another run directory") from None


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


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
        raise InputError(f"checkpoint {path}: not a readable nmt checkpoint (truncated or corrupted?): "
                         f"{first[:200]}") from None
    except Exception as err:  # noqa: BLE001 - pickle errors of arbitrary kinds from foreign files
        raise InputError(f"checkpoint {path}: not an nmt checkpoint ({type(err).__name__})") from None
    if not isinstance(payload, dict) or "model" not in payload or "config" not in payload:
        raise InputError(f"checkpoint {path}: not an nmt checkpoint (no model and config inside)")
    if payload.get("format") != FORMAT_VERSION:
        raise InputError(f"checkpoint {path}: format version {payload.get('format')!r}, this nmt reads version "
                         f"{FORMAT_VERSION}; use the nmt release that wrote it")
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


def average(payloads: list[dict], paths: list[Path]) -> dict[str, torch.Tensor]:
    """Elementwise mean of the models' parameters, accumulated in fp32.

    Refuses checkpoints whose model configuration or parameter shapes differ, naming the first difference.
    """
    first_cfg, first_state = payloads[0]["config"]["model"], payloads[0]["model"]
    for payload, path in zip(payloads[1:], paths[1:], strict=True):
        cfg, state = payload["config"]["model"], payload["model"]
        for key in first_cfg:
            if cfg.get(key) != first_cfg[key]:
                raise InputError(f"cannot average {paths[0]} and {path}: model.{key} differs "
                                 f"({first_cfg[key]!r} vs {cfg.get(key)!r})")
        for name, tensor in first_state.items():
            if name not in state or state[name].shape != tensor.shape:
                other = tuple(state[name].shape) if name in state else "missing"
                raise InputError(f"cannot average {paths[0]} and {path}: parameter {name} has shape "
                                 f"{tuple(tensor.shape)} vs {other}")
    averaged = {}
    for name, tensor in first_state.items():
        if not tensor.is_floating_point():
            averaged[name] = tensor.clone()
            continue
        total = torch.zeros_like(tensor, dtype=torch.float32)
        for payload in payloads:
            total += payload["model"][name].float()
        averaged[name] = (total / len(payloads)).to(tensor.dtype)
    return averaged
