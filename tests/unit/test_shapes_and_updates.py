"""What the GPU-minded parts of training keep exact: batches padded to shape buckets train the
model exactly as unpadded ones, a non-finite update queued on the device changes nothing, and
batches made ahead in a thread arrive in order."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from helpers import tiny_model

from nmt_cli.data.batching import collate, make_batches
from nmt_cli.data.prefetch import Ahead
from nmt_cli.model import Transformer
from nmt_cli.training.update import Pending, accumulate_gradients, apply_update

CPU = torch.device("cpu")


def pairs(n: int, seed: int = 0) -> tuple[list[np.ndarray], list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    src = [rng.integers(4, 40, int(k)) for k in rng.integers(1, 13, n)]
    tgt = [rng.integers(4, 40, int(k)) for k in rng.integers(1, 13, n)]
    return src, tgt


def gradients(model: Transformer, batch: dict) -> tuple[float, list[torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    loss = accumulate_gradients(model, [batch], 0.1, "fp32", scaler, CPU)
    return float(loss.sums[0]), [p.grad.clone() for p in model.parameters()]


def test_lengths_padded_to_a_multiple_change_neither_the_loss_nor_the_gradients() -> None:
    model = tiny_model().train()
    src, tgt = pairs(6)
    plain = collate(src, tgt)
    padded = collate(src, tgt, multiple=8)
    assert all(padded[k].shape[1] % 8 == 0 for k in padded)
    assert (
        padded["src"].shape[1] != plain["src"].shape[1]
        or padded["tgt_in"].shape[1] != plain["tgt_in"].shape[1]
    )
    loss, grads = gradients(model, plain)
    padded_loss, padded_grads = gradients(model, padded)
    assert padded_loss == pytest.approx(loss, rel=1e-5)
    for a, b in zip(grads, padded_grads, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-6)


def test_batches_cut_at_a_multiple_of_rows_keep_the_budget_and_few_shapes() -> None:
    rng = np.random.default_rng(1)
    src, tgt = rng.integers(1, 120, 20_000), rng.integers(1, 120, 20_000)
    budget = 4096
    plain = make_batches(src, tgt, budget, seed=2, epoch=1)
    batches = make_batches(src, tgt, budget, seed=2, epoch=1, multiple=8)
    assert sorted(np.concatenate(batches).tolist()) == list(range(20_000))  # every pair, once
    shapes = set()
    for b in batches:
        width = max(int(src[b].max()), int(tgt[b].max())) + 1
        width += -width % 8  # as collate pads it
        assert len(b) * width <= budget
        shapes.add((len(b), width))
    full = sum(len(b) % 8 == 0 for b in batches)
    assert full / len(batches) > 0.9, "most batches are a whole number of 8-row groups"
    plain_shapes = {(len(b), max(int(src[b].max()), int(tgt[b].max())) + 1) for b in plain}
    assert len(shapes) < len(plain_shapes) / 3
    assert len(batches) <= len(plain) * 1.15, "rounding costs few extra batches"


def test_a_non_finite_update_changes_no_weight_moment_or_step_count() -> None:
    model = tiny_model().train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, fused=True)
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    src, tgt = pairs(4)
    batch = collate(src, tgt)
    loss = accumulate_gradients(model, [batch], 0.1, "fp32", scaler, CPU)
    apply_update(model, opt, scaler, 1e-3, 1.0, loss.sums[0])  # one good step: Adam has moments
    before = [p.detach().clone() for p in model.parameters()]
    state = {k: v.clone() for k, v in opt.state[next(model.parameters())].items()}
    for fault in ("loss", "gradient"):
        loss = accumulate_gradients(model, [batch], 0.1, "fp32", scaler, CPU)
        if fault == "gradient":
            next(model.parameters()).grad.view(-1)[0] = math.nan
        total = loss.sums[0] * math.inf if fault == "loss" else loss.sums[0]
        norm, skipped = apply_update(model, opt, scaler, 1e-3, 1.0, total).tolist()
        assert skipped == 1.0
        assert all(torch.equal(a, p) for a, p in zip(before, model.parameters(), strict=True))
        after = opt.state[next(model.parameters())]
        assert all(torch.equal(state[k], after[k]) for k in state), "moments and step count kept"
        assert all(p.grad is None for p in model.parameters())
    loss = accumulate_gradients(model, [batch], 0.1, "fp32", scaler, CPU)
    norm, skipped = apply_update(model, opt, scaler, 1e-3, 1.0, loss.sums[0]).tolist()
    assert skipped == 0.0 and math.isfinite(norm)
    assert not torch.equal(before[0], next(model.parameters()))
    assert float(opt.state[next(model.parameters())]["step"]) == 2.0


def test_a_step_queued_on_the_device_equals_a_step_decided_on_the_host() -> None:
    """The fused step with found_inf = 0 and the clipping by the norm computed beside it move the
    weights as torch's clip_grad_norm_ and a plain fused Adam step do."""
    a, b = tiny_model(seed=3).train(), tiny_model(seed=3).train()
    src, tgt = pairs(5, seed=3)
    batch = collate(src, tgt)
    opt_a = torch.optim.Adam(a.parameters(), lr=1e-2, fused=True)
    opt_b = torch.optim.Adam(b.parameters(), lr=1e-2, fused=True)
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    for _ in range(3):
        loss = accumulate_gradients(a, [batch], 0.1, "fp32", scaler, CPU)
        norm, _ = apply_update(a, opt_a, scaler, 1e-2, 0.5, loss.sums[0]).tolist()
        accumulate_gradients(b, [batch], 0.1, "fp32", scaler, CPU)
        reference = float(torch.nn.utils.clip_grad_norm_(b.parameters(), 0.5))
        opt_b.step()
        opt_b.zero_grad(set_to_none=True)
        assert norm == pytest.approx(reference, rel=1e-6)
    for p, q in zip(a.parameters(), b.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=0, atol=0)


def test_pending_updates_are_read_in_order_and_then_forgotten() -> None:
    pending = Pending()
    for i in range(3):
        loss = type("L", (), {"sums": torch.tensor([float(i), 2.0 * i]), "tokens": 10 + i})()
        pending.add(loss, torch.tensor([0.5, float(i == 1)]))  # type: ignore[arg-type]
    settled = pending.settle()
    assert [(s.loss, s.nll, s.skipped, s.tokens) for s in settled] == [
        (0.0, 0.0, False, 10),
        (1.0, 2.0, True, 11),
        (2.0, 4.0, False, 12),
    ]
    assert len(pending) == 0 and pending.settle() == []


def test_work_made_ahead_arrives_in_order_and_its_errors_reach_the_consumer() -> None:
    with Ahead(iter(range(50)), depth=3) as ahead:
        assert list(ahead) == list(range(50))

    def failing():
        yield 1
        raise ValueError("corpus gone")

    with Ahead(failing()) as ahead, pytest.raises(ValueError, match="corpus gone"):
        list(ahead)


def test_leaving_early_stops_the_thread_making_work_ahead() -> None:
    made = itertools.count()

    def endless():
        while True:
            yield next(made)

    with Ahead(endless(), depth=2) as ahead:
        assert next(iter(ahead)) == 0
    thread = ahead._thread
    assert not thread.is_alive()
    assert next(made) <= 5, "the thread stops a few items ahead, not at the end"
