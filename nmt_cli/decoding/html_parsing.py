"""HTML fragments parsed as lxml parses the body of a page (whole documents as a page), and
MarkupError for those it cannot read whole or write back. lxml's parser stops at its resource
limits (elements nested 256 deep, a text or an attribute of 10 MB) and returns the tree it has
so far: the rest of the text would be lost without a word, so such a text is refused instead."""

from __future__ import annotations

import re

from lxml import html
from lxml.etree import ParserError, _Element

from nmt_cli.decoding.html_shape import MarkupError

NOT_XML = dict.fromkeys([*range(0x09), 0x0B, 0x0C, *range(0x0E, 0x20), 0xFFFE, 0xFFFF], " ")
"""Characters an HTML parser lets through but an lxml tree cannot hold: read as spaces, as HTML
reads a form feed."""


HUGE = re.compile(r",?\s*(?:use|try) XML_PARSE_HUGE")
"""libxml2's advice in its messages (worded by version), which names an option of its own."""
MAX_DEPTH = 254
"""Elements a fragment may nest: libxml2 stops at 256, and the page's <html> and <body> count."""


def parsed_body(fragment: str) -> _Element | None:
    """The fragment parsed as the body of a page, as a browser parses it: a tag left unfinished at
    the end is dropped. (lxml's fragment_fromstring closes the page after the fragment, and such a
    tag took "</body></html>" in as its name and attributes: "<p" became <p< body>.)"""
    return parsed_document("<html><body>" + fragment).find("body")


def parsed_document(text: str) -> _Element:
    """A whole document parsed: its <html> element, with <head> and <body> as the parser makes
    them (those the text leaves out added)."""
    parser = html.HTMLParser()  # one a call: its error log holds this text's errors alone
    try:
        page = html.document_fromstring(text, parser=parser)
    except (ParserError, ValueError) as err:
        raise MarkupError(f"not HTML that can be parsed ({err})") from None
    fatal = [error for error in parser.error_log if error.level_name == "FATAL"]
    if fatal:
        reason = HUGE.split(fatal[0].message)[0].strip()  # libxml2's own option: not the user's
        raise MarkupError(
            f"HTML that the parser stops reading part way ({reason}), losing the rest; nest "
            f"elements at most {MAX_DEPTH} deep, keep each text and attribute under 10 MB",
            line=fatal[0].line,
        )
    return page


def same_element(element: _Element) -> _Element:
    """A new element with the tag and attributes of a parsed one. The parser takes names that
    lxml will not write (a browser reads "<b<>" as an element "b<"): such HTML is refused."""
    try:
        return html.Element(element.tag, dict(element.attrib))
    except ValueError as err:
        raise MarkupError(
            f"HTML with a name that cannot be written back ({err}); write a '<' that is text as &lt;",
            line=element.sourceline,
        ) from None


class WrittenBack:
    """Checks, as the HTML is read and before anything is translated, that each element to be
    rebuilt can be written back (`same_element`); each tag and set of attribute names once."""

    def __init__(self) -> None:
        self.checked: set[tuple[str, tuple[str, ...]]] = set()

    def check(self, element: _Element) -> None:
        names = (str(element.tag), tuple(element.attrib))
        if names not in self.checked:
            same_element(element)
            self.checked.add(names)
