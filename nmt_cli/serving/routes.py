"""The routes of `nmt serve`, as three routers over the shared `Service` (a dependency, never a
closure): nmt's own (POST /translate, the page at /), LibreTranslate's (GET /languages, and its
request shapes, which reach this app at nmt's POST /translate as LibreTranslate's clients send
them there), and the server's status (/health, /info, /metrics).

Each route's checks and key run first, as dependencies (`serving.dependencies`); a request refused
there or here is raised (`BadRequest`, `libretranslate.Refused`, `Unanswered`) and answered by
`refused` as `{"error": "..."}` with its status. The event loop only checks, queues and awaits:
decoding runs on the batchers' threads."""

import asyncio
import dataclasses
import logging
import math
from collections.abc import Callable, Mapping
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from starlette.exceptions import HTTPException

from nmt_cli.data.text import without_nul
from nmt_cli.decoding.alignment import pharaoh
from nmt_cli.decoding.markup import MarkupError, Parsed
from nmt_cli.decoding.settings import DecodeSettings
from nmt_cli.decoding.terms import Constrained, ConstraintError
from nmt_cli.decoding.texts import Result, join_results, sentences_of, split_texts
from nmt_cli.decoding.workers import WorkerDied
from nmt_cli.errors import SettingError
from nmt_cli.serving import libretranslate, page
from nmt_cli.serving.batcher import Closed, QueueFull, TooLarge
from nmt_cli.serving.dependencies import Posted, ServiceDep, keyed_posted, require_key
from nmt_cli.serving.requests import (
    BadRequest,
    Served,
    TextOptions,
    parse_lines,
    parse_settings,
    parse_terms,
    parse_text_options,
    route,
    with_glossary,
)
from nmt_cli.serving.service import Service

RETRY_AFTER_S = 1
log = logging.getLogger("nmt_cli.serving")


class Unanswered(Exception):
    """A checked request that got no translation: the queue was full or closing, a worker died,
    the client went away, or decoding failed."""

    def __init__(self, status: int, message: str, retry: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = {"Retry-After": str(RETRY_AFTER_S)} if retry else None


def nmt_routes() -> APIRouter:
    return _router(("POST", "/translate", post_translate), ("GET", "/", get_page))


def libretranslate_routes() -> APIRouter:
    return _router(
        ("GET", "/languages", get_languages),
        ("POST", "/detect", post_detect),
        ("GET", "/frontend/settings", get_frontend_settings),
    )


def status_routes() -> APIRouter:
    return _router(
        ("GET", "/health", get_health),
        ("GET", "/info", get_info),
        ("GET", "/metrics", get_metrics),
        keyed=("/info", "/metrics"),
    )


def _router(*routes: tuple[str, str, Callable[..., Any]], keyed: tuple[str, ...] = ()) -> APIRouter:
    """A router of (method, path, endpoint) routes; those at a path in `keyed` need an API key."""
    router = APIRouter()
    for method, path, endpoint in routes:
        needs_key = [Depends(require_key)] if path in keyed else None
        methods = [method, "HEAD"] if method == "GET" else [method]  # HEAD wherever GET (RFC 9110)
        router.add_api_route(path, endpoint, methods=methods, dependencies=needs_key)
    return router


# nmt's own routes


async def post_translate(
    request: Request, service: ServiceDep, posted: Annotated[Posted, Depends(keyed_posted)]
) -> JSONResponse:
    if posted.libretranslate:
        return await translate_libretranslate(request, service, posted.fields)
    data = posted.fields
    lines = parse_lines(data, service.limits)
    pair, _ = route(service.served, data.get("source"), data.get("target"))
    settings = parse_settings(data, service.limits, pair.translator)
    options = parse_text_options(data, settings.nbest)
    terms = parse_terms(data, len(lines), settings)
    results = await translate_texts(
        request, pair, lines, terms.settings, options, constraints=terms.constraints
    )
    return translations(results, settings.nbest)


async def get_page() -> HTMLResponse:
    return HTMLResponse(page.html())


def translations(results: list[Result], nbest: int) -> JSONResponse:
    if nbest == 1:
        answer: dict[str, Any] = {"translations": [r.hyps[0][0] for r in results]}
        if results and results[0].alignment is not None:  # Pharaoh's "i-j" pairs, as nmt translate prints
            answer["alignments"] = [pharaoh(r.alignment or ()) for r in results]
        return JSONResponse(answer)
    # JSON has no infinities: a score that is not finite is sent as null.
    nested = [
        [{"text": text, "score": score if math.isfinite(score) else None} for text, score in r.hyps]
        for r in results
    ]
    return JSONResponse({"translations": nested})


# LibreTranslate's routes


async def get_languages(service: ServiceDep) -> JSONResponse:
    return JSONResponse(libretranslate.languages(service.pairs()))


async def translate_libretranslate(
    request: Request, service: Service, fields: Mapping[str, Any]
) -> JSONResponse:
    """POST /translate in LibreTranslate's shape: its own checks and errors (400), the first
    translation of each text, one string for a string q."""
    limits = service.limits
    asked = libretranslate.parse(fields, limits.max_lines, limits.max_input_chars)
    lines = [without_nul(text) for text in asked.texts]
    parsed = parse_fragments(lines) if asked.html else None
    pair, detected = await choose_pair(service, asked.source, asked.target, parsed.texts if parsed else lines)
    # HTML gets no alternatives but an empty list, as LibreTranslate answers: its own web page
    # asks for 3 whatever the format.
    nbest = asked.alternatives + 1 if asked.alternatives and not asked.html else None
    settings = pair.translator.settings(nbest=nbest, batch_tokens=limits.max_batch_tokens)
    try:  # nmt's extension: a glossary, as nmt's own route takes it
        settings = with_glossary(fields, settings)
    except BadRequest as err:
        raise BadRequest(400, f"Invalid request: {err.message}") from None
    try:
        results = await translate_texts(request, pair, lines, settings, TextOptions(html=asked.html), parsed)
    except BadRequest as err:  # a glossary term that cannot be met: LibreTranslate's 400
        raise BadRequest(400, f"Invalid request: {err.message}") from None
    return JSONResponse(libretranslate.answer(asked, [r.hyps for r in results], detected))


async def post_detect(service: ServiceDep, posted: Annotated[Posted, Depends(keyed_posted)]) -> JSONResponse:
    """LibreTranslate's POST /detect: the served source languages, likeliest first, for the text
    (for a list of texts, for all of them together)."""
    texts = libretranslate.detect_texts(
        posted.fields, service.limits.max_lines, service.limits.max_input_chars
    )
    ranked = await asyncio.to_thread(service.detector.rank, " ".join(texts))
    return JSONResponse([{"confidence": confidence, "language": code} for code, confidence in ranked])


async def get_frontend_settings(service: ServiceDep) -> JSONResponse:
    return JSONResponse(
        libretranslate.frontend_settings(
            service.pairs(), service.limits.max_input_chars, service.keys is not None
        )
    )


async def choose_pair(
    service: Service, source: str, target: str, texts: list[str]
) -> tuple[Served, dict[str, Any] | None]:
    """The pair for `source` into `target`; for "auto" with several sources served into `target`,
    the one whose language the texts are in (with the identifier's confidence)."""
    if source == "auto":
        sources = {s.pair[0] for s in service.served if s.pair is not None and s.pair[1] == target}
        if len(sources) > 1:
            ranked = await asyncio.to_thread(service.detector.rank, " ".join(texts))
            code, confidence = next((c, p) for c, p in ranked if c in sources)
            pair, _ = route(service.served, code, target, status=400)
            return pair, {"language": code, "confidence": confidence}
    pair, chosen = route(service.served, source, target, status=400)
    return pair, None if chosen is None else {"language": chosen, "confidence": 100.0}


# The server's status


async def get_health(service: ServiceDep) -> dict[str, Any]:
    return service.health()


async def get_info(service: ServiceDep) -> JSONResponse:
    return JSONResponse(service.info())


async def get_metrics(service: ServiceDep) -> Response:
    content, media_type = service.metrics.text()
    return Response(content, media_type=media_type)


# Texts, markup and decoding


def parse_fragments(fragments: list[str]) -> Parsed:
    try:
        return Parsed.of(fragments)
    except MarkupError as err:
        raise BadRequest(400, f"Invalid request: q: {err}") from None


async def translate_texts(
    request: Request,
    pair: Served,
    texts: list[str],
    settings: DecodeSettings,
    options: TextOptions,
    parsed: Parsed | None = None,
    constraints: list[list[str]] | None = None,
) -> list[Result]:
    """Texts through `pair`'s queue: sentence by sentence unless `options.split` is off (or the
    texts have `constraints` of their own), each text's sentences joined back; HTML fragments
    (`options.html`) parsed first and rebuilt around their translations, which then need the
    words' alignment. The phrases to enforce are checked here, so that a bad one is the
    request's 422, and the queue batches requests whatever their glossaries."""
    if options.html and constraints is not None:
        raise BadRequest(422, "constraints: for format text (a glossary applies to html too)")
    if options.html and parsed is None:
        parsed = parse_fragments(texts)
    units = parsed.texts if parsed is not None else texts
    aligned = options.alignments or parsed is not None
    settings = dataclasses.replace(settings, alignments=aligned and pair.translator.aligns)
    language = pair.pair[0] if pair.pair else "en"
    split = (options.split or parsed is not None) and constraints is None
    splits = split_texts(units, language) if split else None
    sentences: list[str | Constrained] = list(sentences_of(splits) if splits else units)
    if constraints is not None or settings.glossary is not None:
        # Off the event loop: a large request's phrases take a while to encode.
        sentences, settings = await asyncio.to_thread(_with_phrases, pair, sentences, settings, constraints)
    results = await decode(request, pair, sentences, settings)
    if splits is not None:
        results = join_results(splits, results, settings)
    if parsed is None:
        return results
    rebuilt = parsed.rebuild([(r.hyps[0][0], r.alignment or ()) for r in results])
    return [Result([(text, 0.0)]) for text in rebuilt]


def _with_phrases(
    pair: Served,
    units: list[str | Constrained],
    settings: DecodeSettings,
    constraints: list[list[str]] | None,
) -> tuple[list[str | Constrained], DecodeSettings]:
    try:
        constrained = pair.translator.constrained(units, settings, constraints)
    except ConstraintError as err:
        own = constraints is not None and err.source == "constraints"
        raise BadRequest(
            422, f"constraints[{err.line}]: {err.problem}" if own else f"glossary: {err}"
        ) from None
    except SettingError as err:
        raise BadRequest(422, err.as_field()) from None
    return constrained, dataclasses.replace(settings, glossary=None)


# Decoding and errors


async def decode(
    request: Request, pair: Served, lines: list[str | Constrained], settings: DecodeSettings
) -> list[Result]:
    """The lines' hypotheses from `pair`'s queue, awaited (not decoded) on the event loop;
    `Unanswered` when they cannot be had."""
    try:
        future = pair.batcher.submit(lines, settings)
    except QueueFull as err:
        raise Unanswered(503, f"queue: full, {err}; retry later", retry=True) from None
    except TooLarge as err:  # its texts split into more sentences (or HTML blocks) than --max-queue
        raise Unanswered(413, f"text: {err}; send fewer or shorter texts per request") from None
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


async def refused(request: Request, exc: Exception) -> JSONResponse:
    """A request refused by a route or a dependency: its status, and nmt's (and LibreTranslate's)
    error shape."""
    if not isinstance(exc, BadRequest | libretranslate.Refused | Unanswered):
        raise exc
    return error(exc.status, exc.message, exc.headers if isinstance(exc, Unanswered) else None)


async def http_error(request: Request, exc: Exception) -> JSONResponse:
    """Starlette's own refusals (404, 405) in the same shape, naming the path."""
    if not isinstance(exc, HTTPException):
        raise exc
    return error(exc.status_code, f"{request.url.path}: {exc.detail}", exc.headers)


async def failed(request: Request, exc: Exception) -> JSONResponse:
    """A fault of the server's own: 500 in the same shape; the traceback goes to the log. Answered
    outside the CORS middleware, so its header is added here: a page must be able to read it."""
    message = f"{request.url.path}: the server failed ({type(exc).__name__}); its log has the details"
    return error(500, message, {"Access-Control-Allow-Origin": "*"})


def error(status: int, message: str, headers: Mapping[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers)
