"""The output directory's lock: one holder at a time, its file gone on the way out, a directory
it made removed again when nothing was written into it, the working directory refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from nmt_cli.errors import InputError
from nmt_cli.locking import locked_directory


def test_a_second_holder_is_refused_while_the_first_holds_the_lock(tmp_path: Path) -> None:
    run = tmp_path / "run"
    with locked_directory(run, "--out"):
        assert (run / ".lock").exists()
        # flock belongs to an open file: a second open in this process is refused as another's is.
        with pytest.raises(InputError, match="another process is working in it"):
            with locked_directory(run, "--out"):
                pass
        (run / "kept").write_text("x")
    assert not (run / ".lock").exists() and (run / "kept").exists()
    with locked_directory(run, "--out"):  # released: it can be taken again
        pass


def test_a_directory_made_for_the_lock_goes_when_nothing_was_written(tmp_path: Path) -> None:
    run = tmp_path / "made" / "run"
    with locked_directory(run, "--out"):
        assert run.is_dir()
    assert not run.exists()


def test_a_file_or_the_working_directory_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(InputError, match="exists and is not a directory"):
        with locked_directory(tmp_path / "file", "--out"):
            pass
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InputError, match="the working directory"):
        with locked_directory(Path("."), "--out"):
            pass
