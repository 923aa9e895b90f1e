"""HTML translated with its markup: each block's text as whole sentences, inline elements moved onto
the target words that their source words align to, and what must not change kept as it is.

A text is a fragment, parsed by lxml's HTML parser as the body of a page (which repairs unclosed
tags, stray `<` and bad nesting as browsers do, and drops a tag left unfinished at the end), or a
whole document, parsed as a page with its doctype, <html>, <head> and <body> kept: one that opens
with a doctype or an <html> tag, or any text where the caller asks for documents. Either is read
as a flat run of events (`decoding.markup_units`). A block (`<p>`, `<li>`, `<td>`, a heading,
`<title>` ...) or a `<br>` ends a unit; the text of a unit is translated in one piece, so that an
inline tag never cuts a sentence. Inline elements (`<strong>`, `<em>`, `<a>`, `<span>` ...) then
wrap the target words aligned to the source words they wrapped (`decoding.markup_projection`);
kept whole ("atoms", copied with their attributes and content): mentions, hashtags and links
whose text is a URL (as Mastodon marks them), elements marked translate="no" or "notranslate",
`<code>`, `<pre>`, `<script>`, `<style>`, `<xmp>` and the like, void elements such as `<img>`,
comments, and any inline element with no text of its own outside such atoms (Mastodon's
`<span class="h-card">`). Attributes are never translated.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from lxml import html  # noqa: F401  (first: without lxml, importing this module fails here)

from nmt_cli.decoding.alignment import Alignment
from nmt_cli.decoding.html_parsing import MarkupError
from nmt_cli.decoding.html_shape import document_opening
from nmt_cli.decoding.markup_projection import as_is, projected
from nmt_cli.decoding.markup_units import Event, Unit, events_of, readable
from nmt_cli.decoding.markup_writing import Page, serialised

__all__ = ["MarkupError", "Parsed", "translate_fragments"]

Translate = Callable[[list[str]], list[tuple[str, Alignment]]]
"""Texts in, (translation, word alignment) out."""


def translate_fragments(fragments: list[str], translate: Translate, documents: bool = False) -> list[str]:
    """Each HTML text translated, its markup kept (each a whole document with `documents`, else
    those that open as one); raises MarkupError for one lxml cannot read whole or write back."""
    parsed = Parsed.of(fragments, documents)
    return parsed.rebuild(translate(parsed.texts))


@dataclass
class Parsed:
    """HTML texts read for translation: `texts` to translate (the units with words, stripped), and
    `rebuild` to put their translations back into the markup. A server translates the texts with
    its own queue between the two. Every check that can refuse a text is made here, before
    anything is translated."""

    events: list[list[Event]]
    units: list[Unit]
    pages: list[Page | None]
    """For each text, what a whole document has outside its <html>; None for a fragment."""

    @classmethod
    def of(cls, fragments: list[str], documents: bool = False) -> Parsed:
        pages = [_page(text, documents) for text in fragments]
        events = []
        for index, (text, page) in enumerate(zip(fragments, pages, strict=True)):
            try:
                events.append(events_of(text, page is not None))
            except MarkupError as err:
                err.index = index
                raise
        units = [
            unit
            for sequence in events
            for kind, unit in sequence
            if kind == "unit" and isinstance(unit, Unit)
        ]
        return cls(events, units, pages)

    @property
    def texts(self) -> list[str]:
        return [unit.text.strip() for unit in self.units if unit.text.strip()]

    def rebuild(self, translations: list[tuple[str, Alignment]]) -> list[str]:
        """The texts with `translations` (one for each of `texts`, in order) in place."""
        translated = iter(translations)
        rebuilt: dict[int, list[Event]] = {}
        for unit in self.units:
            if unit.text.strip():
                target, alignment = next(translated)
                rebuilt[id(unit)] = projected(unit, target, alignment)
            else:
                rebuilt[id(unit)] = as_is(unit)
        return [
            serialised(sequence, rebuilt, page)
            for sequence, page in zip(self.events, self.pages, strict=True)
        ]


def _page(text: str, documents: bool) -> Page | None:
    """How a text is read: None, as a fragment; a `Page`, as a whole document."""
    opens, doctype = document_opening(text)
    if not (documents or opens) or not readable(text).strip():
        return None
    stripped = text.strip()
    return Page(
        doctype, text[: len(text) - len(text.lstrip())], text[len(text.rstrip()) :] if stripped else ""
    )
