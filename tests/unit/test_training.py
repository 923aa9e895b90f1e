"""Loss, schedule, batching, gradient accumulation and when a run stops."""

import os
import signal

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from nmt_cli.config import ModelConfig, TrainConfig
from nmt_cli.data.batching import collate, make_batches
from nmt_cli.model import Transformer
from nmt_cli.special_ids import PAD_ID
from nmt_cli.training.bookkeeping import Progress
from nmt_cli.training.loop import accumulate_gradients
from nmt_cli.training.loss import label_smoothed_nll
from nmt_cli.training.schedule import inverse_sqrt, linear, noam
from nmt_cli.training.signals import StopSignal
from nmt_cli.training.stopping import Agreed, Stop, budget_spent, check, nothing_to_do


def test_label_smoothing_equals_the_dense_reference():
    torch.manual_seed(0)
    logits = torch.randn(2, 3, 7)
    target = torch.tensor([[4, 5, PAD_ID], [6, 1, 2]])
    eps = 0.1
    loss, nll = label_smoothed_nll(logits, target, eps)
    # Reference: a dense smoothed distribution, 1 - eps on the reference, eps / (V - 1) elsewhere.
    smoothed = torch.full((2, 3, 7), eps / 6)
    smoothed.scatter_(-1, target.unsqueeze(-1), 1 - eps)
    dense = -(smoothed * logits.log_softmax(-1)).sum(-1)
    keep = target != PAD_ID
    torch.testing.assert_close(loss, dense[keep].sum())
    torch.testing.assert_close(nll, F.cross_entropy(logits[keep], target[keep], reduction="sum"))


@pytest.mark.parametrize("chunk", [1 << 22, 10])  # one chunk, and many chunks of one row
def test_label_smoothing_gradient_equals_the_dense_reference(monkeypatch, chunk):
    monkeypatch.setattr("nmt_cli.training.loss.CHUNK_ELEMENTS", chunk)
    torch.manual_seed(0)
    logits = torch.randn(2, 3, 7, requires_grad=True)
    target = torch.tensor([[4, 5, PAD_ID], [6, 1, 2]])
    loss, _ = label_smoothed_nll(logits, target, 0.1)
    (2.0 * loss).backward()
    smoothed = torch.full((2, 3, 7), 0.1 / 6)
    smoothed.scatter_(-1, target.unsqueeze(-1), 0.9)
    reference = logits.detach().clone().requires_grad_()
    dense = -(smoothed * reference.log_softmax(-1)).sum(-1)
    (2.0 * dense[target != PAD_ID].sum()).backward()
    torch.testing.assert_close(logits.grad, reference.grad)
    assert logits.grad[0, 2].abs().max() == 0  # padding gets no gradient


def test_label_smoothing_on_bf16_logits_matches_fp32():
    torch.manual_seed(0)
    logits = torch.randn(1, 5, 50).bfloat16()
    target = torch.tensor([[4, 9, 17, 30, 49]])
    low, _ = label_smoothed_nll(logits, target, 0.1)
    high, _ = label_smoothed_nll(logits.float(), target, 0.1)
    torch.testing.assert_close(low, high)


def test_label_smoothing_zero_is_cross_entropy():
    logits = torch.randn(1, 4, 9)
    target = torch.tensor([[5, 6, 7, 8]])
    loss, nll = label_smoothed_nll(logits, target, 0.0)
    torch.testing.assert_close(loss, nll)


@pytest.mark.parametrize(
    "step, expected",
    [(1, 512**-0.5 * 4000**-1.5), (4000, 512**-0.5 * 4000**-0.5), (16000, 512**-0.5 * 16000**-0.5)],
)
def test_noam_schedule_matches_the_formula(step, expected):
    assert noam(step, 512, 4000) == pytest.approx(expected)
    assert noam(step, 512, 4000, scale=2.0) == pytest.approx(2 * expected)


def test_noam_peaks_at_warmup():
    values = [noam(s, 512, 4000) for s in (3999, 4000, 4001)]
    assert values[1] == max(values)
    assert values[1] == pytest.approx(7.0e-4, rel=0.01)  # the paper's peak for the base model


def test_inverse_sqrt_warms_up_linearly_then_decays():
    assert inverse_sqrt(500, 1e-3, 1000) == pytest.approx(5e-4)
    assert inverse_sqrt(1000, 1e-3, 1000) == pytest.approx(1e-3)
    assert inverse_sqrt(4000, 1e-3, 1000) == pytest.approx(5e-4)


def test_linear_warms_up_then_decays_to_zero_at_the_end_of_the_budget():
    assert linear(50, 1e-3, 100, spent=0.05) == pytest.approx(5e-4)  # warming up: step / warmup
    assert linear(100, 1e-3, 100, spent=0.0) == pytest.approx(1e-3)
    assert linear(400, 1e-3, 100, spent=0.25) == pytest.approx(7.5e-4)  # decaying: 1 - spent
    assert linear(900, 1e-3, 100, spent=1.0) == 0.0
    # A budget spent before the warm-up ends (a slow machine and a short time limit) still ends at 0.
    assert linear(10, 1e-3, 100, spent=0.95) == pytest.approx(5e-5)


def test_the_budget_spent_is_the_larger_share_of_updates_and_minutes():
    both = TrainConfig(max_updates=1000, max_minutes=10.0)
    assert budget_spent(both, 250, 60.0) == pytest.approx(0.25)  # updates ahead of time
    assert budget_spent(both, 100, 300.0) == pytest.approx(0.5)  # time ahead of updates
    assert budget_spent(TrainConfig(max_updates=0, max_minutes=10.0), 10**6, 120.0) == pytest.approx(0.2)
    assert budget_spent(TrainConfig(max_updates=100, max_minutes=0.0), 150, 1e9) == 1.0
    assert budget_spent(TrainConfig(max_updates=0, max_minutes=0.0), 500, 500.0) == 0.0


def test_the_first_stop_condition_met_names_the_stop_and_a_signal_its_exit():
    tc = TrainConfig(max_updates=10, max_minutes=1.0, max_epochs=2, patience=3)
    at_limit = Progress(update=10, train_seconds=90.0, epoch=3, bad_validations=3)
    assert check(tc, at_limit, Agreed(signalled=True), "SIGTERM") == Stop(
        "signal", "stopped by SIGTERM", signal.SIGTERM
    )
    another = check(tc, at_limit, Agreed(signalled=True))
    assert another == Stop("signal", "stopped by a signal to another process")  # exits 0, with the others
    assert check(tc, at_limit, Agreed()) == Stop("limit", "reached train.max_updates = 10")
    # After an update the clock is the processes' agreement, before the first it is the run's own.
    assert check(tc, Progress(train_seconds=90.0), Agreed()) is None
    assert check(tc, Progress(train_seconds=90.0)) == Stop("limit", "reached train.max_minutes = 1")
    assert check(tc, Progress(epoch=3), Agreed()) == Stop("limit", "reached train.max_epochs = 2")
    impatient = check(tc, Progress(bad_validations=3), Agreed())
    assert impatient == Stop("patience", "early stopping (valid loss did not improve for 3 validations)")
    assert check(tc, Progress(bad_validations=3, best_metric="bleu"), Agreed()) is None  # counted for another
    assert check(tc, Progress(update=9, epoch=2, bad_validations=2), Agreed()) is None


def test_a_run_that_met_a_limit_already_has_nothing_to_do():
    tc = TrainConfig(max_updates=10, patience=3)
    assert nothing_to_do(tc, Progress(update=9)) is None
    done = nothing_to_do(tc, Progress(update=10))
    assert done is not None and done.kind == "nothing to do" and done.signal is None
    assert done.message == (
        "nothing to do: the run reached train.max_updates = 10 at update 10; raise it with --set to go on"
    )
    early = nothing_to_do(tc, Progress(update=4, bad_validations=3))
    assert early is not None and early.message.startswith(
        "nothing to do: the run stopped early (train.patience = 3)"
    )
    assert (
        Stop("limit", "reached train.max_updates = 10").at(10).message
        == "reached train.max_updates = 10 at update 10"
    )


def test_batches_respect_the_token_budget_and_cover_every_pair():
    rng = np.random.default_rng(0)
    src, tgt = rng.integers(1, 60, 2000), rng.integers(1, 60, 2000)
    batches = make_batches(src, tgt, 512, seed=3, epoch=1)
    seen = np.concatenate(batches)
    assert sorted(seen.tolist()) == list(range(2000))
    for b in batches:
        assert len(b) * (max(src[b].max(), tgt[b].max()) + 1) <= 512


def test_batches_are_deterministic_per_seed_and_epoch():
    rng = np.random.default_rng(0)
    src, tgt = rng.integers(1, 60, 500), rng.integers(1, 60, 500)
    first = make_batches(src, tgt, 256, seed=1, epoch=1)
    again = make_batches(src, tgt, 256, seed=1, epoch=1)
    other = make_batches(src, tgt, 256, seed=1, epoch=2)
    assert all(np.array_equal(a, b) for a, b in zip(first, again, strict=True))
    assert not all(np.array_equal(a, b) for a, b in zip(first, other, strict=False))


def test_batches_group_similar_lengths():
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 100, 5000)
    batches = make_batches(lengths, lengths, 2000, seed=1, epoch=1)
    padded = sum(len(b) * (lengths[b].max() + 1) for b in batches)
    real = int((lengths + 1).sum())
    assert real / padded > 0.9


def test_accumulating_two_batches_equals_one_batch_of_their_union():
    torch.manual_seed(0)
    cfg = ModelConfig(
        encoder_layers=1,
        decoder_layers=1,
        d_model=16,
        d_ff=32,
        heads=2,
        d_k=8,
        d_v=8,
        dropout=0.0,
        src_vocab_size=30,
        tgt_vocab_size=30,
    )
    model = Transformer(cfg)
    rng = np.random.default_rng(0)
    src = [rng.integers(4, 30, n) for n in (3, 5, 4, 7)]
    tgt = [rng.integers(4, 30, n) for n in (2, 6, 5, 3)]
    scaler = torch.amp.GradScaler("cpu", enabled=False)

    def grads(batches):
        model.zero_grad()
        accumulate_gradients(model, batches, 0.1, "fp32", scaler, torch.device("cpu"))
        return [p.grad.clone() for p in model.parameters()]

    split = grads([collate(src[:2], tgt[:2]), collate(src[2:], tgt[2:])])
    union = grads([collate(src, tgt)])
    for a, b in zip(split, union, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_batches_do_not_depend_on_the_width_of_the_length_arrays() -> None:
    """uint16 lengths (what the corpus gives) and int64 ones make the same batches, so that a run
    started before the index was narrowed resumes through the same batches."""
    rng = np.random.default_rng(0)
    src, tgt = rng.integers(0, 300, 20_000), rng.integers(0, 300, 20_000)
    for shuffle in (True, False):
        wide = make_batches(src, tgt, 4096, 3, 2, shuffle)
        narrow = make_batches(src.astype(np.uint16), tgt.astype(np.uint16), 4096, 3, 2, shuffle)
        assert len(wide) == len(narrow) and all((a == b).all() for a, b in zip(wide, narrow, strict=True))
        assert narrow[0].dtype == np.int32


def test_the_first_signal_names_the_stop_and_a_second_ctrl_c_stops_at_once() -> None:
    told: list[str] = []
    with StopSignal(told.append) as stop:
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGTERM)  # a supervisor's SIGTERM after Ctrl-C: no new name
        assert stop.received == "SIGINT"
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
    assert told == [
        "SIGINT: stopping after this update with a checkpoint (Ctrl-C again: at once, without it)"
    ]
