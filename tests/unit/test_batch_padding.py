"""How much of a batch is real tokens: `real_share` counts what `collate` pads, and batches of
WMT-like and Multi30k-like lengths at the paper's token budgets are at least 90% real tokens at
the multiple an eager GPU run pads to."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from nmt_cli.config import TrainConfig
from nmt_cli.data.batching import collate, make_batches, real_share
from nmt_cli.special_ids import PAD_ID
from nmt_cli.training.loop import shape_multiple

GPU, CPU = torch.device("cuda"), torch.device("cpu")  # a device name: nothing runs on it


def wmt_like(pairs: int = 200_000) -> tuple[np.ndarray, np.ndarray]:
    """Log-normal source lengths (mean ~27 pieces, as newstest's), targets ~1.1 times as long
    with log-normal noise (correlation ~0.96), both capped at 250."""
    rng = np.random.default_rng(0)
    src = np.clip(np.rint(rng.lognormal(3.15, 0.55, pairs)), 1, 250)
    tgt = np.clip(np.rint(src * 1.1 * rng.lognormal(0.0, 0.15, pairs)), 1, 250)
    return src.astype(np.uint16), tgt.astype(np.uint16)


def multi30k_like(pairs: int = 29_000) -> tuple[np.ndarray, np.ndarray]:
    """Gamma-distributed source lengths (mean ~13 pieces), targets ~14/13 times as long with
    log-normal noise (correlation ~0.93)."""
    rng = np.random.default_rng(0)
    src = np.clip(np.rint(rng.gamma(6.0, 13 / 6, pairs)), 1, 80)
    tgt = np.clip(np.rint(src * 14 / 13 * rng.lognormal(0.0, 0.15, pairs)), 1, 80)
    return src.astype(np.uint16), tgt.astype(np.uint16)


def test_an_eager_gpu_run_pads_nothing_and_a_compiled_one_to_eight() -> None:
    eager, compiled = TrainConfig(), dataclasses.replace(TrainConfig(), compile=True)
    assert shape_multiple(eager, GPU) == 1
    assert shape_multiple(eager, CPU) == 1
    assert shape_multiple(compiled, GPU) == 8
    assert shape_multiple(dataclasses.replace(eager, pad_to_multiple=16), GPU) == 16


@pytest.mark.parametrize("multiple", [1, 8])
def test_real_share_counts_the_tokens_collate_pads(multiple: int) -> None:
    rng = np.random.default_rng(3)
    src_lengths, tgt_lengths = rng.integers(0, 30, 200), rng.integers(0, 30, 200)
    batches = make_batches(src_lengths, tgt_lengths, 300, seed=1, epoch=1, multiple=multiple)
    real = padded = 0
    for idx in batches:
        src = [rng.integers(4, 100, src_lengths[i]) for i in idx]
        tgt = [rng.integers(4, 100, tgt_lengths[i]) for i in idx]
        batch = collate(src, tgt, multiple=multiple)
        for side in (batch["src"], batch["tgt_out"]):
            real += int((side != PAD_ID).sum())
            padded += side.numel()
    assert real_share(batches, src_lengths, tgt_lengths, multiple) == pytest.approx(real / padded)


@pytest.mark.parametrize("lengths", [wmt_like, multi30k_like])
@pytest.mark.parametrize("max_tokens", [25_000, 3_125])
def test_batches_of_an_eager_gpu_run_are_nine_tenths_real_tokens(lengths, max_tokens: int) -> None:
    src, tgt = lengths()
    multiple = shape_multiple(TrainConfig(), GPU)
    batches = make_batches(src, tgt, max_tokens, seed=1, epoch=1, multiple=multiple)
    assert real_share(batches, src, tgt, multiple) >= 0.90
