"""Decoding workers (decoding.workers) stopped while calls are in flight, by close() or by
start_workers() replacing them: every such call fails with WorkerDied saying the workers were
closed (not that one died, nor a bare CancelledError), and no call is left waiting."""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from pathlib import Path

import pytest
from helpers import wait_until

from nmt_cli.decoding.workers import WorkerDied, WorkerPool, can_fork

pytestmark = pytest.mark.skipif(not can_fork(), reason="decoding workers are forked")


def busy(lines: list[str], folder: str) -> tuple[list[str], int]:
    """A worker's share that never ends by itself; it leaves a file to say it has started."""
    Path(folder, str(os.getpid())).touch()
    time.sleep(600)
    return lines, 0


def test_calls_in_flight_when_the_workers_close_fail_with_one_clear_line(tmp_path: Path) -> None:
    before = {process.pid for process in multiprocessing.active_children()}
    pool = WorkerPool(busy, 2)
    outcomes: list[BaseException | None] = []

    def call() -> None:
        try:
            pool.map(["a line"], str(tmp_path))
            outcomes.append(None)
        except BaseException as err:  # noqa: BLE001  (whatever it is, the test names it)
            outcomes.append(err)

    # Two calls run (one a worker) and the rest wait in the pool's queue: a waiting call's future
    # is cancelled by the shutdown, a running one's worker is killed.
    callers = [threading.Thread(target=call) for _ in range(6)]
    for caller in callers:
        caller.start()
    wait_until(lambda: len(list(tmp_path.iterdir())) == 2, "both workers are busy")
    pool.close()
    for caller in callers:
        caller.join(60)
    assert not any(caller.is_alive() for caller in callers), "a call still waits on closed workers"
    assert len(outcomes) == 6
    for outcome in outcomes:
        assert isinstance(outcome, WorkerDied), repr(outcome)
        assert "workers were closed" in str(outcome)
    wait_until(lambda: not {p.pid for p in multiprocessing.active_children()} - before, "the workers end")
