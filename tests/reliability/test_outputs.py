"""Every -o writes only what is, or will be, a regular file: a symlink is written through (its
target replaced, the link kept), a FIFO or a character device is written in place and stays what
it is (a full device is a one-line failure, exit 1), and a directory or an empty name is refused
in one line (exit 2) with nothing touched. The device nodes are made with mknod in a temporary
directory, never the machine's own /dev."""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers import TrainedRun, nmt, one_line_error, refused

NULL, FULL = os.makedev(1, 3), os.makedev(1, 7)  # what /dev/null and /dev/full are


def writers(trained: TrainedRun, tmp_path: Path) -> dict[str, Callable[[Path], list[object]]]:
    """The arguments of each command that writes an -o file, given that file."""
    source = tmp_path / "in.txt"
    source.write_text("apple river\nstone cloud\n", encoding="utf-8")
    return {
        "translate": lambda out: (
            ["-q", "translate", "-m", trained.checkpoint, "-i", source, "-o", out]
            + ["--threads", 1, "--workers", 1]
        ),
        "average": lambda out: ["-q", "average", trained.checkpoint, "-o", out],
        "plot": lambda out: ["-q", "plot", trained.run_dir, "-o", out],
    }


COMMANDS = ["translate", "average", "plot"]


def device(path: Path, number: int) -> Path:
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, number)
    except PermissionError:
        pytest.skip("making a device node needs root")
    return path


@pytest.mark.parametrize("command", COMMANDS)
def test_a_symlink_is_written_through(
    command: str, trained: TrainedRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    real, link = tmp_path / "real.png", tmp_path / "link.png"
    real.write_bytes(b"old")
    link.symlink_to(real.name)
    assert nmt(*writers(trained, tmp_path)[command](link)) == 0
    assert link.is_symlink() and os.readlink(link) == real.name
    assert real.stat().st_size > 3  # the new output is in the link's target
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt", "link.png", "real.png"]


@pytest.mark.parametrize("command", COMMANDS)
def test_a_character_device_is_written_in_place_and_stays_a_device(
    command: str, trained: TrainedRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    null = device(tmp_path / "null.png", NULL)
    assert nmt(*writers(trained, tmp_path)[command](null)) == 0
    assert stat.S_ISCHR(null.lstat().st_mode) and null.lstat().st_rdev == NULL


@pytest.mark.parametrize("command", COMMANDS)
def test_a_full_device_is_a_one_line_failure(
    command: str, trained: TrainedRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    full = device(tmp_path / "full.png", FULL)
    capsys.readouterr()
    assert nmt(*writers(trained, tmp_path)[command](full)) == 1
    assert "No space left on device" in one_line_error(capsys)
    assert stat.S_ISCHR(full.lstat().st_mode) and full.lstat().st_rdev == FULL


def test_translate_streams_into_a_fifo(trained: TrainedRun, tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    assert nmt(*writers(trained, tmp_path)["translate"](fifo)) == 0
    reader.join(30)
    assert got == [b"apple river\nstone cloud\n"]  # the copy model
    assert stat.S_ISFIFO(fifo.lstat().st_mode)


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("name", ["a directory", "an empty name", "a missing directory"])
def test_a_directory_is_refused_and_untouched(
    command: str,
    name: str,
    trained: TrainedRun,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    folder = tmp_path / "folder.png"
    folder.mkdir()
    (folder / "mine.txt").write_text("keep")
    monkeypatch.chdir(folder)
    out = {"a directory": folder, "an empty name": Path(""), "a missing directory": tmp_path / "no" / "x.png"}
    capsys.readouterr()
    refused(capsys, *writers(trained, tmp_path)[command](out[name]))
    assert sorted(p.name for p in folder.iterdir()) == ["mine.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["folder.png", "in.txt"]


@pytest.mark.parametrize("command", ["train", "prepare"])
def test_an_empty_out_directory_is_refused(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.txt").write_text("keep")
    args = {
        "train": ["train", "--data", tmp_path / "data", "--out", ""],
        "prepare": ["prepare", "--train", "t", "--valid", "v", "--src", "en", "--tgt", "de", "--out", ""],
    }
    capsys.readouterr()
    said = refused(capsys, "-q", *args[command])
    assert "--out" in said and "the path is empty" in said
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.txt"]
