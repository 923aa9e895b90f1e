"""The aten operators of one training update stay within a budget: forward, loss, backward, the
gradient norm and Adam's step of a tiny model, as `nmt train` runs them. On a GPU each operator
is about one kernel launch, and a base model's update is short enough that launches, not
arithmetic, set its pace where they grow (bench/gpu_check.py counts the CUDA kernels there)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from nmt_cli.config import ModelConfig
from nmt_cli.data.batching import collate
from nmt_cli.model import Transformer
from nmt_cli.training.update import accumulate_gradients, apply_update

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from gpu_measure import count_aten_ops  # noqa: E402

# Counted with torch 2.13 on CPU when the budget was set. A change that adds operators fails here;
# one that removes some should lower its number to the new count (the failure message and
# `pytest -s` print it), so that the saving cannot be lost unseen later.
# On CPU 3 of them pad the loss's rows to a multiple of 64 (training/loss.py), which a GPU skips.
BUDGET = {"fp32": 858, "bf16": 1242}

TINY = ModelConfig(
    encoder_layers=2, decoder_layers=2, d_model=64, d_ff=128, heads=4, d_k=16, d_v=16,
    dropout=0.1, src_vocab_size=1000, tgt_vocab_size=1000,
)  # fmt: skip


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_one_update_dispatches_no_more_operators_than_its_budget(precision: str) -> None:
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    model = Transformer(TINY).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-4, betas=(0.9, 0.98), fused=True)
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    sides = [[rng.integers(4, 1000, int(n)) for n in rng.integers(5, 30, 8)] for _ in "st"]
    batch = collate(*sides)  # padded: lengths 5 to 29

    def update() -> None:
        loss = accumulate_gradients(model, [batch], 0.1, precision, scaler, torch.device("cpu"))
        apply_update(model, optimizer, scaler, 5e-4, 1.0, loss.sums[0])

    update()  # Adam's state is made at its first step
    count = count_aten_ops(update)
    print(f"{precision}: {count} aten operators an update (budget {BUDGET[precision]})")
    assert count <= BUDGET[precision], (
        f"{precision}: one update dispatches {count} aten operators, over the budget of "
        f"{BUDGET[precision]}; find the new ones (a TorchDispatchMode printing `func`) or raise it"
    )
