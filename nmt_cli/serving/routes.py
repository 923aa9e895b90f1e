"""The routes of `nmt serve`, as three routers over the shared `Service` (a dependency, never a
closure): nmt's own (POST /translate, the page at /), LibreTranslate's (GET /languages, and its
request shapes, which reach this app at nmt's POST /translate as LibreTranslate's clients send
them there), and the server's status (/health, /info, /metrics).

Each route's checks and key run first, as dependencies (`serving.dependencies`); a request refused
there or here is raised (`BadRequest`, `libretranslate.Refused`, `Unanswered`) and answered by
`refused` as `{"error": "..."}` with its status. The event loop only checks, queues and awaits:
decoding runs on the batchers' threads."""

import asyncio
import logging
import math
from collections.abc import Mapping
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from starlette.exceptions import HTTPException

from nmt_cli.decoding.settings import DecodeSettings
from nmt_cli.decoding.texts import Hypotheses
from nmt_cli.decoding.workers import WorkerDied
from nmt_cli.serving import libretranslate, page
from nmt_cli.serving.batcher import Closed, QueueFull
from nmt_cli.serving.dependencies import Posted, ServiceDep, keyed_posted, require_key
from nmt_cli.serving.requests import BadRequest, Served, parse_lines, parse_settings, route
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
    router = APIRouter()
    router.add_api_route("/translate", post_translate, methods=["POST"])
    router.add_api_route("/", get_page, methods=["GET"])
    return router


def libretranslate_routes() -> APIRouter:
    router = APIRouter()
    router.add_api_route("/languages", get_languages, methods=["GET"])
    return router


def status_routes() -> APIRouter:
    router = APIRouter()
    router.add_api_route("/health", get_health, methods=["GET"])
    keyed = [Depends(require_key)]
    router.add_api_route("/info", get_info, methods=["GET"], dependencies=keyed)
    router.add_api_route("/metrics", get_metrics, methods=["GET"], dependencies=keyed)
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
    results = await decode(request, pair, lines, settings)
    return translations(results, settings.nbest)


async def get_page() -> HTMLResponse:
    return HTMLResponse(page.html())


def translations(results: list[Hypotheses], nbest: int) -> JSONResponse:
    if nbest == 1:
        return JSONResponse({"translations": [hyps[0][0] for hyps in results]})
    # JSON has no infinities: a score that is not finite is sent as null.
    nested = [
        [{"text": text, "score": score if math.isfinite(score) else None} for text, score in hyps]
        for hyps in results
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
    pair, detected = route(service.served, asked.source, asked.target, status=400)
    settings = pair.translator.settings(batch_tokens=limits.max_batch_tokens)
    lines = [text.replace("\x00", " ") for text in asked.texts]
    results = await decode(request, pair, lines, settings)
    return JSONResponse(libretranslate.answer(asked, [hyps[0][0] for hyps in results], detected))


# The server's status


async def get_health(service: ServiceDep) -> dict[str, Any]:
    return service.health()


async def get_info(service: ServiceDep) -> JSONResponse:
    return JSONResponse(service.info())


async def get_metrics(service: ServiceDep) -> Response:
    content, media_type = service.metrics.text()
    return Response(content, media_type=media_type)


# Decoding and errors


async def decode(
    request: Request, pair: Served, lines: list[str], settings: DecodeSettings
) -> list[Hypotheses]:
    """The lines' hypotheses from `pair`'s queue, awaited (not decoded) on the event loop;
    `Unanswered` when they cannot be had."""
    try:
        future = pair.batcher.submit(lines, settings)
    except QueueFull as err:
        raise Unanswered(503, f"queue: full, {err}; retry later", retry=True) from None
    except Closed as err:
        raise Unanswered(503, f"server: {err}", retry=True) from None
    try:
        results: list[Hypotheses] = await _unless_gone(request, asyncio.wrap_future(future))
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


def error(status: int, message: str, headers: Mapping[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers)
