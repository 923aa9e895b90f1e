"""The strict line readers: endings, BOM, NUL, invalid UTF-8, streaming, counting."""

from __future__ import annotations

import io
import os
import threading
from pathlib import Path

import pytest

from nmt_cli.data import text
from nmt_cli.errors import InputError, NmtError


def write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_crlf_bom_and_missing_final_newline(tmp_path: Path) -> None:
    path = write(tmp_path / "a.txt", b"\xef\xbb\xbfHallo\r\n\r\nWelt \xc3\xa4\r\nletzte")
    assert list(text.iter_lines(path, "a.txt")) == ["Hallo", "", "Welt ä", "letzte"]
    assert text.count_lines(path) == 4


def test_only_newline_ends_a_line(tmp_path: Path) -> None:
    # U+2028 and a lone \r inside a sentence must not split it: counts would differ from `wc -l`.
    path = write(tmp_path / "a.txt", "eins\u2028zwei\rdrei\nvier\x85\n".encode())
    assert list(text.iter_lines(path, "a")) == ["eins\u2028zwei\rdrei", "vier\x85"]
    assert text.count_lines(path) == 2


def test_a_bom_is_stripped_at_the_start_of_any_line(tmp_path: Path) -> None:
    # Files joined by `cat` carry their BOMs into the middle; inside a line one is kept (translation
    # drops it there: `visible`).
    path = write(tmp_path / "a.txt", b"a\n\xef\xbb\xbfb\nc\xef\xbb\xbf\n")
    assert list(text.iter_lines(path, "a")) == ["a", "b", "c\ufeff"]


@pytest.mark.parametrize(
    ("line", "seen"),
    [
        ("A\u00addog\u200b runs.\ufeff", "Adog runs."),  # soft hyphen, zero-width space, BOM
        ("\u200e\u202bA dog\u202c\u2066.\u2069", "A dog."),  # direction marks and controls
        ("\u200d\u200cA dog\u200d", "A dog"),  # joiners at a word's edge join nothing
        (
            "\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645",
            "\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645",
        ),  # Persian's ZWNJ
        (
            "\U0001f469\u200d\U0001f4bb \u2764\ufe0f",
            "\U0001f469\u200d\U0001f4bb \u2764\ufe0f",
        ),  # emoji sequences
        ("\u3164 \u00a0", " \u00a0"),  # a Hangul filler goes; spaces stay
    ],
)
def test_visible_drops_what_shows_nothing_and_keeps_what_spells_a_word(line: str, seen: str) -> None:
    assert text.visible(line) == seen


@pytest.mark.parametrize(
    ("line", "words"),
    [("A dog.", True), ("2", True), ("\u6f22", True), ("...", False), ("\U0001f600 !", False)]
    + [("\u200b\u00ad\ufeff", False), ("\u3164", False), ("\u3000\u00a0", False), ("", False)],
)
def test_has_letters_or_digits(line: str, words: bool) -> None:
    assert text.has_letters_or_digits(line) is words


@pytest.mark.parametrize(
    ("data", "lines"), [(b"", 0), (b"\n", 1), (b"a", 1), (b"a\n", 1), (b"a\nb", 2), (b"\n\n\n", 3)]
)
def test_count_lines(tmp_path: Path, data: bytes, lines: int) -> None:
    path = write(tmp_path / "a.txt", data)
    assert text.count_lines(path) == lines == len(list(text.iter_lines(path, "a")))


def test_nul_byte_names_file_and_line(tmp_path: Path) -> None:
    path = write(tmp_path / "a.txt", b"ok\nbad\x00line\n")
    with pytest.raises(InputError, match=r"a\.txt:2: NUL byte at column 4"):
        list(text.iter_lines(path, "a.txt"))


def test_invalid_utf8_names_file_and_line_unless_replaced(tmp_path: Path) -> None:
    path = write(tmp_path / "a.txt", b"ok\nok\nbad \xff here\n")
    with pytest.raises(InputError, match=r"^a\.txt:3: invalid UTF-8 \(byte 0xff at byte 5\); hint$"):
        list(text.iter_lines(path, "a.txt", hint="; hint"))
    assert list(text.iter_lines(path, "a.txt", errors="replace"))[2] == "bad \ufffd here"


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="nope.txt: no such file"):
        list(text.iter_lines(tmp_path / "nope.txt", "nope.txt"))
    with pytest.raises(InputError, match="is a directory"):
        text.count_lines(tmp_path)
    assert InputError("x").exit_code == 2


def test_stream_yields_each_line_before_eof() -> None:
    """translate reads stdin with this: a line must come out while the writer is still open."""
    read_fd, write_fd = os.pipe()
    os.write(write_fd, b"erste Zeile\r\n")
    got: list[str] = []
    with os.fdopen(read_fd, "rb") as stream:
        lines = text.iter_lines(stream, "<stdin>")
        reader = threading.Thread(target=lambda: got.append(next(lines)), daemon=True)
        reader.start()
        reader.join(timeout=10)
        assert got == ["erste Zeile"]
        os.write(write_fd, b"zweite")
        os.close(write_fd)
        assert list(lines) == ["zweite"]


def test_binary_stream_and_read_lines() -> None:
    assert text.read_lines(io.BytesIO(b"\xef\xbb\xbfa\nb\n"), "<stdin>") == ["a", "b"]


def test_raw_chunks_stay_aligned(tmp_path: Path) -> None:
    a = write(tmp_path / "a", b"".join(b"%d\n" % i for i in range(10)))
    b = write(tmp_path / "b", b"".join(b"x%d\n" % i for i in range(10)))
    chunks = list(text.raw_chunks((a, b), 4))
    assert [len(x) for x, _ in chunks] == [4, 4, 2]
    assert chunks[2] == ([b"8\n", b"9\n"], [b"x8\n", b"x9\n"])
    write(b, b"x\n")
    with pytest.raises(NmtError, match="changed while being read"):
        list(text.raw_chunks((a, b), 4))
