"""Strict line readers for plain UTF-8 text, shared by prepare, score and translate.

A line ends at b"\\n" only (as for `wc -l` and the Moses scripts), so Unicode line
separators inside a sentence never split it. A UTF-8 BOM at the start of a line (of the file, or
of a file that `cat` joined to another) and a trailing "\\r" (CRLF files) are removed. A NUL
byte, or invalid UTF-8 unless errors="replace", is an InputError naming the file and line.
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from nmt_cli.errors import InputError, RunFailure

BOM = b"\xef\xbb\xbf"
ERRORS = ("strict", "replace")
_CHUNK = 1 << 20
# Every character at which str.splitlines breaks a line, with TAB (the n-best and TSV separator)
# and NUL (which cuts C strings): a decoded translation must never contain them.
_BREAKS = "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029\t\x00"
_ONE_LINE = str.maketrans(dict.fromkeys(_BREAKS, " "))
INVISIBLE = (
    "\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180e\u200b\u200e\u200f\u202a\u202b\u202c\u202d"
    "\u202e\u2060\u2061\u2062\u2063\u2064\u2066\u2067\u2068\u2069\u206a\u206b\u206c\u206d\u206e"
    "\u206f\u3164\ufeff\uffa0"
)
"""Characters that show nothing and belong to no word, which translation drops before encoding: the
soft hyphen, zero-width space, word joiner, BOM, direction marks and controls, the Hangul fillers
(Unicode's default-ignorable characters, less the variation selectors, which choose how an emoji or
a character is drawn, and the joiners, which `visible` keeps inside a word)."""
_INVISIBLE = str.maketrans(dict.fromkeys(INVISIBLE))
# A zero-width (non-)joiner is part of a word's spelling in Persian, the Indic scripts and emoji
# sequences; at a word's edge it joins nothing.
_LOOSE_JOINERS = re.compile(r"(?<!\S)[\u200c\u200d]+|[\u200c\u200d]+(?!\S)")


def check_readable(path: Path, name: str | None = None) -> None:
    """Raise a one-line InputError unless `path` is an existing, readable regular file."""
    label = name or str(path)
    if not path.exists():
        raise InputError(f"{label}: no such file")
    if path.is_dir():
        raise InputError(f"{label}: is a directory, expected a text file (one sentence a line)")
    if not os.access(path, os.R_OK):
        raise InputError(f"{label}: permission denied")


def one_line(text: str) -> str:
    """`text` with every line break, TAB and NUL as a space: one output line per input line,
    whatever the model writes (byte-fallback pieces such as <0x0A> decode to a newline)."""
    return text.translate(_ONE_LINE)


def decode_line(
    raw: bytes, name: str, lineno: int, errors: str = "strict", hint: str = "", nul: str | None = None
) -> str:
    """One raw line (with or without its b"\\n") as text, checked; `lineno` counts from 1. `nul`:
    what a NUL byte becomes (translation maps it to a space), instead of an error."""
    if nul is not None:
        raw = raw.replace(b"\x00", nul.encode())
    if raw.endswith(b"\n"):
        raw = raw[:-1]
    if raw.endswith(b"\r"):
        raw = raw[:-1]
    if raw.startswith(BOM):
        raw = raw[len(BOM) :]
    if b"\x00" in raw:
        # A NUL usually means UTF-16 or a binary file given by mistake; sentencepiece and
        # C-string based tools would silently cut the line there.
        column = raw.index(b"\x00") + 1
        raise InputError(
            f"{name}:{lineno}: NUL byte at column {column}; is this a binary or UTF-16 file?{hint}"
        )
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        if errors == "replace":
            return raw.decode("utf-8", errors="replace")
        bad = raw[err.start : err.start + 1].hex()
        raise InputError(
            f"{name}:{lineno}: invalid UTF-8 (byte 0x{bad} at byte {err.start + 1}){hint}"
        ) from None


def corpus_line(raw: bytes, name: str, lineno: int, errors: str, hint: str) -> str:
    """A line of a corpus given to `nmt prepare`. With errors "replace" a stray NUL byte becomes a
    space, as translation makes it, except in a file's first line: there it is the sign of a
    UTF-16 or binary file, refused whatever `errors` says."""
    nul = " " if errors == "replace" and lineno > 1 else None
    return decode_line(raw, name, lineno, errors, hint, nul)


def iter_lines(
    source: Path | str | BinaryIO, name: str, errors: str = "strict", hint: str = "", nul: str | None = None
) -> Iterator[str]:
    """Yield the lines of a file path or a binary stream (e.g. sys.stdin.buffer) without
    their line endings.

    A stream is read with readline, so each line is yielded as soon as it has arrived:
    `echo x | nmt translate` must not wait for EOF. `hint` is appended to UTF-8 errors
    (e.g. "; use --errors replace to carry on").
    """
    if isinstance(source, str | Path):
        path = Path(source)
        check_readable(path, name)
        with path.open("rb") as stream:
            yield from iter_lines(stream, name, errors, hint, nul)
        return
    lineno = 0
    for raw in iter(source.readline, b""):
        lineno += 1
        yield decode_line(raw, name, lineno, errors, hint, nul)


def read_lines(
    source: Path | str | BinaryIO, name: str, errors: str = "strict", nul: str | None = None
) -> list[str]:
    """All lines at once: for small files such as references and hypotheses."""
    return list(iter_lines(source, name, errors, nul=nul))


def count_lines(path: Path, name: str | None = None) -> int:
    """Number of lines as `iter_lines` would yield them: newlines, plus one for a last line
    without a newline. Reads bytes in large blocks, so it costs little even for 36M lines."""
    check_readable(path, name)
    count = 0
    last = b"\n"
    with path.open("rb") as stream:
        while block := stream.read(_CHUNK):
            count += block.count(b"\n")
            last = block[-1:]
    return count + (last != b"\n")


def raw_chunks(paths: tuple[Path, Path], size: int) -> Iterator[tuple[list[bytes], list[bytes]]]:
    """Aligned chunks of at most `size` raw lines (bytes, endings kept) of two files whose
    line counts were checked to be equal; decode them with `decode_line`."""
    with paths[0].open("rb") as first, paths[1].open("rb") as second:
        while True:
            a, b = list(itertools.islice(first, size)), list(itertools.islice(second, size))
            if len(a) != len(b):
                raise RunFailure(f"{paths[0]} or {paths[1]} changed while being read; run again")
            if not a:
                return
            yield a, b


def is_unicode(text: str) -> bool:
    """Whether `text` can be written as UTF-8: a Python string may hold lone surrogates (a JSON
    escape such as "\\ud800"), which sentencepiece and every encoder refuse."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def visible(text: str) -> str:
    """`text` without its `INVISIBLE` characters and the joiners at a word's edge: a mid-file BOM
    or a soft hyphen would otherwise be pieces the model reads, and a line of them a sentence to
    invent. Whitespace is left as it is, so words are where they were (but for words that were
    invisible only)."""
    if text.isascii():
        return text
    text = text.translate(_INVISIBLE)
    return _LOOSE_JOINERS.sub("", text) if "\u200c" in text or "\u200d" in text else text


def has_letters_or_digits(text: str) -> bool:
    """Whether `text` holds something to translate: a line of punctuation, symbols or emoji only
    (or of nothing visible) has no word, and is kept as it is rather than given an invented
    sentence; a phrase of them cannot be placed by meaning."""
    return any(char.isalnum() for char in visible(text))


def without_nul(text: str) -> str:
    """NUL as a space, as every front end reads it (`nmt translate` at the byte level, `nmt serve`
    and the Python API here): the same translation whatever the front end (sentencepiece would
    take a NUL as a character of the word around it)."""
    return text.replace("\x00", " ")
