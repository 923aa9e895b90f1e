"""The routes of `nmt serve`, as three routers over the shared `Service` (a dependency, never a
closure): nmt's own (POST /translate, the page at /), LibreTranslate's (GET /languages, and its
request shapes, which reach this app at nmt's POST /translate as LibreTranslate's clients send
them there), and the server's status (/health, /info, /metrics).

Each route's checks and key run first, as dependencies (`serving.dependencies`); a request refused
there or here, or left unanswered once checked, is raised as `refusals.Refused` and answered by
`refused` as `{"error": "..."}` with its status; the refusals both shapes share are worded by
`serving.refusals`. The event loop only checks, queues and awaits (`serving.translating`): the
texts are read on the service's text lane, and decoded on the batchers' threads."""

import asyncio
import logging
import math
from collections.abc import Callable, Mapping
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from starlette.exceptions import HTTPException

from nmt_cli.data.text import without_nul
from nmt_cli.decoding.alignment import pharaoh
from nmt_cli.decoding.texts import Result
from nmt_cli.serving import libretranslate, page
from nmt_cli.serving.dependencies import Posted, ServiceDep, keyed_posted, require_key
from nmt_cli.serving.refusals import LIBRETRANSLATE, NMT, Refused
from nmt_cli.serving.requests import (
    Served,
    TextOptions,
    parse_lines,
    parse_settings,
    parse_terms,
    parse_text_options,
    route,
)
from nmt_cli.serving.service import Service
from nmt_cli.serving.translating import parse_html, translate_texts

log = logging.getLogger("nmt_cli.serving")


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
        request, service, pair, lines, terms.settings, options, NMT, constraints=terms.constraints
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
    translation of each text, one string for a string q; nmt's "glossary" and "constraints" as
    on nmt's own route."""
    limits = service.limits
    asked = libretranslate.parse(fields, limits.max_lines, limits.max_input_chars)
    lines = [without_nul(text) for text in asked.texts]
    html = await parse_html(request, service, lines, LIBRETRANSLATE) if asked.html else None
    pair, detected = await choose_pair(service, asked.source, asked.target, html.texts if html else lines)
    # HTML gets no alternatives but an empty list, as LibreTranslate answers: its own web page
    # asks for 3 whatever the format.
    nbest = asked.alternatives + 1 if asked.alternatives and not asked.html else None
    settings = pair.translator.settings(nbest=nbest, batch_tokens=limits.max_batch_tokens)
    terms = parse_terms(fields, len(lines), settings, LIBRETRANSLATE, single=asked.single)
    options = TextOptions(html=asked.html)
    results = await translate_texts(
        request, service, pair, lines, terms.settings, options, LIBRETRANSLATE, html, terms.constraints
    )
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


# Errors


async def refused(request: Request, exc: Exception) -> JSONResponse:
    """A request refused by a route or a dependency: its status, and nmt's (and LibreTranslate's)
    error shape."""
    if not isinstance(exc, Refused):
        raise exc
    return error(exc.status, exc.message, exc.headers)


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
