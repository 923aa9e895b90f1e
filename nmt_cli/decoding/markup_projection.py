"""A unit's translation put back into its markup (`decoding.markup`): inline elements wrap the
target words aligned to the source words they wrapped, kept nested as in the source; an atom
between words goes after the target word aligned to the source word before it.

Punctuation at a word's edge stays where the source had it: an element whose source text did
not end in punctuation ends before the target word's trailing punctuation (`<b>fruit</b>.` gives
`<b>Obst</b>.`, not `<b>Obst.</b>`), and one whose text did not begin with punctuation begins
after the leading punctuation (`"<b>fruit</b>"` keeps its quotes outside)."""

from __future__ import annotations

import bisect
import re
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass

from nmt_cli.decoding.alignment import Alignment
from nmt_cli.decoding.markup_spans import Span, spans_of
from nmt_cli.decoding.markup_units import Atom, Event, Unit


def words(text: str) -> Iterator[tuple[int, int]]:
    for found in re.finditer(r"\S+", text):
        yield found.start(), found.end()


def is_punctuation(char: str) -> bool:
    return unicodedata.category(char).startswith("P")


def punctuated(word: str) -> tuple[str, str, str]:
    """A word as (leading punctuation, the rest, trailing punctuation); a word of punctuation
    alone is all "rest"."""
    start, end = 0, len(word)
    while start < end and is_punctuation(word[start]):
        start += 1
    while end > start and is_punctuation(word[end - 1]):
        end -= 1
    if start == end:
        return "", word, ""
    return word[:start], word[start:end], word[end:]


def projected(unit: Unit, target: str, alignment: Alignment) -> list[Event]:
    """The unit's events with the translation in place of its words. What precedes the first word
    and follows the last outside inline elements (whitespace, atoms) stays as it was; what stands
    inside an element before its first word or after its last stays there, at its edge."""
    source = unit.text
    src_words = list(words(source))
    tgt_words = target.split()
    if not src_words or not tgt_words:
        return as_is(unit)
    owners = _char_owners(unit)
    word_owners = [set().union(*(owners[i] for i in range(a, b))) for a, b in src_words]
    linked: dict[int, list[int]] = {}
    for i, j in alignment:
        if i < len(src_words) and j < len(tgt_words):
            linked.setdefault(i, []).append(j)

    def target_of(i: int) -> int:
        """A target word for source word i: its last aligned one, else the same relative place."""
        if linked.get(i):
            return max(linked[i])
        return min(len(tgt_words) - 1, round(i * len(tgt_words) / len(src_words)))

    first, last = src_words[0][0], src_words[-1][1]
    spans = spans_of(unit, word_owners, linked, target_of, len(tgt_words))
    edges = _Edges.of(unit, src_words, word_owners)
    opens, closes = _placed(spans, edges)
    atoms: dict[int, list[Event]] = {}
    for between in edges.middle:
        k = target_of(bisect.bisect_left(src_words, between.chars, key=lambda word: word[0]) - 1) + 1
        if not _kept_inside(between, k, opens, closes):
            atoms.setdefault(k, []).append(("atom", between))
    events, after = _outside(unit, first, last)
    for k, word in enumerate(tgt_words):
        if k:
            events.append(("text", " "))
        for atom in atoms.get(k, []):
            events.extend([atom, ("text", " ")])
        opening, closing = opens.get(k, []), closes.get(k + 1, [])
        if opening or closing:
            _tagged_word(events, word, opening, closing, edges)
        else:  # most words: no tag at either edge
            events.append(("text", word))
    for atom in atoms.get(len(tgt_words), []):
        events.extend([("text", " "), atom])
    for _, part in opens.get(len(tgt_words), []):  # empty elements at the end
        events.extend(part)
    return events + after


def _tagged_word(
    events: list[Event],
    word: str,
    opening: list[tuple[int | None, list[Event]]],
    closing: list[tuple[int | None, list[Event]]],
    edges: _Edges,
) -> None:
    """A target word with the tags that open before it and close after it. Outer elements that
    held the punctuation at its edge in the source open before it (close after it); inner ones
    that did not, after it (before it)."""
    lead, core, trail = punctuated(word)
    inner = next(
        (n for n, (e, _) in enumerate(opening) if e is not None and e not in edges.leads), len(opening)
    )
    outer = next((n for n, (e, _) in enumerate(closing) if e in edges.trails), len(closing))
    for n, (_, part) in enumerate(opening):
        events.extend([("text", lead), *part] if n == inner and lead else part)
    events.append(("text", lead + core if inner == len(opening) else core))
    for n, (_, part) in enumerate(closing):
        events.extend([("text", trail), *part] if n == outer and trail else part)
    if outer == len(closing) and trail:
        events.append(("text", trail))


@dataclass
class _Edges:
    """What stands inside each inline element before its first word (`heads`) and after its last
    (`tails`): whitespace and atoms, in their order; and the atoms between words (`middle`)."""

    heads: dict[int, list[Event]]
    tails: dict[int, list[Event]]
    middle: list[Atom]
    leads: set[int]
    """The elements whose source text begins with punctuation; `trails`, those whose text ends with it."""
    trails: set[int]

    @classmethod
    def of(cls, unit: Unit, src_words: list[tuple[int, int]], word_owners: list[set[int]]) -> _Edges:
        starts: dict[int, int] = {}  # each element's first character of a word, and last + 1
        ends: dict[int, int] = {}
        for (a, b), owned in zip(src_words, word_owners, strict=True):
            for element_id in owned:
                starts.setdefault(element_id, a)
                ends[element_id] = b
        edges = cls({}, {}, [], set(), set())
        first, last = src_words[0][0], src_words[-1][1]
        opening: dict[int, str] = {}  # each element's first and last character other than a space
        closing: dict[int, str] = {}
        at = 0
        for atom, text, stack in _in_order(unit):
            if atom is not None:
                owner = atom.owners[-1] if atom.owners else None
                if owner is not None and atom.chars <= starts[owner]:
                    edges.heads.setdefault(owner, []).append(("atom", atom))
                elif owner is not None and atom.chars >= ends[owner]:
                    edges.tails.setdefault(owner, []).append(("atom", atom))
                elif first < atom.chars < last:
                    edges.middle.append(atom)
                continue
            if stack and text:
                owner = stack[-1]
                if head := text[: max(0, starts[owner] - at)]:
                    edges.heads.setdefault(owner, []).append(("text", head))
                if tail := text[max(0, ends[owner] - at) :]:
                    edges.tails.setdefault(owner, []).append(("text", tail))
                if stripped := text.strip():
                    for element_id in stack:
                        opening.setdefault(element_id, stripped[0])
                        closing[element_id] = stripped[-1]
            at += len(text)
        edges.leads = {element_id for element_id, char in opening.items() if is_punctuation(char)}
        edges.trails = {element_id for element_id, char in closing.items() if is_punctuation(char)}
        return edges


def _in_order(unit: Unit) -> Iterator[tuple[Atom | None, str, tuple[int, ...]]]:
    """The unit's texts and atoms in the order they stand: (None, text, its inline elements) or
    (atom, "", ())."""
    atoms = iter(unit.atoms)
    atom = next(atoms, None)
    for index, (text, stack) in enumerate(unit.texts):
        while atom is not None and atom.texts <= index:
            yield atom, "", ()
            atom = next(atoms, None)
        yield None, text, stack
    while atom is not None:
        yield atom, "", ()
        atom = next(atoms, None)


Opens = dict[int, list[tuple[int | None, list[Event]]]]
"""Before target word k: (the id of an element that opens there, or None for an empty element with
those nested in it; its events), parents first."""
Closes = dict[int, list[tuple[int | None, list[Event]]]]
"""After target word k - 1: (an element's id, or None for an empty element at the end of its
parent; its events), children first."""


def _kept_inside(atom: Atom, k: int, opens: Opens, closes: Closes) -> bool:
    """Whether an atom placed before target word k, where the element it stood in ends or
    begins, is put inside that element (as it was in the source) rather than beside it."""
    owner = atom.owners[-1] if atom.owners else None
    if owner is None:
        return False
    for element_id, events in closes.get(k, []):
        if element_id == owner:
            events[:0] = [("text", " "), ("atom", atom)]
            return True
    for element_id, events in opens.get(k, []):
        if element_id == owner:
            events.extend([("atom", atom), ("text", " ")])
            return True
    return False


def _placed(spans: dict[int, Span], edges: _Edges) -> tuple[Opens, Closes]:
    """Where each span's tags go, each element's edges inside it. An element left with no target
    word stays, empty, at its place, and one nested in it stays inside it."""
    empty = {element_id for element_id, span in spans.items() if span.start > span.end}
    inside: dict[int, list[int]] = {}
    for element_id in empty:
        parent = spans[element_id].parent
        if parent in empty:
            inside.setdefault(parent, []).append(element_id)

    def nested(element_id: int, events: list[Event]) -> list[Event]:
        element = spans[element_id].element
        events.append(("open", element))
        events.extend(edges.heads.get(element_id, ()))
        for child in inside.get(element_id, ()):
            nested(child, events)
        events.extend(edges.tails.get(element_id, ()))
        events.append(("close", element))
        return events

    opens: Opens = {}
    closes: Closes = {}
    for element_id, span in spans.items():
        if element_id not in empty:
            head = [("open", span.element), *edges.heads.get(element_id, [])]
            opens.setdefault(span.start, []).append((element_id, head))
            tail = [*edges.tails.get(element_id, []), ("close", span.element)]
            closes.setdefault(span.end + 1, []).insert(0, (element_id, tail))
        elif span.parent in empty:  # inside its empty parent (`nested`)
            continue
        elif span.parent is not None and span.start == spans[span.parent].end + 1:
            # At the end of its parent's words: inside the parent, before it closes.
            at = closes[span.start]
            parent = next(n for n, (e, _) in enumerate(at) if e == span.parent)
            at.insert(parent, (None, nested(element_id, [])))
        else:
            opens.setdefault(span.start, []).append((None, nested(element_id, [])))
    return opens, closes


def _char_owners(unit: Unit) -> list[tuple[int, ...]]:
    owners: list[tuple[int, ...]] = []
    for text, stack in unit.texts:
        owners.extend([stack] * len(text))
    return owners


def as_is(unit: Unit) -> list[Event]:
    """A unit with nothing to translate, as it was."""
    events: list[Event] = []
    stack: tuple[int, ...] = ()
    for atom, text, owners in _in_order(unit):
        owners = atom.owners if atom is not None else owners
        common = 0
        while common < min(len(stack), len(owners)) and stack[common] == owners[common]:
            common += 1
        events.extend(("close", unit.elements[e]) for e in reversed(stack[common:]))
        events.extend(("open", unit.elements[e]) for e in owners[common:])
        stack = owners
        events.append(("atom", atom) if atom is not None else ("text", text))
    events.extend(("close", unit.elements[e]) for e in reversed(stack))
    return events


def _outside(unit: Unit, first: int, last: int) -> tuple[list[Event], list[Event]]:
    """What stands before character `first` and from character `last` of the unit's text outside
    its inline elements (whitespace, and atoms), in their order."""
    before: list[Event] = []
    after: list[Event] = []
    at = 0
    for atom, text, stack in _in_order(unit):
        if atom is not None:
            if not atom.owners and atom.chars <= first:
                before.append(("atom", atom))
            elif not atom.owners and atom.chars >= last:
                after.append(("atom", atom))
            continue
        end = at + len(text)
        if not stack and at < first:
            before.append(("text", text[: first - at]))
        if not stack and end > last:
            after.append(("text", text[max(0, last - at) :]))
        at = end
    return before, after
