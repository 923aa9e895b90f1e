"""HTML translated with its markup: each block's text as whole sentences, inline elements moved onto
the target words that their source words align to, and what must not change kept as it is.

A fragment is parsed by lxml's HTML parser as the body of a page (which repairs unclosed tags,
stray `<` and bad nesting as browsers do, and drops a tag left unfinished at the end) and read as
a flat run of events. A block (`<p>`, `<li>`, `<td>`, a heading ...)
or a `<br>` ends a unit; the text of a unit is translated in one piece, so that an inline tag never
cuts a sentence. Inline elements (`<strong>`, `<em>`, `<a>`, `<span>` ...) then wrap the target
words aligned to the source words they wrapped (their span, kept nested as in the source); kept
whole ("atoms", copied with their attributes and content): mentions, hashtags and links whose
text is a URL (as Mastodon marks them), elements marked translate="no" or "notranslate", `<code>`,
`<pre>`, `<script>`, `<style>` and the like, void elements such as `<img>`, and any inline element
with no text of its own outside such atoms (Mastodon's `<span class="h-card">`). An atom goes
after the target word aligned to the source word before it.
"""

from __future__ import annotations

import bisect
import copy
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from xml.sax.saxutils import escape

from lxml import html
from lxml.etree import _Element

from nmt_cli.decoding.alignment import Alignment
from nmt_cli.decoding.html_parsing import NOT_XML, MarkupError, parsed_body, same_element

__all__ = ["MarkupError", "Parsed", "translate_fragments"]

Translate = Callable[[list[str]], list[tuple[str, Alignment]]]
"""Texts in, (translation, word alignment) out."""

BLOCKS = frozenset(
    "address article aside blockquote body caption dd details dialog div dl dt fieldset figcaption figure "
    "footer form h1 h2 h3 h4 h5 h6 header hgroup hr html legend li main menu nav ol optgroup option p pre "
    "section summary table tbody td tfoot th thead tr ul".split()
)
KEPT = frozenset(
    "code pre script style kbd samp var math svg textarea template noscript iframe object".split()
)
"""Elements whose content is not text to translate."""
URL = re.compile(r"^\s*(https?://|www\.)\S+\s*$")


@dataclass
class _Unit:
    """The run of text and inline markup between two block boundaries."""

    texts: list[tuple[str, tuple[int, ...]]] = field(default_factory=list)  # (text, open inline ids)
    atoms: list[tuple[int, _Element]] = field(default_factory=list)  # (characters of text before, atom)
    elements: dict[int, _Element] = field(default_factory=dict)  # the inline elements, by id

    @property
    def text(self) -> str:
        return "".join(t for t, _ in self.texts)


Event = tuple[str, object]
"""("open", element) / ("close", element) / ("text", str) / ("atom", element) / ("unit", _Unit)."""


def translate_fragments(fragments: list[str], translate: Translate) -> list[str]:
    """Each HTML fragment translated, its markup kept; raises MarkupError for one lxml cannot parse."""
    parsed = Parsed.of(fragments)
    return parsed.rebuild(translate(parsed.texts))


@dataclass
class Parsed:
    """Fragments read for translation: `texts` to translate (the units with words, stripped), and
    `rebuild` to put their translations back into the markup. A server translates the texts with
    its own queue between the two."""

    events: list[list[Event]]
    units: list[_Unit]

    @classmethod
    def of(cls, fragments: list[str]) -> Parsed:
        events = [_events(fragment) for fragment in fragments]
        units = [
            unit
            for sequence in events
            for kind, unit in sequence
            if kind == "unit" and isinstance(unit, _Unit)
        ]
        return cls(events, units)

    @property
    def texts(self) -> list[str]:
        return [unit.text.strip() for unit in self.units if unit.text.strip()]

    def rebuild(self, translations: list[tuple[str, Alignment]]) -> list[str]:
        """The fragments with `translations` (one for each of `texts`, in order) in place."""
        translated = iter(translations)
        rebuilt: dict[int, list[Event]] = {}
        for unit in self.units:
            if unit.text.strip():
                target, alignment = next(translated)
                rebuilt[id(unit)] = _projected(unit, target, alignment)
            else:
                rebuilt[id(unit)] = _as_is(unit)
        return [_serialised(sequence, rebuilt) for sequence in self.events]


def _is_atom(element: _Element) -> bool:
    return _kept_whole(element) or not _own_text(element).strip()


def _kept_whole(element: _Element) -> bool:
    """An atom whatever text it holds: a comment, code, a mention, an element not to translate..."""
    tag = element.tag if isinstance(element.tag, str) else ""
    if not tag or tag in KEPT or element.get("translate") == "no":
        return True
    classes = (element.get("class") or "").split()
    if "notranslate" in classes or tag in ("img", "input", "hr", "wbr", "video", "audio", "canvas"):
        return True
    marked = "mention" in classes or "hashtag" in classes
    return tag == "a" and (marked or bool(URL.match(element.text_content())))


def _holds_block(element: _Element) -> bool:
    return any(d.tag in BLOCKS or d.tag == "br" for d in element.iterdescendants() if isinstance(d.tag, str))


def _own_text(element: _Element) -> str:
    """The element's text outside atoms among its descendants, each read once (not once an ancestor)."""
    parts = [element.text or ""]
    for child in element:
        if not _kept_whole(child):
            parts.append(_own_text(child))
        parts.append(child.tail or "")
    return "".join(parts)


def _events(fragment: str) -> list[Event]:
    """The fragment as events, with each unit's text and inline markup gathered into one "unit"."""
    # Lone surrogates become "?" (as `Translator` reads lines): lxml would drop the text after one.
    fragment = fragment.encode("utf-8", "replace").decode("utf-8").translate(NOT_XML)
    root = parsed_body(fragment) if fragment.strip() else None
    if root is None:
        return [("text", fragment)]
    events: list[Event] = []
    unit = _Unit()
    events.append(("unit", unit))
    inline: list[int] = []

    def boundary() -> None:
        nonlocal unit
        unit = _Unit()
        events.append(("unit", unit))

    def walk(element: _Element) -> None:
        if element.text:
            unit.texts.append((element.text, tuple(inline)))
        for child in element:
            tag = child.tag if isinstance(child.tag, str) else ""
            if tag in BLOCKS and _is_atom(child):  # a block kept whole (translate="no"...): alone
                boundary()
                unit.atoms.append((0, child))
                boundary()
            elif tag in BLOCKS or tag == "br" or (not _is_atom(child) and _holds_block(child)):
                # An inline element around a block (lxml keeps <em><p>..</p></em>) is a block too.
                events.append(("open", child))
                if tag != "br":
                    boundary()
                    walk(child)
                events.append(("close", child))
                boundary()
            elif _is_atom(child):
                unit.atoms.append((len(unit.text), child))
            else:
                unit.texts.append(("", (*inline, id(child))))  # an element with no text still has a place
                inline.append(id(child))
                unit.elements[id(child)] = child
                walk(child)
                inline.pop()
            if child.tail:
                unit.texts.append((child.tail, tuple(inline)))

    walk(root)
    return events


@dataclass
class _Span:
    element: _Element
    parent: int | None  # the id of the enclosing inline element
    start: int  # first target word; start > end: empty, placed before word `start`
    end: int


def _words(text: str) -> Iterator[tuple[int, int]]:
    for found in re.finditer(r"\S+", text):
        yield found.start(), found.end()


def _projected(unit: _Unit, target: str, alignment: Alignment) -> list[Event]:
    """The unit's events with the translation in place of its words: inline elements wrap the
    target words aligned to their source words, an atom between words goes after the target word
    aligned to the source word before it; what precedes the first word and follows the last
    (whitespace, atoms) stays as it was."""
    source = unit.text
    src_words = list(_words(source))
    tgt_words = target.split()
    if not src_words or not tgt_words:
        return _as_is(unit)
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
    opens: dict[int, list[Event]] = {}  # before target word k, after its atoms
    closes: dict[int, list[Event]] = {}  # after target word k - 1
    for span in _spans(unit, word_owners, linked, target_of, len(tgt_words)):
        if span.start > span.end:  # no target word: the element stays, empty, at its place
            opens.setdefault(span.start, []).extend([("open", span.element), ("close", span.element)])
        else:
            opens.setdefault(span.start, []).append(("open", span.element))
            closes.setdefault(span.end + 1, []).insert(0, ("close", span.element))
    atoms: dict[int, list[Event]] = {}
    for chars, atom in unit.atoms:
        if first < chars < last:
            k = target_of(bisect.bisect_left(src_words, chars, key=lambda word: word[0]) - 1) + 1
            atoms.setdefault(k, []).append(("atom", atom))
    events = _outside(unit, 0, first)
    for k in range(len(tgt_words) + 1):
        events.extend(closes.get(k, []))
        if k == len(tgt_words):
            for atom in atoms.get(k, []):
                events.extend([("text", " "), atom])
            events.extend(opens.get(k, []))  # empty elements at the end
            break
        if k:
            events.append(("text", " "))
        for atom in atoms.get(k, []):
            events.extend([atom, ("text", " ")])
        events.extend(opens.get(k, []))
        events.append(("text", tgt_words[k]))
    return events + _outside(unit, last, len(source))


def _char_owners(unit: _Unit) -> list[tuple[int, ...]]:
    owners: list[tuple[int, ...]] = []
    for text, stack in unit.texts:
        owners.extend([stack] * len(text))
    return owners


def _spans(
    unit: _Unit,
    word_owners: list[set[int]],
    linked: dict[int, list[int]],
    target_of: Callable[[int], int],
    n_target: int,
) -> list[_Span]:
    """Each inline element's target words, parents first: the words aligned to its source words,
    kept inside its parent's span and off its siblings' (the longest free run of them); an
    element left with none stays, empty, where it touches no sibling."""
    # One pass each, not one per element: a block may hold thousands of inline elements.
    order: dict[int, int | None] = {}
    for _, stack in unit.texts:
        for depth, element_id in enumerate(stack):
            order.setdefault(element_id, stack[depth - 1] if depth else None)
    words_of: dict[int, list[int]] = {}
    for i, owned in enumerate(word_owners):
        for element_id in owned:
            words_of.setdefault(element_id, []).append(i)
    spans: dict[int, _Span] = {}
    taken: dict[int | None, set[int]] = {}  # target words held by a parent's children
    for element_id, parent in order.items():
        words = words_of.get(element_id, [])
        targets = sorted({j for i in words for j in linked.get(i, [])}) or (
            [target_of(words[0])] if words else []
        )
        low, high = 0, n_target - 1
        if parent is not None and parent in spans:
            low, high = spans[parent].start, spans[parent].end
        held = taken.setdefault(parent, set())
        free = (
            [j for j in range(max(low, targets[0]), min(high, targets[-1]) + 1) if j not in held]
            if targets
            else []
        )
        run = _longest_run(free)
        if run:
            start, end = run[0], run[-1]
        else:  # empty: before the first word of the parent's span that no sibling holds, or at its end
            start = next((j for j in range(low, high + 1) if j not in held), high + 1)
            end = start - 1
        held.update(range(start, end + 1))
        spans[element_id] = _Span(unit.elements[element_id], parent, start, end)
    return list(spans.values())


def _longest_run(positions: list[int]) -> list[int]:
    """The longest run of consecutive numbers in sorted `positions`."""
    best: list[int] = []
    run: list[int] = []
    for j in positions:
        run = [*run, j] if run and j == run[-1] + 1 else [j]
        if len(run) > len(best):
            best = run
    return best


def _as_is(unit: _Unit) -> list[Event]:
    """A unit with nothing to translate, as it was."""
    events: list[Event] = []
    stack: list[int] = []
    atoms, at = list(unit.atoms), 0
    for text, owners in unit.texts:
        while atoms and atoms[0][0] <= at:
            events.append(("atom", atoms.pop(0)[1]))
        common = 0
        while common < min(len(stack), len(owners)) and stack[common] == owners[common]:
            common += 1
        events.extend(("close", unit.elements[e]) for e in reversed(stack[common:]))
        events.extend(("open", unit.elements[e]) for e in owners[common:])
        stack = list(owners)
        events.append(("text", text))
        at += len(text)
    events.extend(("atom", atom) for _, atom in atoms)
    events.extend(("close", unit.elements[e]) for e in reversed(stack))
    return events


def _outside(unit: _Unit, start: int, end: int) -> list[Event]:
    """Characters start..end of the unit's text outside its words (whitespace) with the atoms
    among them, in their order; inline elements are the projection's to place."""
    source = unit.text
    events: list[Event] = []
    at = start
    for chars, atom in unit.atoms:
        if start <= chars <= end:
            events.extend([("text", source[at:chars]), ("atom", atom)])
            at = chars
    events.append(("text", source[at:end]))
    return events


def _serialised(events: list[Event], rebuilt: dict[int, list[Event]]) -> str:
    """The events as HTML: each element copied with its attributes, each atom with its content."""
    root = html.Element("div")
    stack = [root]
    pending: list[str] = []  # the text since the tree last changed shape

    def add_text() -> None:
        # Once a run: appending word by word to an lxml text or tail copies the whole run each time.
        text = "".join(pending)
        pending.clear()
        if not text:
            return
        current = stack[-1]
        if len(current):
            current[-1].tail = (current[-1].tail or "") + text
        else:
            current.text = (current.text or "") + text

    def play(sequence: list[Event]) -> None:
        for kind, value in sequence:
            if kind == "text":
                pending.append(str(value))
                continue
            if kind != "unit":
                add_text()
            if kind == "unit":
                play(rebuilt[id(value)])
            elif kind == "open":
                assert isinstance(value, _Element)
                element = same_element(value)
                stack[-1].append(element)
                stack.append(element)
            elif kind == "close":
                stack.pop()
            elif kind == "atom":
                assert isinstance(value, _Element)
                atom = copy.deepcopy(value)
                atom.tail = None
                stack[-1].append(atom)

    play(events)
    add_text()
    # The text before the first element is escaped as lxml escapes the rest: "&lt;b&gt;" must not
    # come out as a <b> element.
    return escape(root.text or "") + "".join(html.tostring(child, encoding="unicode") for child in root)
