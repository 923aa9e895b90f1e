"""A request's texts from the route to the queue and back, for both shapes of POST /translate:
HTML fragments parsed, texts cut into sentences, phrases encoded, the sentences decoded on the
pair's queue, then the sentences joined and the HTML rebuilt. Everything but the awaiting runs
on the service's text lane (`serving.text_lane`) or the batchers' threads, never on the event
loop. A refusal is worded by the route that asked (`serving.refusals`); what cannot be answered
is `Unanswered`."""

import asyncio
import dataclasses
import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from starlette.requests import Request

from nmt_cli.decoding.markup import MarkupError, Parsed
from nmt_cli.decoding.settings import DecodeSettings
from nmt_cli.decoding.terms import Constrained, ConstraintError
from nmt_cli.decoding.texts import Result, Split, join_results, sentences_of, split_texts
from nmt_cli.decoding.workers import WorkerDied
from nmt_cli.errors import SettingError
from nmt_cli.serving.batcher import Closed, QueueFull, TooLarge
from nmt_cli.serving.refusals import (
    CONSTRAINT,
    CONSTRAINTS_WITH_HTML,
    MARKUP,
    MARKUP_COST,
    TERMS,
    TOO_MANY_UNITS,
    Wording,
)
from nmt_cli.serving.requests import Served, TextOptions
from nmt_cli.serving.service import Service

RETRY_AFTER_S = 1
log = logging.getLogger("nmt_cli.serving")
T = TypeVar("T")


class Unanswered(Exception):
    """A checked request that got no translation: the queue was full or closing, a worker died,
    the client went away, or decoding failed."""

    def __init__(self, status: int, message: str, retry: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = {"Retry-After": str(RETRY_AFTER_S)} if retry else None


@dataclass(frozen=True)
class Html:
    """HTML fragments as parsed on the text lane, with the texts to translate read from them
    there too (one a block: a page of many blocks takes a while)."""

    parsed: Parsed
    texts: list[str]


def tags_in(texts: list[str]) -> int:
    """What the HTML cost bound counts: every `<`, a bound on the tags a parser can find."""
    return sum(text.count("<") for text in texts)


async def parse_html(request: Request, service: Service, texts: list[str], wording: Wording) -> Html:
    """The HTML fragments parsed on the text lane; refused past the cost bound, before any work."""
    tags = tags_in(texts)
    if tags > service.limits.max_html_tags:
        raise wording.refuse(MARKUP_COST, tags=tags, most=service.limits.max_html_tags)
    return await in_lane(request, service, len(texts), tags, functools.partial(_parsed, texts, wording))


def _parsed(fragments: list[str], wording: Wording) -> Html:
    try:
        parsed = Parsed.of(fragments)
        return Html(parsed, parsed.texts)
    except MarkupError as err:  # names the text it refuses
        raise wording.refuse(MARKUP, index=err.index, problem=err) from None


async def translate_texts(
    request: Request,
    service: Service,
    pair: Served,
    texts: list[str],
    settings: DecodeSettings,
    options: TextOptions,
    wording: Wording,
    parsed: Html | None = None,
    constraints: list[list[str]] | None = None,
) -> list[Result]:
    """Texts through `pair`'s queue: sentence by sentence unless `options.split` is off (or the
    texts have `constraints` of their own), each text's sentences joined back; HTML fragments
    (`options.html`) parsed first and rebuilt around their translations, which then need the
    words' alignment. The phrases to enforce are checked before decoding, so that a bad one is
    the request's refusal, and the queue batches requests whatever their glossaries."""
    if options.html and constraints is not None:
        raise wording.refuse(CONSTRAINTS_WITH_HTML)
    if options.html and parsed is None:
        parsed = await parse_html(request, service, texts, wording)
    units = parsed.texts if parsed is not None else texts
    aligned = options.alignments or parsed is not None
    settings = dataclasses.replace(settings, alignments=aligned and pair.translator.aligns)
    split = (options.split or parsed is not None) and constraints is None
    cut = functools.partial(_sentences, pair, units, settings, split, constraints, wording)
    splits, sentences, settings = await in_lane(request, service, len(units), 0, cut)
    results = await decode(request, pair, sentences, settings, wording)
    if splits is None and parsed is None:
        return results
    tags = tags_in(texts) if parsed is not None else 0
    finish = functools.partial(_finished, splits, results, settings, parsed)
    return await in_lane(request, service, len(texts), tags, finish)


def _sentences(
    pair: Served,
    units: list[str],
    settings: DecodeSettings,
    split: bool,
    constraints: list[list[str]] | None,
    wording: Wording,
) -> tuple[list[Split] | None, list[str | Constrained], DecodeSettings]:
    """The sentences to decode (the units cut when `split`), with their phrases encoded."""
    language = pair.pair[0] if pair.pair else "en"
    splits = split_texts(units, language) if split else None
    sentences: list[str | Constrained] = list(sentences_of(splits) if splits else units)
    if constraints is None and settings.glossary is None:
        return splits, sentences, settings
    try:
        constrained = pair.translator.constrained(sentences, settings, constraints)
    except ConstraintError as err:
        if constraints is not None and err.source == "constraints":
            raise wording.refuse(CONSTRAINT, index=err.line, problem=err.problem) from None
        raise wording.refuse(TERMS, problem=f"glossary: {err}") from None
    except SettingError as err:
        raise wording.refuse(TERMS, problem=err.as_field()) from None
    return splits, constrained, dataclasses.replace(settings, glossary=None)


def _finished(
    splits: list[Split] | None, results: list[Result], settings: DecodeSettings, parsed: Html | None
) -> list[Result]:
    """The sentences' results joined into their texts', and the HTML rebuilt around them."""
    if splits is not None:
        results = join_results(splits, results, settings)
    if parsed is None:
        return results
    rebuilt = parsed.parsed.rebuild([(r.hyps[0][0], r.alignment or ()) for r in results])
    return [Result([(text, 0.0)]) for text in rebuilt]


async def in_lane(request: Request, service: Service, texts: int, tags: int, work: Callable[[], T]) -> T:
    """`work`'s result from the text lane, awaited; `Unanswered` when the lane is full or the
    client went away (then work not yet begun is dropped)."""
    try:
        future = service.text_lane.submit(texts, tags, work)
    except QueueFull as err:
        raise Unanswered(503, f"queue: full, {err}; retry later", retry=True) from None
    try:
        result: T = await _unless_gone(request, asyncio.wrap_future(future))
        return result
    except asyncio.CancelledError:
        future.cancel()
        raise Unanswered(499, "client: went away before the answer") from None


async def decode(
    request: Request,
    pair: Served,
    lines: list[str | Constrained],
    settings: DecodeSettings,
    wording: Wording,
) -> list[Result]:
    """The lines' hypotheses from `pair`'s queue, awaited (not decoded) on the event loop;
    `Unanswered` when they cannot be had."""
    try:
        future = pair.batcher.submit(lines, settings)
    except QueueFull as err:
        raise Unanswered(503, f"queue: full, {err}; retry later", retry=True) from None
    except TooLarge as err:  # its texts split into more sentences (or HTML blocks) than --max-queue
        raise wording.refuse(TOO_MANY_UNITS, problem=err) from None
    except Closed as err:
        raise Unanswered(503, f"server: {err}", retry=True) from None
    try:
        results: list[Result] = await _unless_gone(request, asyncio.wrap_future(future))
        return results
    except asyncio.CancelledError:  # the client went away: its lines are not decoded
        future.cancel()
        raise Unanswered(499, "client: went away before the answer") from None
    except WorkerDied as err:  # the next request gets fresh workers
        raise Unanswered(503, f"server: {err}; retry", retry=True) from None
    except Exception as err:
        log.exception("decoding failed")
        raise Unanswered(500, f"internal error: {type(err).__name__}: {err}") from None


async def _unless_gone(request: Request, answer: "asyncio.Future[Any]") -> Any:
    """The answer, unless the client disconnects first (then CancelledError): a request still
    queued is then dropped before it is decoded; one being decoded finishes for nobody. The body
    has been read, so the next ASGI message is the disconnect: awaited, not polled, so that many
    waiting requests cost the event loop nothing."""
    gone = asyncio.ensure_future(_disconnect(request))
    try:
        done, _ = await asyncio.wait({answer, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
    if answer in done:
        return answer.result()
    raise asyncio.CancelledError


async def _disconnect(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass
