"""`nmt translate --alignments` and `--split-sentences`: the translation, a tab, and Pharaoh's
"i-j" word pairs (as fairseq's --print-alignment and Marian's --alignment print them); lines of
several sentences translated sentence by sentence; and the combinations that cannot be."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import TrainedRun, nmt, sentences


def test_alignments_follow_each_translation_after_a_tab(
    trained: TrainedRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = sentences(8, seed=11, min_words=2)
    src = tmp_path / "in.txt"
    src.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    assert nmt("-q", "translate", "-m", trained.checkpoint, "-i", src, "--alignments", "--device", "cpu") == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == len(lines)
    for line, printed in zip(lines, out, strict=True):
        text, pairs = printed.split("\t")
        assert text == line  # the copy model
        assert pairs == " ".join(f"{i}-{i}" for i in range(len(line.split())))


def test_split_sentences_keeps_one_output_line_per_input_line(
    trained: TrainedRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "in.txt"
    src.write_text("Apple river. Stone green.\n\nTiger summer\n", encoding="utf-8")
    assert (
        nmt("-q", "translate", "-m", trained.checkpoint, "-i", src, "--split-sentences", "--device", "cpu")
        == 0
    )
    out = capsys.readouterr().out.split("\n")
    assert len(out) == 4 and out[1] == "" and out[3] == ""


def test_alignments_with_nbest_is_refused_with_one_line(
    trained: TrainedRun, capsys: pytest.CaptureFixture[str]
) -> None:
    assert nmt("translate", "-m", trained.checkpoint, "--alignments", "--nbest", "2") == 2
    err = capsys.readouterr().err
    assert "--alignments" in err and "--nbest" in err and "Traceback" not in err
