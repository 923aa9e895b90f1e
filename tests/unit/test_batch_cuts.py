"""Batches cut from length-sorted pairs a batch at a time are the ones the plain greedy rule
gives pair by pair: a batch grows while rows x width fits, and with `multiple` keeps a multiple of
that many rows."""

from __future__ import annotations

import numpy as np
import pytest

from nmt_cli.data.batching import _split_sorted


def pair_by_pair(indices: np.ndarray, widths: np.ndarray, max_tokens: int, multiple: int) -> list[list[int]]:
    batches: list[list[int]] = [[]]
    for index, width in zip(indices.tolist(), widths.tolist(), strict=True):
        batch = batches[-1]
        if (len(batch) + 1) * width <= max_tokens:
            batch.append(index)
            continue
        kept = len(batch) - len(batch) % multiple if len(batch) >= multiple else len(batch)
        batches[-1], handed_on = batch[:kept], batch[kept:]
        if (len(handed_on) + 1) * width > max_tokens:
            batches += [handed_on, [index]]
        else:
            batches.append([*handed_on, index])
    return [batch for batch in batches if batch]


@pytest.mark.parametrize("multiple", [1, 2, 8])
def test_cuts_are_the_greedy_rules(multiple: int) -> None:
    rng = np.random.default_rng(multiple)
    for _ in range(400):
        max_tokens = int(rng.integers(multiple, 500))
        widest = max_tokens - max_tokens % multiple
        widths = np.sort(rng.integers(1, widest + 1, int(rng.integers(0, 300))))
        widths = (widths + multiple - 1) // multiple * multiple  # as make_batches rounds them
        indices = rng.permutation(len(widths)).astype(np.int32)
        got = [
            batch.tolist() for batch in _split_sorted(indices, widths.astype(np.uint16), max_tokens, multiple)
        ]
        assert got == pair_by_pair(indices, widths, max_tokens, multiple)
