"""Lines with nothing to translate, and characters that show nothing, on every front end: a line
with no letter or digit (dots, symbols, emoji, zero-width or other invisible characters, spaces of
any kind) comes back as its visible characters ("" where none are left, as a blank line does),
never as a sentence the model made up; a BOM in the middle of a file and invisible characters
inside a line are dropped before the line is encoded, so the line reads as without them."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import TrainedRun, nmt, nmt_command, one_thread, subprocess_env
from serve_helpers import Server, serving_in_process

from nmt_cli.decoding.translator import Translator

SOURCE = "apple river stone"
# (line, what comes back: None for the translation of SOURCE)
CASES: list[tuple[str, str | None]] = [
    (SOURCE, None),
    ("\u200b", ""),  # zero-width space
    ("\u200c\u200d\u2060\ufeff\u00ad", ""),  # joiners, word joiner, BOM, soft hyphen
    ("\u3164", ""),  # a Hangul filler: a letter to Python, blank to the eye
    ("\u3000\u00a0", ""),  # spaces of other kinds
    ("....", "...."),
    ("- * -", "- * -"),
    ("\U0001f600 !", "\U0001f600 !"),
    ("\ufeff" + SOURCE, None),  # a BOM where `cat` joined two files
    ("apple\u00ad river\u200b stone", None),  # a soft hyphen and a zero-width space inside
    ("\u200eapple \u200b river stone\u200f", None),  # direction marks, a word of nothing visible
    ("", ""),
]
LINES = [line for line, _ in CASES]


def expected(translator: Translator) -> list[str]:
    with one_thread():
        translation = translator.translate([SOURCE])[0]
    assert translation and translation != "...."
    return [translation if kept is None else kept for _, kept in CASES]


@pytest.fixture(scope="module")
def translator(trained: TrainedRun) -> Iterator[Translator]:
    with one_thread(), Translator.load(trained.checkpoint, device="cpu", precision="fp32") as loaded:
        yield loaded


def test_the_api_keeps_wordless_lines_and_reads_lines_without_invisible_characters(
    translator: Translator,
) -> None:
    with one_thread():
        assert translator.translate(LINES) == expected(translator)
        nbest = translator.translate_nbest(LINES, 2, split_sentences=False)
    for (line, kept), hyps in zip(CASES, nbest, strict=True):
        if kept is not None:
            assert hyps == [(kept, 0.0), ("", float("-inf"))], line


def test_alignments_count_the_words_of_the_line_as_given(translator: Translator) -> None:
    with one_thread():
        plain, spaced, kept = translator.translate(
            [SOURCE, "apple \u200b river stone", "- \u200b -"], alignments=True
        )
    assert spaced[0] == plain[0]
    # The second word is invisible: the source words after it keep their own numbers.
    assert spaced[1] == tuple((i + (i > 0), j) for i, j in plain[1])
    assert kept == ("-  -", ((0, 0), (2, 1)))


def test_html_text_nodes_follow_the_same_rule(translator: Translator) -> None:
    with one_thread():
        plain = translator.translate_html(["<p>apple <b>river</b> stone</p>"])[0]
        out = translator.translate_html(
            ["<p>....</p>", "<p>\u200b</p>", "<p>apple\u00ad <b>river</b> stone\ufeff</p>"]
        )
    assert out == ["<p>....</p>", "<p>\u200b</p>", plain]


def test_nmt_translate_from_a_file_and_from_stdin(
    trained: TrainedRun,
    translator: Translator,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    data = "".join(f"{line}\n" for line in LINES).encode()
    source = tmp_path / "in.txt"
    source.write_bytes(data)
    capsys.readouterr()
    assert nmt("translate", "-m", trained.checkpoint, "--device", "cpu", "--workers", 1, "-i", source) == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == expected(translator)
    assert "empty translation" not in err  # a line of nothing visible has nothing to lose
    piped = subprocess.run(
        nmt_command("-q", "translate", "-m", trained.checkpoint, "--device", "cpu", "--workers", 1),
        input=data,
        capture_output=True,
        env=subprocess_env(),
        check=True,
    )
    assert piped.stdout.decode().splitlines() == expected(translator)


@pytest.fixture(scope="module")
def server(trained: TrainedRun) -> Iterator[Server]:
    with serving_in_process(trained.checkpoint) as running:
        yield running


def test_both_routes_of_the_server(server: Server, translator: Translator) -> None:
    ours = server.post({"text": LINES})
    assert ours.status_code == 200, ours.text
    assert ours.json()["translations"] == expected(translator)
    libre = server.post({"q": LINES, "source": "auto", "target": "tgt"})
    assert libre.status_code == 200, libre.text
    assert libre.json()["translatedText"] == expected(translator)
    html = server.post({"text": ["<p>....</p>", "<p>\u200b</p>"], "format": "html"})
    assert html.json()["translations"] == ["<p>....</p>", "<p>\u200b</p>"]
