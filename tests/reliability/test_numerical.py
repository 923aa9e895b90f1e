"""Numerical faults in training: a NaN or inf loss, or a NaN gradient behind a finite loss, is
skipped (no optimizer step), logged to metrics.jsonl and warned about, and the run goes on; a run
that keeps producing them stops after `bookkeeping.MAX_BAD_UPDATES` in a row with one clear line and exit
1, keeping its last good checkpoint. Faults are injected by wrapping the loss the loop calls."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from helpers import Corpus, nmt, train_args

from nmt_cli import checkpoint
from nmt_cli.report import MetricsLog
from nmt_cli.training import bookkeeping, update

NAN, INF = float("nan"), float("inf")


def inject(monkeypatch: pytest.MonkeyPatch, fault: Callable[[int], str | None]) -> None:
    """Make the n-th loss computation (one per update here: update_freq 1) faulty when
    `fault(n)` names a fault: "nan loss", "inf loss" or "nan gradient"."""
    real = update.linear_label_smoothed_nll
    calls = itertools.count(1)

    def faulty(hidden: torch.Tensor, weight: torch.Tensor, bias, target: torch.Tensor, epsilon: float):
        kind = fault(next(calls))
        if kind == "nan gradient":  # the loss stays finite; the gradient reaching the model is NaN
            hidden.register_hook(lambda grad: torch.full_like(grad, NAN))
        loss, nll = real(hidden, weight, bias, target, epsilon)
        if kind in ("nan loss", "inf loss"):
            bad = NAN if kind == "nan loss" else INF
            loss, nll = loss * bad, nll * bad
        return loss, nll

    monkeypatch.setattr(update, "linear_label_smoothed_nll", faulty)


def all_finite(path: Path) -> bool:
    model = checkpoint.load(path).model
    return all(bool(torch.isfinite(t).all()) for t in model.values() if t.is_floating_point())


def run_args(
    corpus: Corpus, run_dir: Path, *settings: str, save_every: int, log_every: int, quiet: bool = True
) -> list[str]:
    """`nmt train` into `run_dir` with `settings`, without validation, saving every `save_every`
    updates and logging every `log_every`."""
    save, log = f"train.save_every_updates={save_every}", f"train.log_every_updates={log_every}"
    return train_args(corpus.data, run_dir, *settings, save, "train.valid_every_updates=0", log, quiet=quiet)


def test_faulty_updates_are_skipped_and_logged(
    corpus: Corpus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    faults = {3: "nan loss", 6: "inf loss", 9: "nan gradient"}
    inject(monkeypatch, faults.get)
    run_dir = tmp_path / "run"
    args = run_args(corpus, run_dir, "train.max_updates=10", save_every=5, log_every=1, quiet=False)
    capsys.readouterr()
    assert nmt(*args) == 0
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.count("non-finite loss or gradient, skipped") == 3
    records = MetricsLog(run_dir / "metrics.jsonl").read()
    skips = [r for r in records if r["type"] == "skip"]
    # Calls 3, 6 and 9 are the attempts at updates 3, 5 and 7: the update count does not move on a skip.
    assert [r["update"] for r in skips] == [2, 4, 6]
    # Where each skipped batch is in the data.
    assert [(r["epoch"], r["batch"]) for r in skips] == [(1, 3), (1, 6), (1, 9)]
    assert math.isnan(skips[0]["loss"]) and math.isinf(skips[1]["loss"])
    assert math.isfinite(skips[2]["loss"]) and not math.isfinite(skips[2]["grad_norm"])
    trained = [r for r in records if r["type"] == "train"]
    assert [r["update"] for r in trained] == list(range(1, 11))
    assert all(math.isfinite(r["loss"]) for r in trained)
    last = run_dir / "checkpoints" / "checkpoint_last.pt"
    assert checkpoint.load(last).update == 10
    assert all_finite(last)


def test_a_skip_inside_a_log_window_is_counted_when_the_window_is_read(
    corpus: Corpus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The host reads an update's outcome only when it logs, validates or saves: until then a
    queued update counts as stepped, and the count is exact at every record and checkpoint."""
    inject(monkeypatch, {3: "nan loss", 9: "nan gradient"}.get)
    run_dir = tmp_path / "run"
    args = run_args(corpus, run_dir, "train.max_updates=10", save_every=4, log_every=5)
    assert nmt(*args) == 0
    records = MetricsLog(run_dir / "metrics.jsonl").read()
    assert [r["update"] for r in records if r["type"] == "skip"] == [2, 7]
    # Read at the next log, each names where its own batch is in the data (calls 3 and 9).
    assert [(r["epoch"], r["batch"]) for r in records if r["type"] == "skip"] == [(1, 3), (1, 9)]
    assert [r["update"] for r in records if r["type"] == "train"] == [5, 10]
    ckpts = run_dir / "checkpoints"
    assert sorted(p.name for p in ckpts.glob("*.pt")) == [
        "checkpoint_10.pt",
        "checkpoint_4.pt",
        "checkpoint_8.pt",
        "checkpoint_last.pt",
    ]
    assert [checkpoint.load(ckpts / f"checkpoint_{n}.pt").update for n in (4, 8, 10)] == [4, 8, 10]


def test_a_run_that_keeps_diverging_stops_and_keeps_the_last_good_checkpoint(
    corpus: Corpus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    good = 4
    inject(monkeypatch, lambda n: "nan loss" if n > good else None)
    run_dir = tmp_path / "run"
    args = run_args(corpus, run_dir, "train.max_updates=100", save_every=2, log_every=1)
    ckpts = run_dir / "checkpoints"
    capsys.readouterr()
    assert nmt(*args) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("nmt: error: training diverged"), err
    assert f"{bookkeeping.MAX_BAD_UPDATES} updates in a row" in lines[0] and str(ckpts) in lines[0]

    records = MetricsLog(run_dir / "metrics.jsonl").read()
    assert len([r for r in records if r["type"] == "skip"]) == bookkeeping.MAX_BAD_UPDATES
    assert max(r["update"] for r in records if r["type"] == "train") == good
    assert sorted(p.name for p in ckpts.glob("*.pt")) == [
        "checkpoint_2.pt",
        "checkpoint_4.pt",
        "checkpoint_last.pt",
    ]
    last = ckpts / "checkpoint_last.pt"
    assert checkpoint.load(last).update == good
    assert all_finite(last)
    numbered, kept = checkpoint.load(ckpts / "checkpoint_4.pt"), checkpoint.load(last)
    assert numbered.update == good and all(torch.equal(numbered.model[n], t) for n, t in kept.model.items())

    # With the fault gone, the run resumes from its last good checkpoint.
    monkeypatch.undo()
    assert nmt(*args, "--set", "train.max_updates=6") == 0  # the later --set wins
    assert checkpoint.load(last).update == 6 and all_finite(last)


def test_a_skip_past_the_checkpoint_is_logged_once_when_a_killed_run_redoes_it(
    corpus: Corpus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Call 5 is skipped after checkpoint 4 (its record says update 4); the run is then killed
    # before another checkpoint. Resumed at checkpoint 4's place in the data, it meets the same
    # batch first (call 8 of the two sessions) and skips it again: one record of it, not two.
    inject(monkeypatch, {5: "nan loss", 8: "nan loss"}.get)
    run_dir = tmp_path / "run"
    args = run_args(corpus, run_dir, save_every=4, log_every=1)
    assert nmt(*args, "--set", "train.max_updates=4") == 0
    ckpts = run_dir / "checkpoints"
    at_4 = (ckpts / "checkpoint_last.pt").read_bytes()
    assert nmt(*args, "--set", "train.max_updates=6") == 0
    # What a hard kill after update 5 leaves: checkpoint_last is still update 4's.
    (ckpts / "checkpoint_6.pt").unlink()
    (ckpts / "checkpoint_last.pt").write_bytes(at_4)
    assert nmt(*args, "--set", "train.max_updates=6") == 0
    records = MetricsLog(run_dir / "metrics.jsonl").read()
    skips = [(r["update"], r["epoch"], r["batch"]) for r in records if r["type"] == "skip"]
    assert skips == [(4, 1, 5)]  # update 5's batch, the fifth of the first epoch
    assert [r["update"] for r in records if r["type"] == "train"] == [1, 2, 3, 4, 5, 6]
