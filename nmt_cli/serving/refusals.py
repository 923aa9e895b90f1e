"""The refusals that the two shapes of POST /translate share once their own fields are read: one
table, worded per route. nmt's own route names its fields as nmt's request has them (`text[i]`)
with 422 for a bad field; LibreTranslate's names them as its clients send them (`q[i]`), with
400 and "Invalid request: " before the message, as LibreTranslate answers. Each template may use
`{texts}`, the name of the texts' field, and the values the refusal is given."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

RETRY_AFTER_S = 1
"""The Retry-After of every 503 the server sends (a full queue, a closing server, a dead worker)."""


class Refused(Exception):
    """A request the server does not answer with a translation, on any route: an HTTP status and a
    message naming the field or the cause, answered as {"error": message}. Refused before it
    reaches the model (a bad field: 4xx), or unanswered once checked (the queue full or closing, a
    worker dead: 503, with Retry-After when `retry`; the client gone: 499; decoding failed: 500)."""

    def __init__(self, status: int, message: str, retry: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = {"Retry-After": str(RETRY_AFTER_S)} if retry else None


@dataclass(frozen=True)
class Refusal:
    nmt_status: int
    libretranslate_status: int
    template: str


MARKUP = Refusal(422, 400, "{texts}[{index}]: {problem}")
"""An HTML fragment that cannot be read whole."""
MARKUP_COST = Refusal(
    413, 413, "{texts}: {tags:,} HTML tags (each < counts); at most {most:,} a request: send fewer texts"
)
"""More HTML than one request may make the server parse."""
TOO_MANY_UNITS = Refusal(413, 413, "{texts}: {problem}; send fewer or shorter texts per request")
"""More sentences (or HTML blocks) than the whole decoding queue holds."""
CONSTRAINTS_SHAPE = Refusal(422, 400, "constraints: {shape}")
CONSTRAINTS_WITH_HTML = Refusal(422, 400, "constraints: for format text (a glossary applies to html too)")
CONSTRAINT = Refusal(422, 400, "constraints[{index}]: {problem}")
"""A text's own phrase that cannot be met."""
TERMS = Refusal(422, 400, "{problem}")
"""A glossary, or a setting of the phrases, refused: the message names its field."""

REFUSALS = (MARKUP, MARKUP_COST, TOO_MANY_UNITS, CONSTRAINTS_SHAPE, CONSTRAINTS_WITH_HTML, CONSTRAINT, TERMS)


@dataclass(frozen=True)
class Wording:
    """How one route words the refusals of `REFUSALS`."""

    texts: str
    """The field of the request's texts."""
    libretranslate: bool

    def refuse(self, refusal: Refusal, **values: Any) -> Refused:
        message = refusal.template.format(texts=self.texts, **values)
        if self.libretranslate:
            return Refused(refusal.libretranslate_status, f"Invalid request: {message}")
        return Refused(refusal.nmt_status, message)


NMT = Wording("text", libretranslate=False)
LIBRETRANSLATE = Wording("q", libretranslate=True)
