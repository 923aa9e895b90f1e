"""Progress where stderr is no terminal (a log file, `| tee`, CI, nohup): training writes one line
per log interval (update, loss, tokens/s and the time left to its stop condition), and the other
long commands turn their progress bars into a line at most every PROGRESS_LINE_SECONDS. --quiet
silences both."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from helpers import Corpus, TrainedRun, nmt, nmt_command, prepare_args, subprocess_env, train_args

from nmt_cli import report
from nmt_cli.config import TrainConfig
from nmt_cli.training.bookkeeping import Bookkeeping, Progress

TRAIN_LINE = re.compile(
    r"update (\d+)/30, epoch \d+: loss \d+\.\d{3}, lr \S+, [\d,]+ tok/s, \d+\.\d\d upd/s, "
    r"\w+ trained, \w+ left to train\.max_updates"
)


def _train_in_a_pipe(corpus: Corpus, run_dir: Path, quiet: bool) -> str:
    args = train_args(
        corpus.data,
        run_dir,
        "train.max_updates=30",
        "train.log_every_updates=10",
        "train.valid_every_updates=0",
        "train.save_every_updates=0",
        quiet=quiet,
    )
    command = nmt_command(*args)
    done = subprocess.run(command, capture_output=True, text=True, env=subprocess_env(), timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stderr


def test_training_writes_a_line_per_log_interval_to_a_pipe(corpus: Corpus, tmp_path: Path) -> None:
    err = _train_in_a_pipe(corpus, tmp_path / "run", quiet=False)
    updates = [int(m.group(1)) for m in TRAIN_LINE.finditer(err)]
    assert updates == [10, 20, 30], err
    assert err.index("training") < err.index("update 10/30") < err.index("reached train.max_updates")


def test_quiet_training_writes_no_progress_line(corpus: Corpus, tmp_path: Path) -> None:
    assert _train_in_a_pipe(corpus, tmp_path / "run", quiet=True) == ""


def _book(tc: TrainConfig, progress: Progress, epoch_size: int = 0) -> Bookkeeping:
    book = Bookkeeping.__new__(Bookkeeping)
    book.tc, book.progress, book.epoch_size = tc, progress, epoch_size
    return book


def test_the_time_left_is_to_the_stop_condition_met_first() -> None:
    progress = Progress(update=100, epoch=2, batch=50, train_seconds=120.0)
    # 2 updates a second and 800 updates to go: 400 s; 15 minutes less 2 trained: 780 s.
    book = _book(TrainConfig(max_updates=900, max_minutes=15.0), progress)
    assert book.time_left(2.0, 10.0) == (400.0, "train.max_updates")
    book = _book(TrainConfig(max_updates=0, max_minutes=15.0), progress)
    assert book.time_left(2.0, 10.0) == (780.0, "train.max_minutes")
    # The window began at batch 30 of epoch 2 and took 10 s for 20 batches; epochs of 100 batches:
    # 50 left of epoch 2 and 100 of epoch 3, 150 batches at 2 a second.
    book = _book(TrainConfig(max_updates=0, max_epochs=3), progress, epoch_size=100)
    book.window = type("Window", (), {"place": (2, 30)})()
    assert book.time_left(2.0, 10.0) == (75.0, "train.max_epochs")
    assert _book(TrainConfig(max_updates=0), progress).time_left(2.0, 10.0) is None


def test_long_commands_write_progress_lines_in_a_log(
    corpus: Corpus, trained: TrainedRun, tmp_path: Path, monkeypatch, capsys
) -> None:
    monkeypatch.setattr(report, "PROGRESS_LINE_SECONDS", 0.0)  # a line at every step
    args = prepare_args(tmp_path / "data", corpus.raw / "train", valid=corpus.raw / "valid", quiet=False)
    assert nmt(*args) == 0
    err = capsys.readouterr().err
    assert re.search(r"encoding train: [\d,]+/2,000 pairs \(\d+%\), [\d,.]+ pairs/s, \w+ so far", err), err
    translate = ("translate", "-m", trained.checkpoint, "-i", corpus.raw / "test.src", "--threads", 1)
    assert nmt(*translate, "-o", tmp_path / "out") == 0
    err = capsys.readouterr().err
    assert re.search(r"translating: [\d,]+/100 lines \(\d+%\), [\d,.]+ lines/s", err), err
    assert nmt("-q", *translate, "-o", tmp_path / "quiet") == 0
    assert capsys.readouterr().err == ""
    assert nmt("average", "--run", trained.run_dir, "--last", 3, "-o", tmp_path / "avg.pt") == 0
    assert re.search(
        r"averaging: 1/2 checkpoints \(50%\).*\naveraging: 2/2 checkpoints", capsys.readouterr().err
    )


def test_short_work_writes_no_progress_line(corpus: Corpus, tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(report, "PROGRESS_LINE_SECONDS", 3600.0)  # however busy the machine
    args = prepare_args(tmp_path / "data", corpus.raw / "train", valid=corpus.raw / "valid", quiet=False)
    assert nmt(*args) == 0
    assert "encoding train" not in capsys.readouterr().err  # done within PROGRESS_LINE_SECONDS
