"""`nmt translate --alignments` and `--split-sentences`: the translation, a tab, and Pharaoh's
"i-j" word pairs (as fairseq's --print-alignment and Marian's --alignment print them); lines of
several sentences translated sentence by sentence; and the combinations that cannot be."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from helpers import TrainedRun, nmt, refused, sentences


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


# A tab, CR, form feed or line separator between two sentences of a line (the file reader leaves
# them inside the line) must not reach the output's one line.
GAPS = "apple river.\tstone green.\rtiger summer.\x0cgarden paper.\u2028winter friend.\x85orange cloud."


@pytest.mark.parametrize("mode", [["--nbest", "2"], ["--alignments"]])
def test_split_sentences_joins_other_whitespace_as_one_space(
    mode: list[str], trained: TrainedRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "in.txt"
    src.write_bytes(f"{GAPS}\napple river.  stone green.\n".encode())
    args = ["-q", "translate", "-m", trained.checkpoint, "-i", src, "--split-sentences", "--device", "cpu"]
    assert nmt(*args, *mode) == 0
    nbest = "--nbest" in mode
    lines = capsys.readouterr().out.split("\n")
    assert len(lines) == (4 if nbest else 2) + 1 and lines[-1] == ""
    texts = []
    for line in lines[:-1]:
        fields = line.split("\t")
        assert len(fields) == (3 if nbest else 2), repr(line)
        texts.append(fields[2] if nbest else fields[0])
    assert all(text.isprintable() for text in texts), texts  # no CR, FF, NEL or line separator
    assert "  " in texts[-1]  # plain spaces between sentences are kept as they were


def test_html_without_lxml_is_refused_before_the_model_is_loaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from nmt_cli.commands import translate as command

    def loaded(*_args: object) -> None:
        raise AssertionError("the model was loaded (and stdin would be waited for) before the refusal")

    monkeypatch.setitem(sys.modules, "lxml", None)  # not installed
    monkeypatch.setattr(command, "load_translator", loaded)
    model = tmp_path / "model.pt"
    model.write_bytes(b"")
    error = refused(capsys, "translate", "-m", model, "--format", "html", "--device", "cpu")
    assert "lxml" in error and "nmt-cli[html]" in error


def test_html_keeps_line_breaks_of_code_and_attributes_as_references(
    trained: TrainedRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    html = pytest.importorskip("lxml.html")
    source, out = tmp_path / "in.html", tmp_path / "out.html"
    fragment = (
        '<pre>def f():&#10;  return 1</pre><p title="a&#10;b">apple river</p><script>if (a)\tf();</script>'
    )
    source.write_text(fragment + "\n", encoding="utf-8")
    args = ["-q", "translate", "-m", trained.checkpoint, "-i", source, "-o", out, "--format", "html"]
    assert nmt(*args, "--threads", 1) == 0
    written = out.read_text(encoding="utf-8")
    assert written.count("\n") == 1 and "\t" not in written  # one line a fragment, as given
    page = html.fragment_fromstring(written, create_parent="div")
    assert page.find("pre").text == "def f():\n  return 1"  # not a space: lines of code joined
    assert page.find("p").get("title") == "a\nb" and page.find("p").text_content() == "apple river"
    assert page.find("script").text == "if (a) f();"  # no reference where none is read: a space
