"""Inputs of an unusual kind that a user may still hand over: a named pipe as a corpus file (read
twice by `nmt prepare`, so it would wait forever) and a recipe saved with a UTF-8 byte order mark."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from helpers import (
    Corpus,
    nmt,
    nmt_command,
    prepare_args,
    sentences,
    subprocess_env,
    train_args,
    write_split,
)


def test_prepare_refuses_a_named_pipe_at_once(tmp_path: Path) -> None:
    lines = sentences(50, seed=0)
    write_split(tmp_path / "train", lines, lines)
    write_split(tmp_path / "valid", lines[:5], lines[:5])
    (tmp_path / "train.src").unlink()
    os.mkfifo(tmp_path / "train.src")  # nobody writes it: reading would block
    args = prepare_args(tmp_path / "out", tmp_path / "train", valid=tmp_path / "valid")
    done = subprocess.run(
        nmt_command(*args), env=subprocess_env(), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == (
        f"nmt: error: {tmp_path / 'train.src'}: not a regular file (a pipe or a device); give a text file"
    )
    assert not (tmp_path / "out").exists()


def test_a_recipe_with_a_byte_order_mark_is_read(
    corpus: Corpus, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recipe = tmp_path / "recipe.toml"
    recipe.write_bytes(b"\xef\xbb\xbf[train]\r\nmax_updates = 2\r\n")  # as Windows Notepad saves it
    args = train_args(corpus.data, tmp_path / "run", "train.save_every_updates=1")
    capsys.readouterr()
    assert nmt(*args, "--recipe", recipe) == 0, capsys.readouterr().err
    assert "max_updates = 2" in (tmp_path / "run" / "config.toml").read_text(encoding="utf-8")
