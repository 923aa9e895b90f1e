"""Checkpoint averaging (`nmt average`): the elementwise mean of a run's checkpoints, streamed one
checkpoint at a time."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

import torch

from nmt_cli.checkpoint import Checkpoint, load, mapped, one_direction
from nmt_cli.errors import InputError


def average(paths: list[Path], progress: Callable[[list[Path]], Iterable[Path]] = iter) -> Checkpoint:
    """A checkpoint whose parameters are the elementwise mean of those in `paths`, accumulated in fp32.

    Streams: one checkpoint is loaded at a time and let go once added, so memory is the fp32 sum
    plus one checkpoint; the second on come through `progress` (a reporter's bar: seconds each
    for a large model). Refuses checkpoints whose model configuration, sentencepiece models,
    tokenizers or parameter shapes differ, naming the first difference. The result holds fp32
    weights (checkpoints saved in bf16 or fp16 average to more than their own precision), carries
    no optimizer state and lists its sources.
    """
    first = load(paths[0])
    # One sum for names that share a tensor (tied embeddings): the average holds it once, tied.
    total = mapped(first.model, lambda t: t.to(torch.float32, copy=True))
    owner = {id(tensor): name for name, tensor in reversed(list(total.items()))}
    summed = [name for name, tensor in total.items() if owner[id(tensor)] == name]
    # Only the sum is kept in memory, and of the first its shapes and what identifies the run.
    first.model = {name: tensor.to("meta") for name, tensor in first.model.items()}
    first.train_state = None
    sources = [{"path": str(paths[0]), "update": first.update}]
    direction = one_direction(None, first, paths[0], "average")
    for path in progress(paths[1:]):
        ckpt = load(path)
        _check_compatible(first, paths[0], ckpt, path)
        direction = one_direction(direction, ckpt, path, "average")
        for name in summed:
            total[name] += ckpt.model[name]
        sources.append({"path": str(path), "update": ckpt.update})
        del ckpt  # before the next one is read
    for name in summed:
        total[name].div_(len(paths))
    for name, tensor in total.items():
        if not first.model[name].dtype.is_floating_point:
            total[name] = tensor.to(first.model[name].dtype)
    return Checkpoint(
        "average",
        first.config,
        total,
        first.spm,
        averaged_from=sources,
        languages=direction[1] if direction else None,
        shortlist=first.shortlist,  # the checkpoints share one vocabulary (checked above)
        tokenizers=first.tokenizers,
    )


def _check_compatible(first: Checkpoint, first_path: Path, other: Checkpoint, path: Path) -> None:
    prefix = f"cannot average {first_path} and {path}"
    for key, value in first.config["model"].items():
        if other.config["model"].get(key) != value:
            raise InputError(
                f"{prefix}: model.{key} differs ({value!r} vs {other.config['model'].get(key)!r})"
            )
    if other.spm != first.spm:
        raise InputError(f"{prefix}: they were trained with different sentencepiece models")
    if (other.tokenizers or None) != (first.tokenizers or None):
        raise InputError(
            f"{prefix}: they read text differently ({_tokenizers(first)} vs {_tokenizers(other)}); "
            "average checkpoints of one run"
        )
    for name, tensor in first.model.items():
        theirs = other.model.get(name)
        if theirs is None or theirs.shape != tensor.shape:
            shape = tuple(theirs.shape) if theirs is not None else "missing"
            raise InputError(f"{prefix}: parameter {name} has shape {tuple(tensor.shape)} vs {shape}")


def _tokenizers(ckpt: Checkpoint) -> str:
    """How a checkpoint reads text besides its sentencepiece models, for messages."""
    kinds = [f"{side}: {spec.get('kind')}" for side, spec in (ckpt.tokenizers or {}).items()]
    return ", ".join(kinds) or "sentencepiece alone"
