"""Token-budget batches of similar-length pairs, and their collation into padded tensors.

Batches are a pure function of (lengths, max_tokens, seed, epoch), so a resumed run
rebuilds exactly the batches it was working through.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from nmt_cli.special_ids import BOS_ID, EOS_ID, PAD_ID

# Pairs are shuffled, then sorted by length inside buckets of this many batches' worth of
# pairs: similar lengths (little padding) while every epoch still sees a fresh mix.
BUCKET_BATCHES = 100


def make_batches(
    src_lengths: np.ndarray,
    tgt_lengths: np.ndarray,
    max_tokens: int,
    seed: int,
    epoch: int,
    shuffle: bool = True,
    pairs: np.ndarray | None = None,
    multiple: int = 1,
) -> list[np.ndarray]:
    """Split pair indices into batches whose padded size (rows x longest side, EOS/BOS included)
    stays within max_tokens. Pairs that alone exceed max_tokens are left out.

    Inside buckets of shuffled pairs, pairs are sorted by their longer side, then by their source.
    With shuffle=False (validation) all pairs are sorted so and batches keep that order.
    `pairs` (say, from `weighted_epoch`) batches those indices, repeats included, instead of all.
    `multiple` > 1 makes shapes that GPU kernels and their caches like: the width is counted
    rounded up to a multiple (as `collate(..., multiple)` pads it) and a batch is cut at a
    multiple of that many rows where it can be, so that most batches of one width share a shape.
    """
    # +1: the EOS appended to the source, and BOS/EOS on the two target views. Widths and
    # indices are kept narrow (uint16 when the lengths are, int32): at 36M pairs each byte a
    # pair is 36 MB in every training process.
    # No temporary copies either: freed memory stays with the process (device.configure_cpu).
    width = np.maximum(src_lengths, tgt_lengths)
    width += 1
    if multiple > 1:
        width += multiple - 1
        width -= width % multiple
    fitting = width <= max_tokens
    if pairs is not None:
        fits, everything = pairs[fitting[pairs]], False
    else:
        everything = bool(fitting.all())
        fits = np.arange(len(width), dtype=np.int32 if len(width) < 2**31 else np.int64)
        if not everything:
            fits = fits[fitting]
    del fitting
    rng = np.random.default_rng([seed, epoch])
    if shuffle:
        mean_width = float((width if everything else width[fits]).mean()) if len(fits) else 1.0
        bucket = max(1, int(BUCKET_BATCHES * max_tokens / max(1.0, mean_width)))
        order = fits
        rng.shuffle(order)  # in place; the same order as fits[rng.permutation(len(fits))]
    else:
        order, bucket = fits, max(1, len(fits))
    batches: list[np.ndarray] = []
    for start in range(0, len(order), bucket):
        chunk = order[start : start + bucket]
        # Then by source length: among pairs of one width either side may be the longer, and a
        # batch cut inside a width holds the short sources together (each side pads to its own
        # longest row). Stable, so ties keep the shuffled order.
        chunk = chunk[np.lexsort((src_lengths[chunk], width[chunk]))]
        batches.extend(_split_sorted(chunk, width[chunk], max_tokens, multiple))
    if shuffle:
        batches = [batches[i] for i in rng.permutation(len(batches))]
    return batches


def weighted_epoch(sizes: list[int], weights: list[float], seed: int, epoch: int) -> np.ndarray:
    """The pair indices of one epoch over consecutive corpora (corpus i holds the sizes[i] pairs
    after the first i), in the ratio of `weights`. The epoch keeps the corpora's total size; each
    corpus gives its share as whole passes plus a part drawn without repeats, different every
    epoch, so the ratio holds to a pair."""
    total = sum(sizes)
    exact = np.asarray(weights, dtype=np.float64) * total / sum(weights)
    shares = np.floor(exact).astype(np.int64)
    shares[np.argsort(shares - exact)[: total - int(shares.sum())]] += 1  # largest remainders round up
    rng = np.random.default_rng([seed, epoch, len(sizes)])  # not make_batches' stream
    dtype = np.int32 if total < 2**31 else np.int64
    parts, start = [], 0
    for size, share in zip(sizes, shares.tolist(), strict=True):
        if share and size:
            whole, rest = divmod(share, size)
            parts.append(np.tile(np.arange(start, start + size, dtype=dtype), whole))
            if rest:
                part = np.arange(start, start + size, dtype=dtype)  # the corpus's width, not int64
                rng.shuffle(part)
                parts.append(part[:rest])
        start += size
    return np.concatenate(parts) if parts else np.zeros(0, dtype)


def _split_sorted(
    indices: np.ndarray, widths: np.ndarray, max_tokens: int, multiple: int = 1
) -> list[np.ndarray]:
    """Greedy cut of length-sorted pairs: a batch grows while rows x current width fits. With
    `multiple` > 1 a full batch keeps the largest multiple of that many rows and hands the rest
    to the next batch (unless it holds fewer rows than `multiple`).

    A step per batch, not per pair (36M pairs are 0.7M batches): widths never shrink, so pair i
    fits a batch that starts at s exactly when i + 1 - max_tokens // width_i <= s, and that bound
    grows with i; the first pair that does not fit is found by binary search."""
    reach = np.arange(1, len(widths) + 1, dtype=np.int64) - max_tokens // widths.astype(np.int64)
    cuts, start, count = [0], 0, len(indices)
    while start < count:
        end = int(np.searchsorted(reach, start, side="right"))  # the first pair that does not fit
        if end >= count:
            break
        rows = end - start
        kept = rows - rows % multiple if rows >= multiple else rows
        cuts.append(start + kept)
        if (end - cuts[-1] + 1) * int(widths[end]) > max_tokens:  # the rows handed on do not fit beside it
            cuts.append(end)
        start = cuts[-1]
    cuts.append(count)
    return [indices[a:b] for a, b in zip(cuts, cuts[1:], strict=False) if b > a]


def real_share(
    batches: list[np.ndarray], src_lengths: np.ndarray, tgt_lengths: np.ndarray, multiple: int = 1
) -> float:
    """Real tokens over padded tokens of `batches` as `collate(..., multiple)` pads them: the
    source with its EOS, the target with its BOS or EOS (both views have one shape, so the
    target counts once)."""
    real = padded = 0
    for idx in batches:
        for lengths in (src_lengths[idx], tgt_lengths[idx]):
            with_added_id = lengths.astype(np.int64) + 1
            width = int(with_added_id.max())
            real += int(with_added_id.sum())
            padded += len(idx) * (width + (-width) % multiple)
    return real / max(1, padded)


def collate(
    src: list[np.ndarray], tgt: list[np.ndarray] | None = None, start_id: int = BOS_ID, multiple: int = 1
) -> dict[str, Tensor]:
    """Padded tensors: src (B, S) ending in EOS; tgt_in (B, T) starting with `start_id` (the
    model's decoder start, BOS for models nmt trained); tgt_out (B, T) ending in EOS. S and T
    are padded up to a multiple of `multiple` (`training.loop.shape_multiple` says which)."""
    tokens, lengths = _flat(src)
    batch = {"src": _pad(tokens, lengths, multiple, end=EOS_ID)}
    if tgt is not None:
        tokens, lengths = _flat(tgt)
        batch["tgt_in"] = _pad(tokens, lengths, multiple, start=start_id)
        batch["tgt_out"] = _pad(tokens, lengths, multiple, end=EOS_ID)
    return batch


def _flat(rows: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """All rows back to back, and each row's length: one copy for the batch, not one per row."""
    lengths = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
    return np.concatenate(rows), lengths


def _pad(
    tokens: np.ndarray, lengths: np.ndarray, multiple: int, start: int | None = None, end: int | None = None
) -> Tensor:
    """(B, W) of PAD_ID holding each row with `start` before it or `end` after it (one of the
    two), W the longest row plus that one id, rounded up to a multiple of `multiple`."""
    width = int(lengths.max()) + 1
    out = np.full((len(lengths), width + (-width) % multiple), PAD_ID, dtype=np.int64)
    # A boolean mask is filled in row-major order: row after row, as `tokens` lies.
    body = out[:, 1:] if start is not None else out
    body[np.arange(body.shape[1]) < lengths[:, None]] = tokens
    if start is not None:
        out[:, 0] = start
    if end is not None:
        out[np.arange(len(lengths)), lengths] = end
    return torch.from_numpy(out)
