"""`nmt train --tensorboard DIR`: metrics.jsonl's train and valid records as TensorBoard scalars,
read back with TensorBoard's own reader: one point per logged update per scalar, equal to the
record's value, across a resume that follows a session killed past its checkpoint; only the
writing process writes; and a run that asks for them without the extra is refused in one line
before it trains."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import Corpus, nmt, one_line_error, train_args

from nmt_cli.report import MetricsLog, Reporter
from nmt_cli.training import tensorboard

EVERY = ("train.log_every_updates=5", "train.save_every_updates=10", "train.valid_every_updates=10")


def _scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar curve of the run's event files as TensorBoard shows it (points hidden by a
    restart left out), as (step, value) pairs."""
    event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    reader = event_accumulator.EventAccumulator(str(folder), size_guidance={event_accumulator.SCALARS: 0})
    reader.Reload()
    return {tag: [(e.step, e.value) for e in reader.Scalars(tag)] for tag in reader.Tags()["scalars"]}


def _curves(records: list[dict]) -> dict[str, list[tuple[int, float]]]:
    """The curves metrics.jsonl's records make, values as TensorBoard stores them (float32)."""
    curves: dict[str, list[tuple[int, float]]] = {}
    for record in records:
        if record["type"] not in ("train", "valid"):
            continue
        for name, value in record.items():
            if name not in ("type", "update"):
                curves.setdefault(f"{record['type']}/{name}", []).append(
                    (record["update"], float(np.float32(value)))
                )
    return curves


def _killed_past_its_checkpoint(run: Path, board: Path, updates: tuple[int, ...]) -> None:
    """What a session killed after `updates` (past its last checkpoint) leaves: records in
    metrics.jsonl and points in an event file of its own, all of which the resumed run redoes."""
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(board))
    log = MetricsLog(run / "metrics.jsonl")
    for update in updates:
        writer.add_scalar("train/loss", 99.0, update)
        writer.add_scalar("valid/loss", 99.0, update)
        log.write({"type": "train", "update": update, "loss": 99.0})
    writer.close()


def test_a_resumed_run_continues_the_same_curves(corpus: Corpus, tmp_path: Path) -> None:
    run, logdir = tmp_path / "m30k", tmp_path / "tb"
    first = train_args(corpus.data, run, *EVERY, "train.max_updates=20")
    assert nmt(*first, "--tensorboard", logdir) == 0
    board = logdir / "m30k"  # the run directory's name
    assert [point[0] for point in _scalars(board)["train/loss"]] == [5, 10, 15, 20]

    _killed_past_its_checkpoint(run, board, (25, 30))
    # Resumed without the option: the run's config.toml keeps train.tensorboard.
    assert nmt(*train_args(corpus.data, run, *EVERY, "train.max_updates=40")) == 0

    records = MetricsLog(run / "metrics.jsonl").read()
    assert [r["update"] for r in records if r["type"] == "train"] == list(range(5, 41, 5))
    assert [r["update"] for r in records if r["type"] == "valid"] == [10, 20, 30, 40]
    shown, expected = _scalars(board), _curves(records)
    assert set(shown) == set(expected)
    assert {"train/loss", "train/ppl", "train/lr", "train/tokens_per_s", "valid/loss"} <= set(shown)
    for tag, points in expected.items():
        assert shown[tag] == points, tag  # one point per record: no gap, no repeat, the same value


def test_only_the_writing_process_opens_a_writer(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    with tensorboard.metrics_log(run, str(tmp_path / "tb"), 0, Reporter(quiet=True), writes=False) as log:
        log.write({"type": "train", "update": 1, "loss": 1.0})
    assert type(log) is MetricsLog and not (tmp_path / "tb").exists()
    assert json.loads((run / "metrics.jsonl").read_text(encoding="utf-8"))["loss"] == 1.0


@pytest.mark.parametrize(
    "asked", [["--tensorboard", "tb"], ["--set", "train.tensorboard=tb"]], ids=["option", "key"]
)
def test_without_the_extra_the_run_is_refused_before_it_trains(
    asked: list[str],
    corpus: Corpus,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for name in [
        n for n in sys.modules if n.split(".")[0] == "tensorboard" or n.startswith("torch.utils.tensorboard")
    ]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "tensorboard", None)  # as if not installed
    monkeypatch.chdir(tmp_path)
    run = tmp_path / "run"
    assert nmt(*train_args(corpus.data, run, "train.max_updates=5"), *asked) == 2
    line = one_line_error(capsys)
    assert 'pip install "nmt-cli[tensorboard]"' in line and "--tensorboard" in line
    assert not (run / "checkpoints").exists() and not (tmp_path / "tb").exists()
