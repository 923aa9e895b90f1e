"""The test run that tests/unit/test_stopping_the_run.py starts and stops with SIGTERM while its one
test blocks inside a command: its file name keeps it out of the suite's own collection."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from helpers import nmt

from nmt_cli.commands import average
from nmt_cli.errors import NmtError
from nmt_cli.training.signals import StopSignal

CHILD = "NMT_TEST_STOPPED_RUN"


def _blocks_in_a_command(inside: Path, trained_like: bool) -> None:
    """What `average.run` is replaced with: says it is running, then waits for a stop, plainly or
    (trained_like) under training's StopSignal, which ends in an NmtError of exit 128 + signal."""
    inside.touch()
    if not trained_like:
        time.sleep(120)
        return
    with StopSignal() as stop:
        deadline = time.monotonic() + 120
        while stop.received is None and time.monotonic() < deadline:
            time.sleep(0.01)
    if stop.received is not None:
        sig = signal.Signals[stop.received]
        raise NmtError(f"stopped by {sig.name}", exit_code=128 + sig.value)


@pytest.mark.parametrize("trained_like", [False, True], ids=["command", "training"])
def test_block_in_a_command(trained_like: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = Path(os.environ[CHILD])
    inside = folder / "inside"
    monkeypatch.setattr(average, "run", lambda *a, **k: _blocks_in_a_command(inside, trained_like))
    nmt("average", "x.pt", "-o", folder / "avg.pt")
    (folder / "went-on").touch()  # the run went on after the stop
