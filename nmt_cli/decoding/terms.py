"""What a translation must contain, from what the user gives: a line's own target phrases
(`nmt translate --constraints`, `constraints=`, a request's "constraints") and the target terms of
a glossary whose source terms the line holds. Each becomes a phrase of piece ids for the
constrained search (`decoding.constraints`), checked first: a phrase that cannot be met is an
error naming its line, never dropped in silence.

A phrase is encoded alone, as the first word of a sentence is: "▁Haus" for "Haus", which is the
piece a word takes after a space, so it matches the word inside a sentence too.
"""

from __future__ import annotations

import functools
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence, Sized
from dataclasses import dataclass
from typing import Any

import torch
from sentencepiece import SentencePieceProcessor

from nmt_cli.data.glossary import Glossary
from nmt_cli.data.text import has_letters_or_digits, is_unicode, visible, without_nul
from nmt_cli.data.tokenizer import MosesBpe
from nmt_cli.errors import InputError
from nmt_cli.special_ids import EOS_ID, UNK_ID

Encode = Callable[[str], list[int]]
ENDS_A_WORD = ("Po", "Pe", "Pf", "Ps", "Pi", "Pc")
"""The Unicode punctuation categories that may follow a phrase: all but dashes (Pd)."""


Span = tuple[int, int]
"""Characters `start:end` of a line's composed form (NFC): where a glossary's source term stands."""


@dataclass(frozen=True)
class Constrained:
    """A line and the target phrases (piece ids) its translation must contain."""

    text: str
    phrases: tuple[tuple[int, ...], ...]
    spans: tuple[tuple[Span, ...], ...] = ()
    """For each phrase, where its source term stands in the line (a glossary term: its translation
    goes there, in the model's own word's place); none for a phrase that may go anywhere (the
    line's own phrases), and for phrases past the end of `spans`."""

    def __len__(self) -> int:  # decoding workers share lines out by length
        return len(self.text)


def text_of(line: str | Constrained) -> str:
    return line.text if isinstance(line, Constrained) else line


def phrases_of(line: str | Constrained) -> list[list[int]]:
    return [list(p) for p in line.phrases] if isinstance(line, Constrained) else []


def anchors_of(line: str | Constrained, encode: Callable[[str], Sized], pieces: int) -> list[tuple[int, ...]]:
    """For each phrase of `line`, the source pieces where its source term stands, as the search
    reads them (`decoding.placement`): none for a phrase that may go anywhere. `encode` gives the
    source pieces of a text; `pieces` is the number of the line's (positions past it were cut
    off). A term's pieces are those between the pieces of the text before it and of the text up
    to its end, each text encoded as the line is (`Translator.source_ids`)."""
    if not isinstance(line, Constrained):
        return []
    text = unicodedata.normalize("NFC", line.text).encode("utf-8", "replace").decode("utf-8")

    def encode_part(part: str) -> Sized:
        part = visible(part).strip()
        return encode(part) if part else ()

    found = []
    for spans in line.spans + ((),) * (len(line.phrases) - len(line.spans)):
        at: set[int] = set()
        for start, end in spans:
            first = len(encode_part(text[:start]))
            at.update(range(first, max(len(encode_part(text[:end])), first + 1)))
        found.append(tuple(sorted(p for p in at if p < pieces)))
    return found


class ConstraintError(InputError):
    """A phrase that cannot be enforced. `line` is its line's index in the call (0-based), which a
    front end that translates its input lines whole turns into a line number; the message quotes
    the line, which is a sentence of the input where lines were split. `source`: whether the
    phrase was the line's own ("constraints") or a glossary's ("glossary")."""

    def __init__(self, line: int, text: str, problem: str, source: str = "constraints") -> None:
        self.line, self.text, self.problem, self.source = line, text, problem, source
        shown = text if len(text) <= 40 else text[:39] + "…"
        super().__init__(f"{problem} (translating {shown!r})")

    def __reduce__(self) -> tuple[type, tuple[int, str, str, str]]:  # raised in a worker, too
        return ConstraintError, (self.line, self.text, self.problem, self.source)


@dataclass(frozen=True)
class Vocabulary:
    """How phrases become pieces: the target encoder, its unknown piece, and each line's room (the
    most pieces its translation may have, EOS left out)."""

    encode: Encode
    unk_id: int
    room: Callable[[str], int]

    @classmethod
    def of(cls, tgt: SentencePieceProcessor | MosesBpe, room: Callable[[str], int]) -> Vocabulary:
        return cls(tgt.encode, tgt.unk_id() if isinstance(tgt, SentencePieceProcessor) else UNK_ID, room)


def constrained_lines(
    lines: Sequence[str | Constrained],
    constraints: Iterable[Sequence[str]] | None,
    glossary: Glossary | None,
    vocabulary: Vocabulary,
) -> list[str | Constrained]:
    """Each line with its phrases: those it already has (a `Constrained` line), those `constraints`
    gives for it, then the target terms of the `glossary` entries it matches (each phrase once). A
    line without any stays a plain string."""
    given = None if constraints is None else phrase_lists(constraints, len(lines))
    out: list[str | Constrained] = []
    for i, line in enumerate(lines):
        text = text_of(line)
        if given is not None and not isinstance(given[i], list | tuple):
            hint = f"; write [{given[i]!r}]" if isinstance(given[i], str) else ""
            raise InputError(
                f"constraints[{i}]: a list of phrases for the line, not {type(given[i]).__name__}{hint}"
            )
        wanted = list(given[i]) if given is not None else []
        for phrase in wanted:
            if not isinstance(phrase, str):
                raise ConstraintError(i, text, f"a constraint is a string, not {type(phrase).__name__}")
        where = _term_spans(glossary, text, wanted)
        if not wanted and not where:
            out.append(line)
            continue
        own = list(dict.fromkeys(wanted))
        phrases = _checked(i, text, own, list(where), vocabulary)
        out.append(_merged(line, phrases, [()] * len(own) + list(where.values())))
    return out


def _term_spans(glossary: Glossary | None, text: str, wanted: list[str]) -> dict[str, tuple[Span, ...]]:
    """The target terms of the glossary entries `text` matches, in order, each once, with where
    their source terms stand; those that are the line's own phrases (`wanted`) left out."""
    where: dict[str, tuple[Span, ...]] = {}
    for match in glossary.matches(text) if glossary is not None else []:
        if match.target not in wanted:
            where[match.target] = where.get(match.target, ()) + ((match.start, match.end),)
    return where


def _merged(
    line: str | Constrained, phrases: tuple[tuple[int, ...], ...], spans: list[tuple[Span, ...]]
) -> Constrained:
    """`line` with `phrases` (placed at `spans`) after those it has, each phrase once."""
    had = line.phrases if isinstance(line, Constrained) else ()
    had_spans = line.spans if isinstance(line, Constrained) else ()
    had_spans += ((),) * (len(had) - len(had_spans))
    where: dict[tuple[int, ...], tuple[Span, ...]] = {}
    for phrase, new in zip(had + phrases, had_spans + tuple(spans), strict=True):
        if phrase not in where:
            where[phrase] = new
        elif where[phrase] and new:  # two source terms with one target term: at either
            where[phrase] += new
        else:  # the same pieces as a phrase that may go anywhere: anywhere
            where[phrase] = ()
    kept = tuple(where.values())
    return Constrained(text_of(line), tuple(where), kept if any(kept) else ())


def phrase_lists(constraints: object, lines: int) -> list[Any]:
    """`constraints` as a list of one entry a line, from any iterable (a generator too); one string,
    a mapping or what is not iterable is a TypeError naming constraints."""
    what = "one list of phrases a line, in the order of the lines"
    if isinstance(constraints, str | bytes):
        hint = (
            f"; for one line that must contain it, write [[{constraints!r}]]"
            if isinstance(constraints, str) and len(constraints) <= 40
            else ""
        )
        raise TypeError(f"constraints: {what}, not one {type(constraints).__name__}{hint}")
    if isinstance(constraints, Mapping) or not isinstance(constraints, Iterable):
        raise TypeError(f"constraints: {what}, not {type(constraints).__name__}")
    given = list(constraints)
    if len(given) != lines:
        raise InputError(f"constraints: {len(given)} lists for {lines} lines; give one list a line")
    return given


def _checked(
    index: int, line: str, own: list[str], terms: list[str], vocabulary: Vocabulary
) -> tuple[tuple[int, ...], ...]:
    """The line's `own` phrases and the glossary `terms` it matched as piece ids, or the error
    that names the first that cannot be met."""
    source = "constraints" if own else "glossary"
    if not has_letters_or_digits(line):  # translation keeps such a line as it is
        what = "a line without letters or digits" if visible(line).strip() else "an empty line"
        raise ConstraintError(
            index, line, f"{what} cannot contain {(own + terms)[0]!r}; leave its constraints out"
        )
    encoded = [_encoded(index, line, p, vocabulary, "constraints") for p in own]
    encoded += [_encoded(index, line, p, vocabulary, "glossary") for p in terms]
    needed, room = sum(len(p) for p in encoded), vocabulary.room(line)
    if needed > room:
        raise ConstraintError(
            index,
            line,
            f"the constraints need {needed} pieces, more than the {room} this line's translation may "
            "have; raise max_len_a or max_len_b, or shorten the constraints",
            source,
        )
    return tuple(encoded)


def _encoded(index: int, line: str, phrase: str, vocabulary: Vocabulary, source: str) -> tuple[int, ...]:
    phrase = without_nul(phrase)  # as in the lines
    if not visible(phrase).strip():
        raise ConstraintError(index, line, "an empty constraint: leave it out", source)
    if not is_unicode(phrase):
        raise ConstraintError(
            index, line, f"constraint {phrase!r} is not valid Unicode (a lone surrogate)", source
        )
    if not has_letters_or_digits(phrase):
        # Nothing ties it to a place in the sentence, and a stop met early ends the translation.
        raise ConstraintError(
            index,
            line,
            f"constraint {phrase!r} has no letter or digit: the search would put it anywhere; leave "
            "it out, or give it with the word it goes with",
            source,
        )
    ids = tuple(vocabulary.encode(phrase.strip()))
    if vocabulary.unk_id in ids:
        raise ConstraintError(
            index,
            line,
            f"constraint {phrase!r} has characters the model's vocabulary lacks (it would "
            "produce <unk>); write it with characters the model knows",
            source,
        )
    return ids


def word_ends(tgt: SentencePieceProcessor | MosesBpe, size: int) -> torch.Tensor | None:
    """(size,) True at the target ids that may follow a phrase's last piece: pieces that start a
    word ("▁..."), pieces of punctuation other than dashes only, the special ids (EOS among them),
    and any id past the sentencepiece model's own. None with Moses and BPE, where a phrase ends
    with a word."""
    return _word_ends(tgt, size) if isinstance(tgt, SentencePieceProcessor) else None


def word_starts(tgt: SentencePieceProcessor | MosesBpe, size: int) -> torch.Tensor | None:
    """(size,) True at the target ids that start a word of letters or digits ("▁Fahrrad", not
    "▁" or "▁-"): the pieces a glossary term placed in the model's word's place displaces. None
    with Moses and BPE."""
    return _word_starts(tgt, size) if isinstance(tgt, SentencePieceProcessor) else None


@functools.lru_cache(maxsize=8)
def _word_starts(spm: SentencePieceProcessor, size: int) -> torch.Tensor:
    starts = torch.zeros(size, dtype=torch.bool)
    for i in range(min(size, spm.get_piece_size())):
        piece = spm.id_to_piece(i)
        starts[i] = piece.startswith("\u2581") and any(ch.isalnum() for ch in piece) and i > EOS_ID
    return starts


@functools.lru_cache(maxsize=8)
def _word_ends(spm: SentencePieceProcessor, size: int) -> torch.Tensor:
    allowed = torch.ones(size, dtype=torch.bool)
    for i in range(min(size, spm.get_piece_size())):
        piece = spm.id_to_piece(i)
        # Punctuation ends a word, but a dash joins it to the next ("Leder-Hut" is another word).
        punctuation = bool(piece) and all(unicodedata.category(ch) in ENDS_A_WORD for ch in piece)
        special = spm.is_control(i) or spm.is_unknown(i) or i <= EOS_ID
        allowed[i] = piece.startswith("\u2581") or punctuation or special
    return allowed
