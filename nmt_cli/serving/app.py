"""The HTTP app of `nmt serve`: FastAPI over one `Translator` and one `Batcher` per language pair.

    POST /translate  {"text": [...], "source"?, "target"?, "beam"?, "lenpen"?, "nbest"?, ...}
                     ->  {"translations": [...]}; source and target pick the language pair (needed
                     when several are served), or {"text": [...], "sampling": "topk"|"topp",
                     "topk"?, "topp"?, "temperature"?, "seed"?}: one translation drawn per line, as
                     `nmt translate --sampling`
                     or LibreTranslate's {"q", "source", "target", ...} (`serving.libretranslate`)
    GET  /languages  LibreTranslate's list of languages and their targets
    GET  /health     200 with the batch counters while the server is up (the models are loaded first)
    GET  /info       model paths, languages, vocabulary sizes, model and decode settings, precision,
                     version; "pairs" describes every language pair served
    GET  /metrics    Prometheus' text format (`serving.metrics`)

Every request is checked in full (`serving.requests`) before anything reaches a model, its
decode settings by the same rules as `nmt translate`'s options; a bad one gets a 4xx with
`{"error": "FIELD: what is wrong"}`, a full queue a 503 with Retry-After. With API keys,
/translate, /info and /metrics need one (`api_key`, or `Authorization: Bearer KEY`): 403 without.
The event loop only checks, queues and awaits: decoding runs on the batchers' threads. No endpoint
touches files. fastapi is an optional extra, imported only inside functions so that the rest of
the toolkit runs without it.
"""

import asyncio
import contextlib
import dataclasses
import logging
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, MutableMapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nmt_cli import __version__
from nmt_cli.decoding.settings import DecodeSettings
from nmt_cli.decoding.workers import WorkerDied
from nmt_cli.errors import InputError
from nmt_cli.ranges import MAX_BEAM
from nmt_cli.serving import libretranslate
from nmt_cli.serving.batcher import Batcher, Closed, QueueFull
from nmt_cli.serving.keys import ApiKeys
from nmt_cli.serving.limits import ServeLimits
from nmt_cli.serving.metrics import Metrics
from nmt_cli.serving.requests import BadRequest, Served, json_object, parse_lines, parse_settings, route

if TYPE_CHECKING:
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse, Response

    from nmt_cli.decoding.translator import Hypotheses, Translator

EXTRA = "pip install 'nmt-cli[serve]'"
RETRY_AFTER_S = 1
WORKER_CHECK_S = 1.0  # how often the decoding processes of each pair are checked
ROUTES = ("/", "/translate", "/languages", "/health", "/info", "/metrics")
log = logging.getLogger("nmt_cli.serving")


def require_extra() -> None:
    """Fail with one line naming the extra when a package of it (fastapi, uvicorn...) is missing."""
    try:
        import fastapi  # noqa: F401
        import prometheus_client  # noqa: F401
        import python_multipart  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as err:
        raise InputError(f"nmt serve needs {err.name}, part of an optional extra: {EXTRA}") from None


def describe_model(translator: "Translator", models: Sequence[Path]) -> dict[str, Any]:
    """What GET /info tells about a language pair's model (fixed while the server runs)."""
    return {
        "version": __version__,
        "models": [str(path) for path in models],
        "device": str(translator.device),
        "precision": translator.precision,
        "languages": list(translator.languages) if translator.languages else None,
        "src_vocab_size": translator.src_spm.get_piece_size(),
        "tgt_vocab_size": translator.tgt_spm.get_piece_size(),
        "model": [dataclasses.asdict(model.cfg) for model in translator.ensemble.models],
        "decode": dataclasses.asdict(translator.decode),
        "shortlist": None
        if translator.shortlist is None
        else dict(zip(("candidates", "frequent"), translator.shortlist.sizes, strict=True)),
    }


def create_app(
    models: Sequence[tuple["Translator", list[Path]]], limits: ServeLimits, keys: ApiKeys | None = None
) -> "FastAPI":
    """The app over one (translator, checkpoint paths) per language pair; its lifespan starts the
    decoding threads and, on shutdown, decodes what is left."""
    from fastapi import FastAPI, Request
    from fastapi.responses import HTMLResponse, JSONResponse, Response
    from starlette.exceptions import HTTPException

    metrics = Metrics()
    served = [_served(translator, paths, limits, metrics) for translator, paths in models]
    described = [{**describe_model(s.translator, s.paths), "pair": s.name} for s in served]

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        for s in served:
            s.batcher.start()
        watch = asyncio.create_task(_keep_workers(served))
        yield
        watch.cancel()
        # uvicorn has finished every open request by now; this decodes anything still queued.
        for s in served:
            await asyncio.to_thread(s.batcher.close)
            stats = s.batcher.stats
            log.info(
                f"{s.name}: served {stats.requests} requests in {stats.batches} batches "
                f"({stats.merged_batches} merged)"
            )

    def health() -> dict[str, Any]:
        counters = [dataclasses.asdict(s.batcher.stats) for s in served]
        summed = {name: sum(c[name] for c in counters) for name in counters[0]}
        summed["most_requests_in_a_batch"] = max(c["most_requests_in_a_batch"] for c in counters)
        return {
            "status": "ok",
            "queued_lines": sum(s.batcher.waiting_lines for s in served),
            "truncated": sum(s.translator.truncated for s in served),
            **summed,
        }

    app = FastAPI(
        title="nmt", version=__version__, lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None
    )
    app.add_middleware(CountRequests, metrics=metrics)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:  # 404, 405: JSON too
        return _error(exc.status_code, f"{request.url.path}: {exc.detail}", exc.headers)

    def key_refusal(request: Request, given: Any = None, message: str = "") -> "JSONResponse | None":
        """403 when keys are required and the request has no valid one (field or Bearer)."""
        if keys is None:
            return None
        key = given if isinstance(given, str) and given else None
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if key is None and scheme.lower() == "bearer":
            key = token.strip()
        if key is None:
            key = request.query_params.get("api_key")
        if keys.allows(key):
            return None
        return _error(
            403, message or "api_key: missing or not valid; send api_key or Authorization: Bearer KEY"
        )

    @app.get("/health")
    async def get_health() -> dict[str, Any]:
        return health()

    @app.get("/info")
    async def get_info(request: Request) -> "Response":
        refused = key_refusal(request)
        if refused is not None:
            return refused
        return JSONResponse(
            {
                **described[0],
                "models": [str(path) for s in served for path in s.paths],
                "pairs": described,
                "limits": {**dataclasses.asdict(limits), "max_beam": MAX_BEAM},
                "stats": health(),
            }
        )

    @app.get("/languages")
    async def get_languages() -> JSONResponse:
        return JSONResponse(libretranslate.languages([s.pair for s in served if s.pair is not None]))

    @app.get("/metrics")
    async def get_metrics(request: Request) -> "Response":
        refused = key_refusal(request)
        if refused is not None:
            return refused
        content, media_type = metrics.text()
        return Response(content, media_type=media_type)

    @app.get("/")
    async def get_page() -> HTMLResponse:
        from nmt_cli.serving import page

        return HTMLResponse(page.html())

    @app.post("/translate")
    async def post_translate(request: Request) -> JSONResponse:
        try:
            body = await _read_body(request, limits.max_body_bytes)
            content_type = request.headers.get("content-type", "")
            query = libretranslate.query_fields(request.query_params.multi_items())
            kind = content_type.split(";")[0].strip().lower()
            if kind == "multipart/form-data":  # LibreTranslate takes its fields as multipart too
                fields = await libretranslate.multipart_fields(request.scope, body)
                return await libre(request, {**query, **fields})
            form = kind == "application/x-www-form-urlencoded"
            # `curl -d '{...}'` labels a JSON body as a form: a body that is a JSON object is JSON.
            form = form and not body.lstrip().startswith(b"{")
            if form or (query and not body.strip()):  # LibreTranslate's other request shapes
                return await libre(request, libretranslate.fields(body, content_type, query))
            data = json_object(body)
            if libretranslate.is_libretranslate(data):
                return await libre(request, {**query, **data})
            # The key first: a client without one learns nothing of what else is wrong.
            refused = key_refusal(request, data.get("api_key"))
            if refused is not None:
                return refused
            lines = parse_lines(data, limits)
            pair, _ = route(served, data.get("source"), data.get("target"))
            settings = parse_settings(data, limits, pair.translator)
        except (BadRequest, libretranslate.Refused) as err:
            return _error(err.status, err.message)
        results = await decode(request, pair, lines, settings)
        if isinstance(results, JSONResponse):
            return results
        return _translations(results, settings.nbest)

    async def libre(request: Request, data: Mapping[str, Any]) -> JSONResponse:
        refused = key_refusal(request, data.get("api_key"), "Invalid API key")  # before the fields
        if refused is not None:
            return refused
        asked = libretranslate.parse(data, limits.max_lines, limits.max_input_chars)
        pair, detected = route(served, asked.source, asked.target, status=400)
        settings = pair.translator.settings(batch_tokens=limits.max_batch_tokens)
        lines = [text.replace("\x00", " ") for text in asked.texts]
        results = await decode(request, pair, lines, settings)
        if isinstance(results, JSONResponse):
            return results
        return JSONResponse(libretranslate.answer(asked, [hyps[0][0] for hyps in results], detected))

    async def decode(
        request: Request, pair: Served, lines: list[str], settings: DecodeSettings
    ) -> "list[Hypotheses] | JSONResponse":
        try:
            future = pair.batcher.submit(lines, settings)
        except QueueFull as err:
            return _error(503, f"queue: full, {err}; retry later", {"Retry-After": str(RETRY_AFTER_S)})
        except Closed as err:
            return _error(503, f"server: {err}", {"Retry-After": str(RETRY_AFTER_S)})
        try:
            results: list[Hypotheses] = await _unless_gone(request, asyncio.wrap_future(future))
            return results
        except asyncio.CancelledError:  # the client went away: its lines are not decoded
            future.cancel()
            return _error(499, "client: went away before the answer")
        except WorkerDied as err:  # the next request gets fresh workers
            return _error(503, f"server: {err}; retry", {"Retry-After": str(RETRY_AFTER_S)})
        except Exception as err:
            log.exception("decoding failed")
            return _error(500, f"internal error: {type(err).__name__}: {err}")

    return app


def _served(translator: "Translator", paths: list[Path], limits: ServeLimits, metrics: Metrics) -> Served:
    name = "-".join(translator.languages) if translator.languages else "model"

    def on_batch(requests: int, lines: int, tokens: int, seconds: float) -> None:
        metrics.batch(name, lines, tokens)
        _log_batch(name, requests, lines, tokens, seconds)

    batcher: Batcher[Hypotheses] = Batcher(
        translator.translate_with,
        lambda line: len(translator.src_spm.encode(line)) + 1,  # + EOS
        limits.max_batch_tokens,
        limits.max_wait_ms / 1000,
        limits.max_queue,
        on_batch=on_batch,
        decoders=translator.workers,  # one batch a worker: batches of a few lines are not split
    )
    metrics.watch(name, lambda: batcher.waiting_lines, translator.workers_alive)
    return Served(translator, paths, batcher)


class CountRequests:
    """ASGI middleware that counts every HTTP answer by route and status, with its latency. Plain
    ASGI (not Starlette's BaseHTTPMiddleware), so that a handler still sees its client disconnect."""

    def __init__(self, app: Callable[..., Awaitable[None]], metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(
        self,
        scope: MutableMapping[str, Any],
        receive: Callable[[], Awaitable[Any]],
        send: Callable[[Any], Awaitable[None]],
    ) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start, status = time.perf_counter(), 500

        async def send_counted(message: MutableMapping[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_counted)
        finally:
            path = scope.get("path", "")
            self.metrics.answered(path if path in ROUTES else "other", status, time.perf_counter() - start)


async def _keep_workers(served: "list[Served]") -> None:
    """Replace a pair's dead decoding processes within WORKER_CHECK_S, also while no request
    comes (the next request would otherwise find none, and /metrics shows 0 until then)."""
    while True:
        await asyncio.sleep(WORKER_CHECK_S)
        for s in served:
            if s.translator.workers_alive() < s.translator.workers:
                try:
                    if await asyncio.to_thread(s.translator.heal_workers):
                        log.warning(f"{s.name}: a decoding worker died; the workers were started afresh")
                except Exception as err:  # noqa: BLE001 - the watch goes on; the next request retries
                    log.warning(f"{s.name}: decoding workers could not be restarted ({err})")


async def _unless_gone(request: "Request", answer: "asyncio.Future[Any]") -> Any:
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


async def _disconnect(request: "Request") -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _read_body(request: "Request", limit: int) -> bytes:
    """The body, refused with 413 past `limit` bytes without reading the rest (bounded memory)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise BadRequest(413, f"body: {declared} bytes; at most {limit}")
    from starlette.requests import ClientDisconnect

    chunks, size = [], 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise BadRequest(413, f"body: more than {limit} bytes")
            chunks.append(chunk)
    except ClientDisconnect:  # gone before its body arrived: nothing to queue, no one to answer
        raise BadRequest(400, "body: the client went away before sending it") from None
    return b"".join(chunks)


def _translations(results: "list[Hypotheses]", nbest: int) -> "JSONResponse":
    from fastapi.responses import JSONResponse

    if nbest == 1:
        return JSONResponse({"translations": [hyps[0][0] for hyps in results]})
    # JSON has no infinities: a score that is not finite is sent as null.
    nested = [
        [{"text": text, "score": score if math.isfinite(score) else None} for text, score in hyps]
        for hyps in results
    ]
    return JSONResponse({"translations": nested})


def _error(status: int, message: str, headers: Mapping[str, str] | None = None) -> "JSONResponse":
    from fastapi.responses import JSONResponse

    return JSONResponse({"error": message}, status_code=status, headers=headers)


def _log_batch(pair: str, requests: int, lines: int, tokens: int, seconds: float) -> None:
    # Merged batches are the ones worth seeing; single ones only at debug level.
    level = logging.INFO if requests > 1 else logging.DEBUG
    log.log(
        level,
        f"{pair}: batch of {requests} requests, {lines} lines, {tokens} tokens: {seconds * 1000:.0f} ms",
    )
