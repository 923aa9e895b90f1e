"""The HTTP app of `nmt serve`: FastAPI over a `Translator` and a `Batcher`.

    POST /translate  {"text": [...], "beam"?, "lenpen"?, "nbest"?, ...}  ->  {"translations": [...]}
                     or {"text": [...], "sampling": "topk"|"topp", "topk"?, "topp"?, "temperature"?,
                     "seed"?}: one translation drawn per line, as `nmt translate --sampling`
    GET  /health     200 with the batch counters while the server is up (the model is loaded first)
    GET  /info       model paths, languages, vocabulary sizes, model and decode settings, precision,
                     version

Every request is checked in full here before anything reaches the model, its decode settings by
the same rules as `nmt translate`'s options; a bad one gets a 4xx with `{"error": "FIELD: what is
wrong"}`, a full queue a 503 with Retry-After. The event loop only checks, queues and awaits:
decoding runs on the batcher's threads. No endpoint touches files. fastapi is an optional extra,
imported only inside functions so that the rest of the toolkit runs without it.
"""

import asyncio
import contextlib
import dataclasses
import json
import logging
import math
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nmt_cli import __version__
from nmt_cli.config import DecodeOverrides, ServeLimits
from nmt_cli.decoding.settings import SAMPLING_FIELDS, DecodeSettings, Sampling
from nmt_cli.decoding.workers import WorkerDied
from nmt_cli.errors import InputError, SettingError
from nmt_cli.ranges import MAX_BEAM
from nmt_cli.serving.batcher import Batcher, Closed, QueueFull

if TYPE_CHECKING:
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse

    from nmt_cli.decoding.translator import Hypotheses, Translator

EXTRA = "pip install 'nmt-cli[serve]'"
RETRY_AFTER_S = 1
DISCONNECT_CHECK_S = 0.05
SEARCH_FIELDS = tuple(f.name for f in dataclasses.fields(DecodeOverrides))
FIELDS = ("text", *SEARCH_FIELDS, "nbest", "sampling", *SAMPLING_FIELDS)
log = logging.getLogger("nmt_cli.serving")


class BadRequest(Exception):
    """A request refused before it reaches the model: an HTTP status and a message naming the field."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def require_extra() -> None:
    """Fail with one line naming the extra when fastapi or uvicorn is not installed."""
    try:
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        raise InputError(f"nmt serve needs FastAPI and uvicorn, an optional extra: {EXTRA}") from None


def parse_request(
    body: bytes, limits: ServeLimits, translator: "Translator"
) -> tuple[list[str], DecodeSettings]:
    """The lines and decode settings of a POST /translate body; BadRequest for anything else.
    The settings go through the same rules as `nmt translate`'s options (`decoding.settings`)."""
    try:
        data = json.loads(body)
    except json.JSONDecodeError as err:
        raise BadRequest(
            400, f"body: not valid JSON ({err.msg}, line {err.lineno} column {err.colno})"
        ) from None
    except UnicodeDecodeError as err:
        raise BadRequest(400, f"body: not valid UTF-8 (byte {err.start})") from None
    except RecursionError:
        raise BadRequest(400, "body: JSON nested too deeply") from None
    except ValueError:  # an integer of more digits than Python converts
        raise BadRequest(400, "body: a number with too many digits") from None
    if not isinstance(data, dict):
        raise BadRequest(422, 'body: must be a JSON object such as {"text": ["..."]}')
    unknown = sorted(set(data) - set(FIELDS))
    if unknown:
        raise BadRequest(422, f"{unknown[0]}: unknown field; use {', '.join(FIELDS)}")
    text = data.get("text")
    if not isinstance(text, list) or not text or not all(isinstance(line, str) for line in text):
        raise BadRequest(422, "text: must be a non-empty list of strings")
    if len(text) > limits.max_lines:
        raise BadRequest(422, f"text: {len(text)} lines; at most {limits.max_lines} per request")
    for i, line in enumerate(text):
        if len(line) > limits.max_input_chars:
            raise BadRequest(422, f"text[{i}]: {len(line)} characters; at most {limits.max_input_chars}")
        try:
            line.encode("utf-8")
        except UnicodeEncodeError:  # JSON allows "\ud800", which no tokenizer can take
            raise BadRequest(422, f"text[{i}]: not valid Unicode (a lone surrogate)") from None
    lines = [line.replace("\x00", " ") for line in text]  # NUL becomes a space, as in `nmt translate`
    try:
        search = DecodeOverrides(**{name: data.get(name) for name in SEARCH_FIELDS})
        sampling = Sampling.given(data.get("sampling"), *(data.get(name) for name in SAMPLING_FIELDS))
        settings = translator.settings(search, data.get("nbest"), limits.max_batch_tokens, sampling)
    except SettingError as err:
        raise BadRequest(422, err.as_field()) from None
    return lines, settings


def describe_model(translator: "Translator", models: Sequence[Path]) -> dict[str, Any]:
    """What GET /info tells about the model (fixed while the server runs)."""
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


def create_app(translator: "Translator", limits: ServeLimits, model_info: dict[str, Any]) -> "FastAPI":
    """The app; its lifespan starts the decoding thread and, on shutdown, decodes what is left."""
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse
    from starlette.exceptions import HTTPException

    batcher: Batcher[Hypotheses] = Batcher(
        translator.translate_with,
        lambda line: len(translator.src_spm.encode(line)) + 1,  # + EOS
        limits.max_batch_tokens,
        limits.max_wait_ms / 1000,
        limits.max_queue,
        on_batch=_log_batch,
        decoders=translator.workers,  # one batch a worker: batches of a few lines are not split
    )

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        batcher.start()
        yield
        # uvicorn has finished every open request by now; this decodes anything still queued.
        await asyncio.to_thread(batcher.close)
        stats = batcher.stats
        log.info(
            f"served {stats.requests} requests in {stats.batches} batches ({stats.merged_batches} merged)"
        )

    def health() -> dict[str, Any]:
        counters = dataclasses.asdict(batcher.stats)
        return {
            "status": "ok",
            "queued_lines": batcher.waiting_lines,
            "truncated": translator.truncated,
            **counters,
        }

    app = FastAPI(
        title="nmt", version=__version__, lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None
    )

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:  # 404, 405: JSON too
        return _error(exc.status_code, f"{request.url.path}: {exc.detail}", exc.headers)

    @app.get("/health")
    async def get_health() -> dict[str, Any]:
        return health()

    @app.get("/info")
    async def get_info() -> dict[str, Any]:
        return {
            **model_info,
            "limits": {**dataclasses.asdict(limits), "max_beam": MAX_BEAM},
            "stats": health(),
        }

    @app.post("/translate")
    async def post_translate(request: Request) -> JSONResponse:
        try:
            lines, settings = parse_request(
                await _read_body(request, limits.max_body_bytes), limits, translator
            )
            future = batcher.submit(lines, settings)
        except BadRequest as err:
            return _error(err.status, err.message)
        except QueueFull as err:
            return _error(503, f"queue: full, {err}; retry later", {"Retry-After": str(RETRY_AFTER_S)})
        except Closed as err:
            return _error(503, f"server: {err}", {"Retry-After": str(RETRY_AFTER_S)})
        try:
            results = await _unless_gone(request, asyncio.wrap_future(future))
        except asyncio.CancelledError:  # the client went away: its lines are not decoded
            future.cancel()
            return _error(499, "client: went away before the answer")
        except WorkerDied as err:  # the next request gets fresh workers
            return _error(503, f"server: {err}; retry", {"Retry-After": str(RETRY_AFTER_S)})
        except Exception as err:
            log.exception("decoding failed")
            return _error(500, f"internal error: {type(err).__name__}: {err}")
        return _translations(results, settings.nbest)

    return app


async def _unless_gone(request: "Request", answer: "asyncio.Future[Any]") -> Any:
    """The answer, unless the client disconnects first (then CancelledError): a request still
    queued is then dropped before it is decoded; one being decoded finishes for nobody."""
    while True:
        done, _ = await asyncio.wait({answer}, timeout=DISCONNECT_CHECK_S)
        if done:
            return answer.result()
        if await request.is_disconnected():
            raise asyncio.CancelledError


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


def _log_batch(requests: int, lines: int, tokens: int, seconds: float) -> None:
    # Merged batches are the ones worth seeing; single ones only at debug level.
    level = logging.INFO if requests > 1 else logging.DEBUG
    log.log(level, f"batch of {requests} requests, {lines} lines, {tokens} tokens: {seconds * 1000:.0f} ms")
