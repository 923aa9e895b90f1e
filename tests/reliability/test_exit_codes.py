"""The README's exit-code table, row by row, with real processes: 0 done, 1 a failure while doing
valid work, 2 bad input or usage, 130 interrupted (SIGINT), 143 terminated (SIGTERM) with what
was finished kept and named. `nmt serve` stops on either signal with 0 once its requests are done:
tests/serve/test_serve.py walks that row."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
from pathlib import Path

import pytest
from helpers import TrainedRun, nmt_command, subprocess_env, wait_until

TIMEOUT_S = 120


def translate(trained: TrainedRun, *options: object) -> list[str]:
    return nmt_command("translate", "-m", trained.checkpoint, "--workers", 1, "--precision", "fp32", *options)


def finished(command: list[str], stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command, input=stdin, capture_output=True, text=True, env=subprocess_env(), timeout=TIMEOUT_S
    )


def one_line(stderr: str) -> str:
    assert stderr.count("\n") == 1 and "Traceback" not in stderr, stderr
    return stderr.strip()


def test_0_done(trained: TrainedRun) -> None:
    done = finished(translate(trained), "apple river\n")
    assert done.returncode == 0 and done.stdout == "apple river\n"


def test_1_a_failure_while_doing_valid_work(trained: TrainedRun, tmp_path: Path) -> None:
    full = tmp_path / "full"
    try:
        os.mknod(full, stat.S_IFCHR | 0o666, os.makedev(1, 7))  # what /dev/full is
    except PermissionError:
        pytest.skip("making a device node needs root")
    done = finished(translate(trained, "-o", full), "apple river\n")
    assert done.returncode == 1 and "No space left on device" in one_line(done.stderr)


def test_2_bad_input_or_usage(trained: TrainedRun) -> None:
    for options in (["--lenpen", "500"], ["--no-such-option"], ["-i", "/no/such/file"]):
        done = finished(translate(trained, *options), "apple river\n")
        assert done.returncode == 2 and one_line(done.stderr).startswith("nmt: error: "), options


@pytest.mark.parametrize(
    ("sig", "code", "words"),
    [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated by SIGTERM")],
)
def test_130_and_143_a_signal_keeps_and_names_what_was_finished(
    trained: TrainedRun, tmp_path: Path, sig: signal.Signals, code: int, words: str
) -> None:
    out = tmp_path / "out.txt"
    partial = tmp_path / "out.txt.partial"
    process = subprocess.Popen(
        translate(trained, "-o", out),
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=subprocess_env(),
    )
    assert process.stdin is not None
    process.stdin.write("apple river\nstone cloud\n")
    process.stdin.flush()  # then the input stays open: the translation waits for more
    wait_until(
        lambda: partial.exists() and partial.read_text(encoding="utf-8").count("\n") == 2,
        "both lines are in the partial file",
        timeout=TIMEOUT_S,
        process=process,
    )
    process.send_signal(sig)
    _, err = process.communicate(timeout=TIMEOUT_S)
    assert process.returncode == code
    line = one_line(err)
    assert words in line and f"after 2 lines; they are in {partial}" in line
    assert partial.read_text(encoding="utf-8") == "apple river\nstone cloud\n" and not out.exists()


@pytest.mark.parametrize(
    ("stop", "code", "said"),
    [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated by SIGTERM")],
    ids=["ctrl-c", "sigterm"],
)
def test_a_stop_in_a_command_that_does_not_catch_it_says_nothing_was_half_written(
    trained: TrainedRun, stop: signal.Signals, code: int, said: str
) -> None:
    """Typer turns Ctrl-C into exit code 130 before nmt's handler sees it: the line must still
    come. The README's 143 row is 130's: either line says that every output is whole or absent."""
    process = subprocess.Popen(
        translate(trained),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=subprocess_env(),
    )
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write("apple river\n")
    process.stdin.flush()  # the input stays open: it waits for more once the line is out
    assert process.stdout.readline() == "apple river\n"
    process.send_signal(stop)
    _, err = process.communicate(timeout=TIMEOUT_S)
    assert process.returncode == code
    line = one_line(err)
    assert line.startswith(f"nmt: error: {said}") and "written whole or not at all" in line
