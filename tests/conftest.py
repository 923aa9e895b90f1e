"""Shared fixtures for the command tests: a tiny synthetic copy corpus, prepared once per
session, and a tiny Transformer trained on it once per session (the helpers they use, and
tests import, are in helpers.py); and a guard that no test leaves a signal handler behind.

The task is to copy short sentences over a 16-word vocabulary. With --vocab-size 100 and no
byte fallback every word is one sentencepiece piece, so a 1-layer, 32-wide model learns it
to over 95% exact match in a few seconds on one CPU thread. Nothing here reads ../shared.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
from helpers import (
    TRAINED_SAVE_EVERY,
    TRAINED_UPDATES,
    Corpus,
    Pairs,
    TrainedRun,
    nmt,
    one_thread,
    prepare_args,
    sentences,
    train_args,
    write_split,
)

from nmt_cli import Translator

STOPPED_BY: list[int] = []
"""The SIGINT or SIGTERM sent to this test run (Ctrl-C, `kill -TERM`)."""


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist, each test process takes its share of the cores for torch's threads.
    With every process on torch's default of one thread per core, the threads outnumber the cores
    and spin on each other: a tiny model trained 150 steps took 168 s instead of 1.7 s."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        torch.set_num_threads(max(1, len(os.sched_getaffinity(0)) // workers))


def _stop_the_run(signum: int, _frame: object) -> None:
    """Ctrl-C or `kill -TERM` stops the test run as pytest stops on Ctrl-C. An nmt command running
    in this process passes such a signal on here when its own handler took it; where the command
    took the KeyboardInterrupt as its own stop (exit 130), `signal_handlers_kept` ends the run."""
    STOPPED_BY.append(signum)
    raise KeyboardInterrupt


if getattr(signal.getsignal(signal.SIGTERM), "__name__", "") != _stop_the_run.__name__:  # imported once
    for _sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(_sig, _stop_the_run)

# The handlers the tests start with. nmt installs its own for the signals that stop a command
# (and SIGHUP in `nmt serve`) and must put them back: a test process left with nmt's SIGTERM
# handler would take `kill -TERM` for a command's stop and go on.
WATCHED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
STARTING_HANDLERS = {sig: signal.getsignal(sig) for sig in WATCHED_SIGNALS}


def _handlers_put_back() -> list[str]:
    """The watched signals whose handler differs from the starting one, each put back."""
    changed = []
    for sig, handler in STARTING_HANDLERS.items():
        now = signal.getsignal(sig)
        if now != handler:
            changed.append(f"{signal.Signals(sig).name}: {now!r}")
            signal.signal(sig, handler)
    return changed


def _stop_if_signalled() -> None:
    if STOPPED_BY:
        sig = signal.Signals(STOPPED_BY[0])
        pytest.exit(f"stopped by {sig.name}", returncode=128 + sig.value)


@pytest.fixture(autouse=True)
def signal_handlers_kept() -> Iterator[None]:
    """Fails a test after which (or before which: a fixture's set-up) a signal handler is left
    installed; the handler is put back, so that one leak does not fail every later test. A
    SIGINT or SIGTERM that reached the run during the test ends it."""
    _stop_if_signalled()
    if changed := _handlers_put_back():
        pytest.fail(f"signal handlers left installed by a fixture set up for this test: {changed}")
    yield
    _stop_if_signalled()
    if changed := _handlers_put_back():
        pytest.fail(f"signal handlers left installed by this test: {changed}")


def made_once(
    request: pytest.FixtureRequest, factory: pytest.TempPathFactory, name: str, make: Callable[[Path], None]
) -> Path:
    """The folder `name`, made by `make` once for the whole test run and then only read: the test
    processes of pytest-xdist share the parent of their temporary folders, and one waits while
    another makes it (the session's models took about 20 s to train in each process)."""
    root = factory.getbasetemp()
    if hasattr(request.config, "workerinput"):  # a pytest-xdist worker
        root = root.parent
    folder, made = root / name, root / f"{name}.made"
    with (root / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not made.exists():
            shutil.rmtree(folder, ignore_errors=True)  # left by a process that failed making it
            folder.mkdir()
            make(folder)
            made.touch()
    return folder


TEST_SPLITS = {"train": (2000, 0), "valid": (40, 1), "test": (100, 2)}


def _prepare_corpus(root: Path) -> None:
    raw = root / "raw"
    raw.mkdir()
    for name, (count, seed) in TEST_SPLITS.items():
        lines = sentences(count, seed=seed)
        write_split(raw / name, lines, lines)
    code = nmt(*prepare_args(root / "data", raw / "train", valid=raw / "valid"), "--test", raw / "test")
    assert code == 0


@pytest.fixture(scope="session")
def corpus(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    """The copy task, prepared with `nmt prepare` (joint BPE of 100 pieces, no byte fallback)."""
    root = made_once(request, tmp_path_factory, "corpus", _prepare_corpus)
    test = sentences(*TEST_SPLITS["test"])
    return Corpus(root / "raw", root / "data", test, test)


@pytest.fixture(scope="session")
def trained(
    corpus: Corpus, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> TrainedRun:
    """The tiny model trained on the copy task for 1200 updates (about ten seconds), validating and
    saving every 300 updates, so the run has numbered checkpoints, metrics and a config."""

    def train(root: Path) -> None:
        args = train_args(
            corpus.data,
            root / "run",
            "model.dropout=0.0",
            f"train.max_updates={TRAINED_UPDATES}",
            f"train.save_every_updates={TRAINED_SAVE_EVERY}",
            f"train.valid_every_updates={TRAINED_SAVE_EVERY}",
            "train.log_every_updates=50",
            "train.keep_last=10",
            "decode.beam=4",
        )
        assert nmt(*args) == 0

    run_dir = made_once(request, tmp_path_factory, "trained", train) / "run"
    return TrainedRun(
        run_dir, run_dir / "checkpoints" / "checkpoint_last.pt", TRAINED_UPDATES, TRAINED_SAVE_EVERY
    )


@pytest.fixture(scope="session")
def listed(trained: TrainedRun, corpus: Corpus, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The trained copy-task model with a small shortlist: 3 candidates a piece, no frequent ones."""
    out = tmp_path_factory.mktemp("shortlist") / "listed.pt"
    code = nmt(
        "-q", "shortlist", "-m", trained.checkpoint, "--train", corpus.raw / "train", "--src", "src", "--tgt",
        "tgt", "--candidates", 3, "--frequent", 0, "-o", out,
    )  # fmt: skip
    assert code == 0
    return out


def _train_pairs(root: Path) -> None:
    for src, tgt, flip in (("en", "de", False), ("de", "en", True)):
        raw = root / f"raw_{src}{tgt}"
        raw.mkdir()
        for name, n, seed in (("train", 2000, 0), ("valid", 40, 1)):
            lines = sentences(n, seed)
            write_split(raw / name, lines, [" ".join(reversed(x.split())) for x in lines] if flip else lines)
            # prepare reads PREFIX.<language>
            (raw / f"{name}.src").rename(raw / f"{name}.{src}")
            (raw / f"{name}.tgt").rename(raw / f"{name}.{tgt}")
        data = root / f"data_{src}{tgt}"
        prepare = ["-q", "prepare", "--train", raw / "train", "--valid", raw / "valid", "--src", src]
        assert nmt(*prepare, "--tgt", tgt, "--out", data, "--vocab-size", 100, "--no-byte-fallback") == 0
        run = root / f"run_{src}{tgt}"
        assert nmt(*train_args(data, run, "model.dropout=0.0", "train.max_updates=400")) == 0


@pytest.fixture(scope="session")
def pairs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Pairs:
    """Two tiny language pairs, en-de (the copy task) and de-en (the words reversed)."""
    root = made_once(request, tmp_path_factory, "pairs", _train_pairs)
    last = Path("checkpoints") / "checkpoint_last.pt"
    return Pairs(root / "run_ende" / last, root / "run_deen" / last)


@pytest.fixture(scope="module")
def pair_translators(pairs: Pairs) -> dict[str, Translator]:
    """The two pairs loaded by the Python API, one thread each: what a server must answer."""
    with one_thread():
        return {
            "en-de": Translator.load(pairs.en_de, device="cpu", precision="fp32"),
            "de-en": Translator.load(pairs.de_en, device="cpu", precision="fp32"),
        }
