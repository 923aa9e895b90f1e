"""`nmt translate --format html` on web pages and on fragments: a file that is a page (a doctype,
<html>, or lines that are only parts of elements) is translated as one document with its structure
kept; `--format html-document` asks for that; a file of one fragment a line stays one, with a
warning for a line that is not a fragment on its own, and no "empty translation" warning for lines
that had no words to translate."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest
from helpers import TrainedRun, nmt

from nmt_cli.commands import translate

lxml_html = pytest.importorskip("lxml.html")

PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<link rel="stylesheet" href="site.css">
<title>apple river</title>
</head>
<body class="page">
<h1 id="top">green <em>music</em></h1>
<ul>
<li>apple stone</li>
<li><a href="/river" title="a river">river green</a></li>
</ul>
<p>apple stone
river <b>green</b>.</p>
<img src="apple.png" alt="an apple">
</body>
</html>
"""
EMPTY_WARNING = "empty translation"


def tree(document: str) -> list[tuple[str, tuple[str, ...], tuple[tuple[str, str], ...]]]:
    """Each element in document order: its tag, its ancestors' tags and its attributes."""
    root = lxml_html.document_fromstring(document)
    return [
        (str(e.tag), tuple(str(a.tag) for a in e.iterancestors()), tuple(sorted(e.attrib.items())))
        for e in root.iter()
    ]


def run(trained: TrainedRun, *args: object) -> int:
    return nmt("translate", "-m", trained.checkpoint, "--device", "cpu", "--threads", 1, *args)


def test_a_web_page_file_keeps_its_element_tree(
    trained: TrainedRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Each of its lines was a fragment: the doctype, <html>, <head> and <body> vanished, <ul> came
    # back as <ul></ul>, the <p> over two lines was cut in two, and lines of tags alone were
    # counted as "got an empty translation; the model may be damaged".
    source, out = tmp_path / "page.html", tmp_path / "out.html"
    source.write_text(PAGE, encoding="utf-8")
    capsys.readouterr()
    assert run(trained, "-i", source, "-o", out, "--format", "html") == 0
    err = capsys.readouterr().err
    assert f"{source}: read as one HTML document (it opens with a doctype or <html>)" in err
    assert EMPTY_WARNING not in err
    written = out.read_text(encoding="utf-8")
    assert written.startswith("<!DOCTYPE html>\n<html") and written.endswith("</html>\n")
    assert tree(written) == tree(PAGE)
    page = lxml_html.document_fromstring(written)
    assert page.find("head/title").text_content().strip()  # translated, and still in <head>
    assert page.find("body/p").text_content().strip() and page.find("body/p/b") is not None


def test_lines_that_are_parts_of_elements_make_a_document_and_html_document_asks_for_one(
    trained: TrainedRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body = "<div>\n<p>apple stone\nriver green.</p>\n</div>\n"
    source, out = tmp_path / "part.html", tmp_path / "out.html"
    source.write_text(body, encoding="utf-8")
    capsys.readouterr()
    assert run(trained, "-i", source, "-o", out, "--format", "html") == 0
    assert "(line 1: <div> is not closed on the line)" in capsys.readouterr().err
    assert tree(out.read_text(encoding="utf-8")) == tree(body)
    assert run(trained, "-q", "-i", source, "-o", out, "--format", "html-document") == 0
    assert tree(out.read_text(encoding="utf-8")) == tree(body)
    assert out.read_text(encoding="utf-8").startswith("<html><body><div>\n<p>")


def test_a_page_on_standard_input_is_one_document(
    trained: TrainedRun, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    stdin = io.TextIOWrapper(io.BufferedReader(io.BytesIO(PAGE.encode())), encoding="utf-8")
    monkeypatch.setattr(sys, "stdin", stdin)
    capsys.readouterr()
    assert run(trained, "--format", "html") == 0
    captured = capsys.readouterr()
    assert tree(captured.out) == tree(PAGE)
    assert "stdin: read as one HTML document" in captured.err


def test_fragments_stay_one_a_line_and_tags_alone_are_not_empty_translations(
    trained: TrainedRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = ["<p>apple <b>river</b></p>", "<p></p>", "<!-- a note -->", '<img src="a.png">', "<p", ""]
    source = tmp_path / "statuses.html"
    source.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    capsys.readouterr()
    assert run(trained, "-i", source, "--format", "html") == 0
    captured = capsys.readouterr()
    out = captured.out.split("\n")
    assert len(out) == len(lines) + 1 and out[1:5] == lines[1:4] + [""]
    assert "read as one HTML document" not in captured.err
    assert EMPTY_WARNING not in captured.err  # "<p" had letters, but no words outside a tag


def test_a_line_that_is_only_part_of_an_element_is_warned_of_once(
    trained: TrainedRun, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(translate, "SCANNED_LINES", 1)  # past the lines read before deciding
    source = tmp_path / "statuses.html"
    source.write_text("<p>apple</p>\n<p>river\nstone</p>\n<ul>\n", encoding="utf-8")
    capsys.readouterr()
    assert run(trained, "-i", source, "--format", "html") == 0
    captured = capsys.readouterr()
    assert len(captured.out.splitlines()) == 4
    warnings = [line for line in captured.err.splitlines() if "HTML fragment" in line]
    assert warnings == [
        f"warning: {source}:3: </p> closes an element not opened on the line; --format html reads each "
        "line as one HTML fragment: give --format html-document for a page written over several lines"
    ]


def test_the_api_keeps_a_documents_structure_too(trained: TrainedRun) -> None:
    from nmt_cli.decoding.translator import Translator
    from nmt_cli.errors import SettingError

    translator = Translator.load(trained.checkpoint, device="cpu", precision="fp32", threads=1)
    (page,) = translator.translate_html([PAGE])  # opens with a doctype: a document
    assert tree(page) == tree(PAGE) and page.startswith("<!DOCTYPE html>\n")
    (div,) = translator.translate_html(["<div>apple\n<p>river</p></div>"], document=True)
    assert div.startswith("<html><body><div>")
    with pytest.raises(SettingError, match="^document="):
        translator.translate_html(["<p>apple</p>"], document="yes")  # type: ignore[arg-type]
