"""Events written back as HTML (`decoding.markup`): each element copied with its attributes, each
atom with its content; a whole document with its doctype and the comments around its <html>."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from xml.sax.saxutils import escape

from lxml import etree, html
from lxml.etree import _Element

from nmt_cli.decoding.html_parsing import same_element
from nmt_cli.decoding.markup_units import RAW_TEXT, Atom, Event


@dataclass(frozen=True)
class Page:
    """What a whole document has outside its <html> element: its doctype as written ("" where it
    has none), and the whitespace before and after it."""

    doctype: str
    before: str
    after: str


def serialised(events: list[Event], rebuilt: dict[int, list[Event]], page: Page | None = None) -> str:
    """The events as HTML, a fragment's, or with `page` a whole document's."""
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
                assert isinstance(value, Atom)
                stack[-1].append(_copied(value.element))

    play(events)
    add_text()
    nodes = [html.tostring(child, encoding="unicode") for child in root]
    if page is not None:
        written = page.before + "\n".join([page.doctype] * bool(page.doctype) + nodes) + page.after
    else:
        # The text before the first element is escaped as lxml escapes the rest: "&lt;b&gt;" must
        # not come out as a <b> element.
        written = escape(root.text or "") + "".join(nodes)
    if any(node.tag == "plaintext" for node in root.iter()):
        # Everything after <plaintext> is its text, to the end: it has no end tag, and those that
        # lxml writes after it (its own, its ancestors') would be read as text.
        written = written[: written.rfind("</plaintext>")]
    return written


def _copied(atom: _Element) -> _Element:
    """An atom as it was, without its tail. The raw text of <xmp> and the like is written as it
    was read: lxml escapes it as ordinary text ("<" as "&lt;"), which such an element would show
    as it stands."""
    copied = copy.deepcopy(atom)
    copied.tail = None
    for element in copied.iter(*RAW_TEXT):
        if element.text and "]]>" not in element.text:
            element.text = etree.CDATA(element.text)
    return copied
