"""A process started with a standard descriptor closed (`2>&-`, `<&-`, `>&-`, as cron jobs and
daemons may run it): Python gives it None for that stream. Messages must never land in stdout
(print's default for a None stream), a closed stdin reads as empty input, and a closed stdout is
one line on stderr, exit 1, as `cat >&-` fails."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers import TrainedRun, nmt_command, subprocess_env

TIMEOUT_S = 120


def closing(fd: int) -> Callable[[], None]:
    return lambda: os.close(fd)


def started_without(fd: int, command: list[str]) -> subprocess.CompletedProcess[str]:
    """`command` with descriptor `fd` closed as it starts (0, 1 or 2), the others piped."""
    return subprocess.run(
        command,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=subprocess_env(),
        timeout=TIMEOUT_S,
        preexec_fn=closing(fd),  # noqa: PLW1509 (the child closes it after the pipes are set up)
    )


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_with_stderr_closed_an_error_never_lands_in_stdout(tmp_path: Path) -> None:
    done = started_without(2, nmt_command("score", "--ref", tmp_path / "missing.de", "--hyp", tmp_path / "x"))
    assert done.returncode == 2 and done.stdout == ""


def test_with_stderr_closed_translate_works(trained: TrainedRun, tmp_path: Path) -> None:
    src = write(tmp_path / "in.txt", "apple river\n")
    command = nmt_command(
        "translate", "-m", trained.checkpoint, "-i", src, "--workers", 1, "--precision", "fp32"
    )
    done = started_without(2, command)
    assert done.returncode == 0 and done.stdout == "apple river\n"


def test_with_stdout_closed_writing_is_one_line_and_exit_1(tmp_path: Path) -> None:
    ref = write(tmp_path / "ref.de", "a cat\n")
    done = started_without(1, nmt_command("score", "--ref", ref, "--hyp", ref))
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert (
        done.stderr
        == "nmt: error: standard output is closed (>&-); leave it open, or redirect it to a file\n"
    )


def test_with_stdout_closed_an_output_through_it_is_refused_before_any_work(tmp_path: Path) -> None:
    # /dev/stdout would lead to the /dev/null that holds the closed descriptor: output lost, exit 0.
    done = started_without(1, nmt_command("translate", "-m", tmp_path / "model.pt", "-o", "/dev/stdout"))
    assert done.returncode == 2 and done.stderr == (
        "nmt: error: --output /dev/stdout: descriptor 1 was closed when nmt started; leave it open, or "
        "give a file name\n"
    )


def test_with_stdin_closed_translate_reads_no_lines(trained: TrainedRun) -> None:
    command = nmt_command("translate", "-m", trained.checkpoint, "--workers", 1, "--precision", "fp32")
    done = started_without(0, command)
    assert done.returncode == 0 and done.stdout == "" and done.stderr == ""


@pytest.mark.parametrize("fd", [1, 2], ids=["stdout", "stderr"])
def test_a_closed_descriptor_is_held_so_no_file_opened_later_takes_it(tmp_path: Path, fd: int) -> None:
    # A library writing to descriptor 1 or 2 must not write into the file that took its number.
    script = (
        "import os\n"
        "from nmt_cli.cli.main import _standard_streams\n"
        "_standard_streams()\n"
        f"out = open({str(tmp_path / 'out.txt')!r}, 'w')\n"
        f"os.write({fd}, b'a library message')\n"
        "print('translation', file=out)\n"
        "out.close()\n"
    )
    done = started_without(fd, [sys.executable, "-c", script])
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out.txt").read_text(encoding="utf-8") == "translation\n"
