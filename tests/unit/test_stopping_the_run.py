"""A program that runs nmt's commands inside itself (this test suite, a service calling `main`)
keeps its own SIGINT and SIGTERM handlers: nmt's are installed for the length of a command and put
back after it, and a stop signal that nmt's handler took for the command's clean exit goes on to
the program's handler. So `kill -TERM` (or Ctrl-C) stops the test run even while a test runs a
command in-process, instead of failing that test and going on."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import nmt, subprocess_env, wait_until

from nmt_cli.commands import average
from nmt_cli.errors import NmtError, Terminated
from nmt_cli.training.signals import StopSignal

CHILD = "NMT_TEST_STOPPED_RUN"  # set in the test run of stopped_run.py that the last test starts


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
@pytest.mark.parametrize("trained_like", [False, True], ids=["command", "training"])
def test_a_stop_signal_nmt_took_goes_on_to_the_programs_handler(
    sig: signal.Signals, trained_like: bool, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    got: list[int] = []
    monkeypatch.setattr(average, "run", lambda *a, **k: _send_then_block(sig, trained_like, tmp_path))
    previous = signal.signal(sig, lambda signum, _frame: got.append(signum))
    try:
        code = nmt("average", "x.pt", "-o", tmp_path / "avg.pt")
    finally:
        signal.signal(sig, previous)
    if sig == signal.SIGINT and not trained_like:
        # The program's own SIGINT handler took it (nmt installs none outside training): not nmt's
        # to pass on.
        assert (code, got) == (0, [signal.SIGINT])
        return
    assert code == 128 + sig.value
    assert got == [sig]  # once, after the command's clean exit


def _send_then_block(sig: signal.Signals, trained_like: bool, folder: Path) -> None:
    if not trained_like:
        os.kill(os.getpid(), sig)
        time.sleep(5 if sig == signal.SIGTERM else 0)  # SIGTERM: Terminated ends the sleep at once
        return
    with StopSignal() as stop:
        os.kill(os.getpid(), sig)
        wait_until(lambda: stop.received is not None, "StopSignal hears the signal", timeout=30)
    raise NmtError(f"stopped by {sig.name}", exit_code=128 + sig.value)


def test_a_stop_raised_without_a_signal_is_not_passed_on(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    got: list[int] = []

    def stop(*_args: object, **_kwargs: object) -> None:
        raise Terminated

    monkeypatch.setattr(average, "run", stop)
    previous = signal.signal(signal.SIGTERM, lambda signum, _frame: got.append(signum))
    try:
        assert nmt("average", "x.pt", "-o", tmp_path / "avg.pt") == 143
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert got == []


@pytest.mark.slow  # a test run of its own each (pytest and torch start again): about 7 s
@pytest.mark.parametrize("trained_like", [False, True], ids=["command", "training"])
def test_kill_term_stops_a_test_run_inside_a_command(trained_like: bool, tmp_path: Path) -> None:
    child = Path(__file__).with_name("stopped_run.py")  # not test_*: only this test runs it
    test = f"{child}::test_block_in_a_command[{'training' if trained_like else 'command'}]"
    env = {**subprocess_env(), CHILD: str(tmp_path)}
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test]
    run = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        inside = tmp_path / "inside"
        wait_until(inside.exists, "the child test runs the command", timeout=120, process=run)
        run.send_signal(signal.SIGTERM)
        out, _ = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode != 0 and not (tmp_path / "went-on").exists(), out
