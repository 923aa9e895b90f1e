"""Batches as large as the GPU holds, as Marian's --mini-batch-fit sizes them.

A recipe gives the tokens of an update (`train.update_tokens`, the paper's 25,000) and the tokens
of a batch for the paper's eight GPUs (`train.max_tokens`, 3,125). One GPU would accumulate eight
small passes, each too small to keep the GPU busy; with `train.fit_batch` an update is instead
split into as few batches as fit in the GPU's memory (found once, at the start of a new run, and
recorded in the run's config.toml): one batch of 25,000 tokens where it fits, two of 12,500
where not, and so on, never smaller than the recipe's. With eight GPUs each still holds 3,125.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import numpy as np
import torch

from nmt_cli.config import TrainConfig
from nmt_cli.data.batching import collate
from nmt_cli.model import Transformer
from nmt_cli.training.update import accumulate_gradients

MEMORY_SHARE = 0.85
"""The share of the GPU's memory a probe may reach: the rest is room for the allocator's
fragmentation over a run's many batch shapes."""


def fitted(tc: TrainConfig, processes: int, fits: Callable[[int], bool]) -> TrainConfig:
    """`tc` with the fewest batches an update whose batch `fits` (a batch of that many tokens fits
    in memory), each at least the recipe's max_tokens: update_freq f and max_tokens =
    ceil(update_tokens / (processes x f)). Unchanged without update_tokens, or where even the
    recipe's batches are as large as the update's share."""
    if tc.update_tokens <= 0:
        return tc
    for update_freq in range(1, math.ceil(tc.update_tokens / (tc.max_tokens * processes)) + 1):
        tokens = math.ceil(tc.update_tokens / (processes * update_freq))
        if tokens <= tc.max_tokens:
            break
        if fits(tokens):
            return dataclasses.replace(tc, max_tokens=tokens, update_freq=update_freq)
    return tc


def probe_batch(tokens: int, width: int, vocab: int, multiple: int) -> dict[str, torch.Tensor]:
    """A batch of `tokens` padded tokens at `width` pieces a side (the corpus's longest pairs, the
    shape that needs the most memory), of random ids."""
    width = max(1, min(width, tokens) - 1)  # collate adds EOS / BOS
    rows = max(1, tokens // (width + 1))
    rng = np.random.default_rng(0)
    sides = [[rng.integers(4, vocab, width) for _ in range(rows)] for _ in "st"]
    return collate(sides[0], sides[1], multiple=multiple)


def fits_on_gpu(
    model: Transformer, tc: TrainConfig, device: torch.device, width: int, multiple: int
) -> Callable[[int], bool]:
    """Whether a forward and backward of a batch of `tokens` at `width`, with Adam's moments
    besides, stays within MEMORY_SHARE of the GPU (tried, not estimated: out-of-memory is caught).
    The weights are left as they were; the gradients are dropped."""
    total = torch.cuda.get_device_properties(device).total_memory
    moments = 2 * sum(p.numel() * 4 for p in model.parameters())  # Adam's, allocated at the first step
    scaler = torch.amp.GradScaler(device.type, enabled=False)  # a loss scale changes no memory

    def fits(tokens: int) -> bool:
        batch = probe_batch(tokens, width, model.cfg.tgt_vocab_size, multiple)
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        try:
            accumulate_gradients(model, [batch], tc.label_smoothing, tc.precision, scaler, device)
            torch.cuda.synchronize(device)
            peak = torch.cuda.max_memory_allocated(device)
        except torch.OutOfMemoryError:
            peak = total
        finally:
            model.zero_grad(set_to_none=True)
            torch.cuda.empty_cache()
        return peak + moments <= MEMORY_SHARE * total

    return fits
