"""Glossaries for lexically constrained decoding: the target terms a translation must contain
where its source line holds their source terms.

A glossary file is UTF-8 text, one entry a line: `source term<TAB>target term`. Each term is
stripped of its surrounding whitespace and must not be empty; a target term needs a letter or a
digit (the search could put a lone "." or "%" anywhere, and a stop ends the translation). Lines
with nothing but spaces are skipped; every other line is an entry, a line starting with `#` too,
since `#` or `#1` may be a real term. A source term given twice is an error naming both lines,
even with the same target: a glossary that says two things about one term is a mistake for its
author to fix. An empty file is an error too (likely the wrong file); an empty `Glossary.of` is
not (a caller's empty mapping).

Terms match whole words, case as the glossary writes them: `Berlin` matches "Berlin's" and
"Berlin." but neither "berlin" nor "Berliner" (a glossary that wants both cases lists both). Words
are runs of word characters and single other non-space characters, in Unicode's composed form
(NFC), so that "Köln" typed with a combining diaeresis still matches. A term's words must be
consecutive words of the line; where terms overlap, the longest one at the leftmost position
wins and matching goes on after it ("New York City" over "New York").

Matching walks a trie of words (a dict of dicts) from each word of the line, at most as deep as
the longest term: its cost grows with the line, not with the glossary, so 100,000 entries match
as fast as ten.
"""

from __future__ import annotations

import os
import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nmt_cli.data.text import has_letters_or_digits, is_unicode, iter_lines
from nmt_cli.errors import InputError

_WORD = re.compile(r"\w+|[^\w\s]")
_TARGET = ""
"""The key of a trie node that holds the target term of the source term ending there; no word is
empty, so it never collides with one."""
_FORMAT = "expected `source term<TAB>target term`"

Trie = dict[str, Any]


@dataclass(frozen=True)
class Match:
    """A source term found in a line: its target term, and the characters `start:end` it spans in
    the line's composed form (NFC), where decoding places the target term."""

    target: str
    start: int
    end: int


def words(text: str) -> tuple[str, ...]:
    """The words that terms match: runs of word characters and single other non-space characters."""
    return tuple(_WORD.findall(unicodedata.normalize("NFC", text)))


@dataclass(frozen=True)
class Glossary:
    """Source terms and the target terms that decoding enforces where a line holds them."""

    trie: Trie = field(repr=False)
    """Word to child node; a node where a source term ends holds its target term under `_TARGET`."""
    longest: int
    """The most words of any source term: no walk of the trie goes deeper."""
    size: int

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> Glossary:
        """The glossary in a TSV file; an InputError naming `path:line` for any bad line."""
        path = Path(path)  # a str from Python callers, as open() takes
        name = f"glossary {path}"
        if path.is_dir():
            raise InputError(f"{name}: is a directory; give a TSV file, {_FORMAT} a line")
        entries = []
        for lineno, line in enumerate(iter_lines(path, name, hint="; save the glossary as UTF-8"), 1):
            if "\t" not in line and not line.strip():
                continue
            tabs = line.count("\t")
            if tabs != 1:
                found = "no tab" if tabs == 0 else f"{tabs} tabs"
                raise InputError(f"{name}:{lineno}: {_FORMAT}, found {found}; put one tab between the terms")
            source, target = line.split("\t")
            entries.append((lineno, source, target))
        if not entries:
            raise InputError(f"{name}: no entries; write one entry a line, `source term<TAB>target term`")
        return cls._build(entries, lambda n: f"{name}:{n}", "line")

    @classmethod
    def of(cls, entries: Mapping[str, str] | Iterable[tuple[str, str]], where: str = "glossary") -> Glossary:
        """A glossary of (source term, target term) pairs or a mapping of them; `where` names them in
        errors, which say "{where} entry N" (N from 1; "entry N" where `where` is "")."""
        pairs = entries.items() if isinstance(entries, Mapping) else entries
        numbered = []

        def at(n: int) -> str:
            return f"{where} entry {n}".lstrip()

        for n, pair in enumerate(pairs, 1):
            is_pair = isinstance(pair, tuple | list) and len(pair) == 2
            if not is_pair or not all(isinstance(term, str) for term in pair):
                raise InputError(f"{at(n)}: expected (source term, target term), got {pair!r}")
            if not all(is_unicode(term) for term in pair):
                raise InputError(f"{at(n)}: {pair!r} is not valid Unicode (a lone surrogate)")
            numbered.append((n, pair[0], pair[1]))
        return cls._build(numbered, at, "entry")

    @classmethod
    def _build(cls, entries: Iterable[tuple[int, str, str]], at: Callable[[int], str], unit: str) -> Glossary:
        trie: Trie = {}
        first: dict[tuple[str, ...], int] = {}
        for n, source, target in entries:
            key, target = words(source), target.strip()
            for side, empty in (("source", not key), ("target", not target)):
                if empty:
                    raise InputError(f"{at(n)}: empty {side} term; give both terms or remove the entry")
            if not has_letters_or_digits(target):  # a stop or a symbol alone would go anywhere
                what = f"target term {target!r} has no letter or digit"
                raise InputError(f"{at(n)}: {what}; give it with the word it goes with")
            if key in first:
                again = f"source term {source.strip()!r} repeats {unit} {first[key]}"
                raise InputError(f"{at(n)}: {again}; keep one of the two entries")
            first[key] = n
            node = trie
            for word in key:
                node = node.setdefault(word, {})
            node[_TARGET] = target
        return cls(trie, max(map(len, first), default=0), len(first))

    def __len__(self) -> int:
        return self.size

    def targets(self, line: str) -> list[str]:
        """The target terms whose source terms `line` holds, in the order they first occur there, each
        once; overlapping terms go to the longest at the leftmost position."""
        return list(dict.fromkeys(match.target for match in self.matches(line)))

    def matches(self, line: str) -> list[Match]:
        """Each source term `line` holds, in order, with its target term; overlapping terms go to the
        longest at the leftmost position."""
        text = unicodedata.normalize("NFC", line)
        found = [(m.group(), m.start(), m.end()) for m in _WORD.finditer(text)]
        matched: list[Match] = []
        start = 0
        while start < len(found):
            node, end, target = self.trie, start, None
            for i in range(start, min(len(found), start + self.longest)):
                child = node.get(found[i][0])
                if child is None:
                    break
                node = child
                if _TARGET in node:
                    end, target = i + 1, node[_TARGET]
            if target is None:
                start += 1
            else:
                matched.append(Match(target, found[start][1], found[end - 1][2]))
                start = end
        return matched
