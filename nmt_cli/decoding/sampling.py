"""Sampling's draws: each line takes its own stream of numbers in [0, 1), a function of the seed,
the line's pieces and the step alone, so that a sampled translation does not depend on the batch
it shares, the process that decodes it or the other lines; a draw turns the step's number into a
piece of the tempered, truncated distribution.
"""

from __future__ import annotations

import hashlib

import torch
from torch import Tensor

from nmt_cli.decoding.settings import Sampling
from nmt_cli.special_ids import PAD_ID

# splitmix64's constants as int64 values.
_GOLDEN, _MIX1, _MIX2 = (c - 2**64 for c in (0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB))


def row_keys(src: Tensor, seed: int) -> Tensor:
    """One int64 key per sentence, a 64-bit hash of `seed` and its ids: what a sampled translation
    depends on (not the batch it shares, the process or the order of the lines)."""
    salt = str(seed).encode()[:64]
    keys = [
        int.from_bytes(
            hashlib.blake2b(row[row != PAD_ID].numpy().tobytes(), digest_size=8, key=salt).digest()
        )
        for row in src.cpu()
    ]
    return torch.tensor([k - 2**64 if k >= 2**63 else k for k in keys], dtype=torch.long, device=src.device)


def _shift(x: Tensor, n: int) -> Tensor:
    """Logical right shift of int64 values (torch's >> keeps the sign)."""
    return (x >> n) & ((1 << (64 - n)) - 1)


def uniforms(keys: Tensor, step: int) -> Tensor:
    """A number in [0, 1) per row, a function of the row's key and the step alone: splitmix64's
    mixing (Steele et al., 2014) in int64 arithmetic, which wraps around as uint64 would."""
    x = keys + torch.full_like(keys, _GOLDEN) * (step + 1)
    x = (x ^ _shift(x, 30)) * _MIX1
    x = (x ^ _shift(x, 27)) * _MIX2
    x = x ^ _shift(x, 31)
    return _shift(x, 11).double() / 2.0**53


def draw(log_probs: Tensor, sampling: Sampling, numbers: Tensor) -> Tensor:
    """One piece per row, (A, 1), from the tempered and truncated distribution, chosen by inverse
    transform with the row's number in [0, 1)."""
    # Shifted so that the likeliest piece is at 0 before dividing: a tiny temperature then gives
    # -inf for the others, not -inf (and NaN) for all.
    logits = log_probs.double()
    logits = (logits - logits.amax(dim=-1, keepdim=True)) / sampling.temperature
    topk, topp = sampling.topk, sampling.topp  # the method's own is set, the other None
    if topk is not None and 0 < topk < logits.shape[-1]:
        logits, pieces = logits.topk(topk, dim=-1)
    else:
        logits, pieces = logits.sort(dim=-1, descending=True)
    probs = logits.softmax(dim=-1)
    if topp is not None:
        # Keep a piece while the mass of the likelier ones is still below p (the first always).
        probs = probs.masked_fill(probs.cumsum(dim=-1) - probs >= topp, 0.0)
    cdf = probs.cumsum(dim=-1)  # float64, like the uniforms
    chosen = torch.searchsorted(cdf, (numbers * cdf[:, -1]).unsqueeze(1), right=True)
    return pieces.gather(1, chosen.clamp(max=pieces.shape[-1] - 1))
