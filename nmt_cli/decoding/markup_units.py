"""HTML read for translation (`decoding.markup`): the tree lxml parses, walked into a flat run of
events in which the text and inline markup between two block boundaries are gathered into one
unit, translated in one piece."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from lxml.etree import _Element

from nmt_cli.decoding.html_parsing import NOT_XML, WrittenBack, parsed_body, parsed_document

BLOCKS = frozenset(
    "address article aside blockquote body caption dd details dialog div dl dt fieldset figcaption figure "
    "footer form h1 h2 h3 h4 h5 h6 head header hgroup hr html legend li main menu nav ol optgroup option p "
    "pre section summary table tbody td tfoot th thead title tr ul".split()
)
RAW_TEXT = frozenset("xmp plaintext noembed noframes".split())
"""Elements whose content HTML reads as raw text, as <script>'s: kept, and written back raw."""
KEPT = (
    frozenset("code pre script style kbd samp var math svg textarea template noscript iframe object".split())
    | RAW_TEXT
)
"""Elements whose content is not text to translate."""
VOID = frozenset(("img", "input", "hr", "wbr", "video", "audio", "canvas"))
URL = re.compile(r"^\s*(https?://|www\.)\S+\s*$")


@dataclass(frozen=True)
class Atom:
    """An element kept whole (`is_atom`), where it stands in its unit."""

    chars: int  # the characters of the unit's text before it
    element: _Element
    owners: tuple[int, ...] = ()  # the inline elements it is inside, outermost first
    texts: int = 0  # the unit's texts before it


@dataclass
class Unit:
    """The run of text and inline markup between two block boundaries."""

    texts: list[tuple[str, tuple[int, ...]]] = field(default_factory=list)  # (text, open inline ids)
    atoms: list[Atom] = field(default_factory=list)
    elements: dict[int, _Element] = field(default_factory=dict)  # the inline elements, by id

    @property
    def text(self) -> str:
        return "".join(t for t, _ in self.texts)


Event = tuple[str, object]
"""("open", element) / ("close", element) / ("text", str) / ("atom", Atom) / ("unit", Unit)."""


def is_atom(element: _Element) -> bool:
    return kept_whole(element) or not own_text(element).strip()


def kept_whole(element: _Element) -> bool:
    """An atom whatever text it holds: a comment, code, a mention, an element not to translate..."""
    tag = element.tag if isinstance(element.tag, str) else ""
    if not tag or tag in KEPT or element.get("translate") == "no":
        return True
    classes = (element.get("class") or "").split()
    if "notranslate" in classes or tag in VOID:
        return True
    marked = "mention" in classes or "hashtag" in classes
    return tag == "a" and (marked or bool(URL.match(element.text_content())))


def _holds_block(element: _Element) -> bool:
    return any(d.tag in BLOCKS or d.tag == "br" for d in element.iterdescendants() if isinstance(d.tag, str))


def own_text(element: _Element) -> str:
    """The element's text outside atoms among its descendants, each read once (not once an ancestor)."""
    parts = [element.text or ""]
    for child in element:
        if not kept_whole(child):
            parts.append(own_text(child))
        parts.append(child.tail or "")
    return "".join(parts)


def readable(text: str) -> str:
    """Lone surrogates as "?" (as `Translator` reads lines: lxml would drop the text after one),
    and the characters an lxml tree cannot hold as spaces."""
    return text.encode("utf-8", "replace").decode("utf-8").translate(NOT_XML)


def events_of(text: str, document: bool = False) -> list[Event]:
    """The text as events, with each unit's text and inline markup gathered into one "unit": a
    fragment read as the content of a page's body, a `document` as a whole page, its <html>
    element and the comments around it included."""
    text = readable(text)
    if not text.strip():
        return [("text", text)]
    if not document:
        body = parsed_body(text)
        return _Walk(WrittenBack()).events(body) if body is not None else [("text", text)]
    page = parsed_document(text)
    walk = _Walk(WrittenBack())
    walk.names.check(page)
    around = [("atom", Atom(0, node)) for node in page.itersiblings(preceding=True)][::-1]
    after = [("atom", Atom(0, node)) for node in page.itersiblings()]
    return [*around, ("open", page), *walk.events(page), ("close", page), *after]


class _Walk:
    """One walk over a parsed tree, gathering its events; each element that will be rebuilt is
    checked to be one that can be written back, before anything is translated."""

    def __init__(self, names: WrittenBack) -> None:
        self.names = names
        self.unit = Unit()
        self.list: list[Event] = [("unit", self.unit)]
        self.inline: list[int] = []

    def events(self, root: _Element) -> list[Event]:
        self.walk(root)
        return self.list

    def boundary(self) -> None:
        self.unit = Unit()
        self.list.append(("unit", self.unit))

    def walk(self, element: _Element) -> None:
        if element.text:
            self.unit.texts.append((element.text, tuple(self.inline)))
        for child in element:
            tag = child.tag if isinstance(child.tag, str) else ""
            if tag in BLOCKS and is_atom(child):  # a block kept whole (translate="no"...): alone
                self.boundary()
                self.unit.atoms.append(Atom(0, child))
                self.boundary()
            elif tag in BLOCKS or tag == "br" or (not is_atom(child) and _holds_block(child)):
                # An inline element around a block (lxml keeps <em><p>..</p></em>) is a block too.
                self.names.check(child)
                self.list.append(("open", child))
                if tag != "br":
                    self.boundary()
                    self.walk(child)
                self.list.append(("close", child))
                self.boundary()
            elif is_atom(child):
                chars = len(self.unit.text)
                self.unit.atoms.append(Atom(chars, child, tuple(self.inline), len(self.unit.texts)))
            else:
                self.names.check(child)
                # An element with no text still has a place.
                self.unit.texts.append(("", (*self.inline, id(child))))
                self.inline.append(id(child))
                self.unit.elements[id(child)] = child
                self.walk(child)
                self.inline.pop()
            if child.tail:
                self.unit.texts.append((child.tail, tuple(self.inline)))
