"""The HTTP service of `nmt serve`: a FastAPI app over a `Translator` and a `Batcher`, and the
uvicorn server that runs it.

    POST /translate  {"text": [...], "beam"?, "lenpen"?, "nbest"?}  ->  {"translations": [...]}
                     or {"text": [...], "sampling": "topk"|"topp", "topk"?, "topp"?, "temperature"?,
                     "seed"?}: one translation drawn per line, as `nmt translate --sampling`
    GET  /health     200 with the batch counters while the server is up (the model is loaded first)
    GET  /info       model paths, languages, vocabulary sizes, model and decode settings, precision,
                     version

Every request is checked in full here before anything reaches the model; a bad one gets a 4xx
with `{"error": "FIELD: what is wrong"}`, a full queue a 503 with Retry-After. The event loop only
checks, queues and awaits: decoding runs on the batcher's one thread. No endpoint touches files.

fastapi and uvicorn are an optional extra, imported only inside functions so that the rest of the
toolkit runs without them. Imports `batcher`, `config`, `errors`, `search` and (for types)
`translator`.
"""

import asyncio
import contextlib
import copy
import dataclasses
import json
import logging
import math
import signal
import socket
from collections.abc import AsyncIterator, Generator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nmt_cli import __version__
from nmt_cli.config import DecodeConfig, ServeLimits
from nmt_cli.decoding.search import SAMPLING_METHODS, Sampling
from nmt_cli.errors import InputError, NmtError
from nmt_cli.serving.batcher import Batcher, Closed, DecodeKey, QueueFull

if TYPE_CHECKING:
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse
    from uvicorn import Server

    from nmt_cli.decoding.translator import Hypotheses, Translator

EXTRA = "pip install 'nmt-cli[serve]'"
MAX_BEAM = 64  # a bound on the work and memory one request can ask for
RETRY_AFTER_S = 1
SAMPLING_FIELDS = ("topk", "topp", "temperature", "seed")
FIELDS = ("text", "beam", "lenpen", "nbest", "sampling", *SAMPLING_FIELDS)
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


def parse_request(body: bytes, limits: ServeLimits, defaults: DecodeConfig) -> tuple[list[str], DecodeKey]:
    """The lines and decode settings of a POST /translate body; BadRequest for anything else.
    A missing beam is the model's default, raised to nbest (as Translator does)."""
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
    beam = _integer(data, "beam")
    nbest = _integer(data, "nbest") or 1
    sampling = _sampling(data)
    if sampling is not None:
        if nbest > 1:
            raise BadRequest(422, "nbest: sampling draws one translation per line; leave nbest out")
        return lines, DecodeKey(1, defaults.lenpen, 1, sampling)
    lenpen = data.get("lenpen")
    if lenpen is not None and not (_is_number(lenpen) and 0 <= lenpen < math.inf):
        raise BadRequest(422, "lenpen: must be a number, 0 or more")
    if beam is None:
        beam = max(defaults.beam, nbest)
    if nbest > beam:
        raise BadRequest(422, f"nbest: {nbest} is larger than the beam ({beam}); raise the beam")
    lenpen = defaults.lenpen if lenpen is None else float(lenpen)
    return lines, DecodeKey(beam, lenpen, nbest)


def _sampling(data: dict[str, Any]) -> Sampling | None:
    """The sampling settings of a request, checked as `nmt translate --sampling` checks its options."""
    method = data.get("sampling")
    given = [name for name in SAMPLING_FIELDS if data.get(name) is not None]
    if method is None:
        if given:
            raise BadRequest(422, f'{given[0]}: goes with "sampling": "topk" or "topp"')
        return None
    if method not in SAMPLING_METHODS:
        raise BadRequest(422, 'sampling: must be "topk" or "topp"')
    for name in ("beam", "lenpen"):
        if data.get(name) is not None:
            raise BadRequest(422, f"{name}: a setting of the search, which sampling replaces; leave it out")
    other = "topp" if method == "topk" else "topk"
    if other in given:
        raise BadRequest(422, f'{other}: goes with "sampling": "{other}", not "{method}"')
    checks = {
        "topk": (lambda x: _is_int(x) and x >= 0, "an integer, 0 (the whole vocabulary) or more"),
        "topp": (lambda x: _is_number(x) and 0 < x <= 1, "a number above 0 and at most 1"),
        "temperature": (lambda x: _is_number(x) and 0 < x < math.inf, "a finite number above 0"),
        "seed": (_is_int, "an integer"),
    }
    for name in given:
        ok, what = checks[name]
        if not ok(data[name]):
            raise BadRequest(422, f"{name}: must be {what}")
    settings: dict[str, Any] = {name: data[name] for name in given}
    settings.update({name: float(settings[name]) for name in ("topp", "temperature") if name in settings})
    return Sampling(method, **settings)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    """A JSON number that is also a float (an integer past 1e308 is not)."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return False
    try:
        float(value)
    except OverflowError:
        return False
    return True


def _integer(data: dict[str, Any], name: str) -> int | None:
    value = data.get(name)
    if value is not None and not (_is_int(value) and 1 <= value <= MAX_BEAM):
        raise BadRequest(422, f"{name}: must be an integer from 1 to {MAX_BEAM}")
    return value


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
    }


def create_app(translator: "Translator", limits: ServeLimits, model_info: dict[str, Any]) -> "FastAPI":
    """The app; its lifespan starts the decoding thread and, on shutdown, decodes what is left."""
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse
    from starlette.exceptions import HTTPException

    def decode(lines: list[str], key: DecodeKey) -> "list[Hypotheses]":
        batch_tokens = limits.max_batch_tokens
        if key.sampling is not None:  # the search settings do not apply
            return translator.translate_nbest(lines, batch_tokens=batch_tokens, sampling=key.sampling)
        return translator.translate_nbest(
            lines, key.nbest, beam=key.beam, lenpen=key.lenpen, batch_tokens=batch_tokens
        )

    batcher: Batcher[Hypotheses] = Batcher(
        decode,
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
            lines, key = parse_request(
                await _read_body(request, limits.max_body_bytes), limits, translator.decode
            )
            future = batcher.submit(lines, key)
        except BadRequest as err:
            return _error(err.status, err.message)
        except QueueFull as err:
            return _error(503, f"queue: full, {err}; retry later", {"Retry-After": str(RETRY_AFTER_S)})
        except Closed as err:
            return _error(503, f"server: {err}", {"Retry-After": str(RETRY_AFTER_S)})
        try:
            results = await asyncio.wrap_future(future)
        except NmtError as err:  # a setting the model refused
            return _error(422, str(err))
        except Exception as err:
            log.exception("decoding failed")
            return _error(500, f"internal error: {type(err).__name__}: {err}")
        return _translations(results, key.nbest)

    return app


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


def bind_socket(host: str, port: int) -> socket.socket:
    """A socket bound to host:port but not listening yet: a taken port fails before the model is
    loaded, and until the server starts, connections are refused rather than left hanging."""
    if not 0 <= port <= 65535:
        raise InputError(f"--port {port}: must be from 0 to 65535")
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as err:
        raise InputError(f"--host {host}: {err.strerror}") from None
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as err:
        sock.close()
        raise InputError(f"--host {host} --port {port}: cannot listen there ({err.strerror})") from None
    return sock


def run_server(app: "FastAPI", sock: socket.socket, limits: ServeLimits, quiet: bool) -> None:
    """Serve until SIGINT or SIGTERM, then stop accepting, finish every request, and return."""
    import uvicorn

    log_config = copy.deepcopy(uvicorn.config.LOGGING_CONFIG)
    level = "warning" if quiet else "info"
    log_config["loggers"]["nmt_cli"] = {"handlers": ["default"], "level": level.upper(), "propagate": False}
    # A backstop against a flood of connections (each may hold a body in memory): every queued or
    # decoding request has at least one line, so more than twice --max-queue is never needed.
    config = uvicorn.Config(
        app,
        log_config=log_config,
        log_level=level,
        access_log=not quiet,
        lifespan="on",
        limit_concurrency=2 * limits.max_queue + 64,
    )
    server = _graceful_server(config)
    server.run(sockets=[sock])
    if server.force_exit:
        raise NmtError("stopped at once by a second Ctrl-C; requests in flight were dropped", exit_code=130)


def _graceful_server(config: Any) -> "Server":
    import uvicorn

    class GracefulServer(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Generator[None, None, None]:
            # uvicorn re-raises the signal after its graceful shutdown, which would end the process
            # by SIGTERM (or a KeyboardInterrupt) instead of exit status 0 once everything is done.
            previous = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
            try:
                yield
            finally:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)

        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            if self.started and sockets:  # uvicorn names the address only for sockets it binds
                host, port = sockets[0].getsockname()[:2]
                where = f"[{host}]" if ":" in host else host
                log.info(f"nmt serve: listening on http://{where}:{port} (Ctrl-C to stop)")

    return GracefulServer(config)
