"""`nmt import` of fairseq files that disagree with each other, or that name the output among
them: refused in one line naming the file, the line or the tensor, before anything is written.
fairseq refuses the same checkpoints (its strict load, its joined-dictionary check), so importing
them would give a model other than the one trained."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from helpers import refused

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
FAIRSEQ = FIXTURES / "fairseq-multi30k-tiny"
MOSES = FIXTURES / "fairseq-moses-tiny"


def copied(fixture: Path, tmp_path: Path) -> Path:
    folder = tmp_path / fixture.name
    shutil.copytree(fixture, folder)
    return folder


def state_of(folder: Path) -> dict[str, Any]:
    with torch.serialization.safe_globals([argparse.Namespace]):
        return torch.load(folder / "checkpoint.pt", weights_only=True)


@pytest.mark.parametrize(("fixture", "name"), [(FAIRSEQ, "spm.model"), (MOSES, "bpecodes")])
def test_an_output_that_is_the_tokenizer_the_import_reads_is_refused(
    fixture: Path, name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = copied(fixture, tmp_path)
    before = {p.name: p.read_bytes() for p in source.iterdir()}
    assert "is an input of this command" in refused(
        capsys, "import", source / "checkpoint.pt", "-o", source / name
    )
    assert {p.name: p.read_bytes() for p in source.iterdir()} == before


def test_weights_of_more_layers_than_the_settings_say_are_refused_naming_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = copied(FAIRSEQ, tmp_path)
    state = state_of(source)
    state["cfg"]["model"].encoder_layers = 1  # the weights hold 2
    torch.save(state, source / "checkpoint.pt")
    line = refused(capsys, "import", source / "checkpoint.pt", "-o", tmp_path / "out.pt")
    assert "encoder.layers.1.* (16 tensors)" in line and "encoder_layers = 1" in line, line
    assert not (tmp_path / "out.pt").exists()


def test_shared_embeddings_over_two_different_dictionaries_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = copied(FAIRSEQ, tmp_path)
    lines = (source / "dict.de.txt").read_text(encoding="utf-8").splitlines(keepends=True)
    lines[10], lines[11] = lines[11], lines[10]  # as many symbols, two of them in other rows
    (source / "dict.de.txt").write_text("".join(lines), encoding="utf-8")
    line = refused(capsys, "import", source / "checkpoint.pt", "-o", tmp_path / "out.pt")
    assert "share_all_embeddings needs one dictionary" in line and "dict.de.txt" in line, line


@pytest.mark.parametrize(
    ("fault", "words"),
    [
        ("a string among the weights", "its weight encoder.layers.0.fc1.weight is a str, not a tensor"),
        ("a list among the weights", "its weight decoder.embed_tokens.weight is a list, not a tensor"),
        ("10**12 positions", "max_source_positions = 1,000,000,000,000"),
    ],
)
def test_what_is_not_a_tensor_or_a_sensible_size_is_refused_naming_it(
    fault: str, words: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = copied(FAIRSEQ, tmp_path)
    state = state_of(source)
    if fault == "a string among the weights":
        state["model"]["encoder.layers.0.fc1.weight"] = "x"
    elif fault == "a list among the weights":
        state["model"]["decoder.embed_tokens.weight"] = [1.0, 2.0]
    else:  # a sinusoidal table of 10**12 rows would be 4 TB
        state["cfg"]["model"].max_source_positions = 10**12
    torch.save(state, source / "checkpoint.pt")
    line = refused(capsys, "import", source / "checkpoint.pt", "-o", tmp_path / "out.pt")
    assert words in line and "internal error" not in line, line


@pytest.mark.parametrize(
    ("number", "line", "words"),
    [
        (7, b"\xff, 12905\n", "dict.en.txt:7: not UTF-8 (byte 0xff)"),
        (12, "▁und 8930\n".encode(), "dict.en.txt:12: the symbol '▁und' again (first on line 10)"),
        (3, b"<unk> 1\n", "dict.en.txt:3: the symbol '<unk>' again (first among fairseq's specials)"),
    ],
    ids=["a byte that is not UTF-8", "a symbol twice", "<unk> in the file"],
)
def test_a_dictionary_at_fault_is_named_with_its_line(
    number: int, line: bytes, words: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = copied(FAIRSEQ, tmp_path)
    lines = (source / "dict.en.txt").read_bytes().splitlines(keepends=True)
    assert lines[6] == b", 12905\n" and lines[9] == "▁und 8930\n".encode()  # what the faults change or copy
    lines[number - 1] = line
    (source / "dict.en.txt").write_bytes(b"".join(lines))
    refusal = refused(capsys, "import", source / "checkpoint.pt", "-o", tmp_path / "out.pt")
    assert words in refusal and "checkpoint.pt" not in refusal, refusal


def test_a_source_the_system_cannot_look_up_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    long = tmp_path / ("a" * 256)  # one name longer than any file system takes
    for source in (long, long / "checkpoint.pt"):
        line = refused(capsys, "import", source, "-o", tmp_path / "out.pt")
        assert line.startswith(f"nmt: error: {source}:") and "too long" in line, line
    assert not (tmp_path / "out.pt").exists()
