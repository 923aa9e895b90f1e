"""A request's texts from the route to the queue and back, for both shapes of POST /translate:
the text pipeline's plan (`decoding.text_plan`: HTML fragments parsed, texts cut into sentences,
phrases encoded), the units decoded on the pair's queue, then the plan's answers (the sentences
joined and the HTML rebuilt). Everything but the awaiting runs
on the service's text lane (`serving.text_lane`) or the batchers' threads, never on the event
loop. A refusal is worded by the route that asked (`serving.refusals`); what cannot be answered
is `Refused`."""

import asyncio
import dataclasses
import functools
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from starlette.requests import Request

from nmt_cli.decoding import text_plan
from nmt_cli.decoding.markup import MarkupError
from nmt_cli.decoding.settings import DecodeSettings
from nmt_cli.decoding.terms import Constrained, ConstraintError
from nmt_cli.decoding.text_plan import Html, TextPlan
from nmt_cli.decoding.texts import Result
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
    Refused,
    Wording,
)
from nmt_cli.serving.requests import Served, TextOptions
from nmt_cli.serving.service import Service

log = logging.getLogger("nmt_cli.serving")
T = TypeVar("T")


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
        return text_plan.parse_html(fragments)
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
    html: Html | None = None,
    constraints: list[list[str]] | None = None,
) -> list[Result]:
    """Texts through `pair`'s queue, planned and answered by the text pipeline
    (`decoding.text_plan`): sentence by sentence unless `options.split` is off (or the texts have
    `constraints` of their own), each text's sentences joined back; HTML fragments
    (`options.html`) parsed first and rebuilt around their translations, which then need the
    words' alignment. The phrases to enforce are checked before decoding, so that a bad one is
    the request's refusal, and the queue batches requests whatever their glossaries."""
    if options.html and constraints is not None:
        raise wording.refuse(CONSTRAINTS_WITH_HTML)
    if options.html and html is None:
        html = await parse_html(request, service, texts, wording)
    units = html.texts if html is not None else texts
    aligned = options.alignments or html is not None
    settings = dataclasses.replace(settings, alignments=aligned and pair.translator.aligns)
    planned = functools.partial(_plan, pair, units, settings, options.split, constraints, html, wording)
    plan = await in_lane(request, service, len(units), 0, planned)
    results = await decode(request, pair, plan.units, plan.settings, wording)
    if not plan.rebuilds:
        return results
    tags = tags_in(texts) if html is not None else 0
    return await in_lane(request, service, len(texts), tags, functools.partial(plan.answers, results))


def _plan(
    pair: Served,
    units: list[str],
    settings: DecodeSettings,
    split: bool,
    constraints: list[list[str]] | None,
    html: Html | None,
    wording: Wording,
) -> TextPlan:
    """The pair's plan of the units (`Engine.plan`), a phrase it cannot meet refused."""
    try:
        return pair.translator.plan(units, settings, split, constraints, html)
    except ConstraintError as err:
        if constraints is not None and err.source == "constraints":
            raise wording.refuse(CONSTRAINT, index=err.line, problem=err.problem) from None
        raise wording.refuse(TERMS, problem=f"glossary: {err}") from None
    except SettingError as err:
        raise wording.refuse(TERMS, problem=err.as_field()) from None


async def in_lane(request: Request, service: Service, texts: int, tags: int, work: Callable[[], T]) -> T:
    """`work`'s result from the text lane, awaited; `Refused` when the lane is full or the
    client went away (then work not yet begun is dropped)."""
    try:
        future = service.text_lane.submit(texts, tags, work)
    except QueueFull as err:
        raise Refused(503, f"queue: full, {err}; retry later", retry=True) from None
    try:
        result: T = await _unless_gone(request, asyncio.wrap_future(future))
        return result
    except asyncio.CancelledError:
        future.cancel()
        raise Refused(499, "client: went away before the answer") from None


async def decode(
    request: Request,
    pair: Served,
    lines: list[str | Constrained],
    settings: DecodeSettings,
    wording: Wording,
) -> list[Result]:
    """The lines' hypotheses from `pair`'s queue, awaited (not decoded) on the event loop;
    `Refused` when they cannot be had."""
    try:
        future = pair.batcher.submit(lines, settings)
    except QueueFull as err:
        raise Refused(503, f"queue: full, {err}; retry later", retry=True) from None
    except TooLarge as err:  # its texts split into more sentences (or HTML blocks) than --max-queue
        raise wording.refuse(TOO_MANY_UNITS, problem=err) from None
    except Closed as err:
        raise Refused(503, f"server: {err}", retry=True) from None
    try:
        results: list[Result] = await _unless_gone(request, asyncio.wrap_future(future))
        return results
    except asyncio.CancelledError:  # the client went away: its lines are not decoded
        future.cancel()
        raise Refused(499, "client: went away before the answer") from None
    except WorkerDied as err:  # the next request gets fresh workers
        raise Refused(503, f"server: {err}; retry", retry=True) from None
    except Exception as err:
        log.exception("decoding failed")
        raise Refused(500, f"internal error: {type(err).__name__}: {err}") from None


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
