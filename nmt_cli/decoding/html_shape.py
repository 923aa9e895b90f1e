"""HTML as it is written, before a parser repairs it: whether a text opens as a whole document, and
whether a line's tags balance, so that a line that is only part of a page (`<ul>` alone, or
`</p>` closing a paragraph begun on the line before) is told from a fragment. lxml answers with
the repaired tree, where every element is closed; the standard library's tokenizer reports the
tags as written, which is what these questions are about. No lxml needed."""

from __future__ import annotations

from html.parser import HTMLParser

from nmt_cli.data.text import has_letters_or_digits
from nmt_cli.errors import InputError

DOCUMENT_TAGS = frozenset({"html", "head", "body"})
VOID = frozenset("area base br col embed hr img input keygen link meta param source track wbr".split())
OPTIONAL_END = frozenset(
    "li dt dd p rt rp optgroup option colgroup caption thead tbody tfoot tr td th plaintext".split()
)
"""Elements whose end tag HTML lets a writer leave out (<plaintext> has none at all)."""
RAW = ("script", "style", "xmp", "iframe", "noembed", "noframes", "textarea", "title", "plaintext")
"""Elements whose content holds no tags, read as text up to their end tag."""


class MarkupError(InputError):
    """HTML that cannot be read whole or written back; `index`: which of the texts given together,
    `line`: the line of that text where the parser found it, where known."""

    def __init__(self, message: str, index: int = 0, line: int | None = None) -> None:
        super().__init__(message)
        self.index, self.line = index, line


class _Stop(Exception):
    pass


class _Tags(HTMLParser):
    def __init__(self, first_only: bool = False) -> None:
        super().__init__(convert_charrefs=True)
        self.first_only = first_only
        self.doctype: str | None = None
        self.first_tag: str | None = None
        self.open: list[str] = []
        self.problem: str | None = None
        self.words: list[str] = []
        self.raw: str | None = None

    def handle_decl(self, decl: str) -> None:
        if self.first_only and self.doctype is None and decl.lower().startswith("doctype"):
            self.doctype = f"<!{decl}>"
            return
        self._first("!doctype")

    def handle_starttag(self, tag: str, attrs: object) -> None:
        self._first(tag)
        if tag in DOCUMENT_TAGS:
            self.problem = self.problem or f"<{tag}> belongs to a whole document"
        elif tag in RAW:
            self.raw = tag
            self.set_cdata_mode(tag)  # the tokenizer itself does so for <script> and <style> only
        if tag not in VOID:
            self.open.append(tag)

    def handle_startendtag(self, tag: str, attrs: object) -> None:
        self._first(tag)

    def handle_endtag(self, tag: str) -> None:
        self.raw = None
        if tag in VOID:
            return
        if tag not in self.open:
            self.problem = self.problem or f"</{tag}> closes an element not opened on the line"
            return
        # The latest element of its name, alone: misnested inline tags (<b><i></b></i>) still
        # balance on the line, and the parser repairs them.
        del self.open[len(self.open) - 1 - self.open[::-1].index(tag)]

    def handle_data(self, data: str) -> None:
        if data.strip():
            self._first("")
            if self.raw not in ("script", "style"):
                self.words.append(data)

    def _first(self, tag: str) -> None:
        if self.first_only:
            self.first_tag = tag
            raise _Stop


def document_opening(text: str) -> tuple[bool, str]:
    """Whether `text` opens as a whole document (after whitespace and comments, a doctype or an
    <html> tag), and its doctype as written ("" where it has none)."""
    reader = _Tags(first_only=True)
    try:
        reader.feed(text.lstrip("\ufeff"))
        reader.close()
    except _Stop:
        pass
    return reader.doctype is not None or reader.first_tag == "html", reader.doctype or ""


def unbalanced(line: str) -> str | None:
    """What makes a line only part of a page rather than a fragment that stands alone: an end
    tag with no start on the line, an element left open whose end tag HTML requires, or a tag
    of a whole document (<html>, <head>, <body>); None for a fragment that stands alone."""
    reader = _read(line)
    if reader.problem is not None:
        return reader.problem
    unclosed = [tag for tag in reader.open if tag not in OPTIONAL_END]
    return f"<{unclosed[0]}> is not closed on the line" if unclosed else None


def has_words(text: str) -> bool:
    """Whether HTML has text with a letter or a digit outside its tags, comments and scripts."""
    reader = _read(text)
    return any(has_letters_or_digits(words) for words in reader.words)


def words_lost(source: str, translation: str) -> bool:
    """Whether HTML had words outside its tags and its translation has none (a line of tags
    alone, `</ul>`, has none to lose)."""
    return not has_words(translation) and has_words(source)


def _read(text: str) -> _Tags:
    reader = _Tags()
    reader.feed(text)
    # What the tokenizer holds back at the end: an unfinished tag, which a browser drops (as lxml
    # does), the content of a raw-text element left open, or text.
    rest = reader.rawdata
    if rest.strip() and not rest.startswith("<") and reader.raw is None:
        reader.words.append(rest)
    return reader
