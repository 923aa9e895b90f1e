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
    GET  /openapi.json  the OpenAPI document of these routes (`serving.openapi`); no docs page

Every request is checked in full (`serving.requests`) before anything reaches a model, its
decode settings by the same rules as `nmt translate`'s options; a bad one gets a 4xx with
`{"error": "FIELD: what is wrong"}`, a full queue a 503 with Retry-After. With API keys,
/translate, /info and /metrics need one (`api_key`, or `Authorization: Bearer KEY`): 403 without,
before any field is checked. The event loop only checks, queues and awaits: texts are read and
rebuilt on the service's text lane, and decoded on the batchers' threads. No endpoint touches
files.

This module assembles the app: the routes are `serving.routes` (three routers), what runs before
them `serving.dependencies`, and the state they share a `serving.service.Service` held in
`app.state`. fastapi is an optional extra: those modules import it, and this one imports them
only inside `create_app`, so that the rest of the toolkit runs without it.
"""

import asyncio
import contextlib
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nmt_cli import __version__
from nmt_cli.errors import optional_import_failure
from nmt_cli.serving.keys import ApiKeys
from nmt_cli.serving.limits import ServeLimits
from nmt_cli.serving.metrics import Metrics
from nmt_cli.serving.refusals import Refused
from nmt_cli.serving.service import Service

if TYPE_CHECKING:
    from fastapi import FastAPI

    from nmt_cli.decoding.translator import Translator

EXTRA = "pip install 'nmt-cli[serve]'"
# ASGI's types, as starlette.types spells them (not imported: fastapi is an optional extra).
Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Any]]
Send = Callable[[Any], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
OPENAPI = "/openapi.json"
NO_PAGES: dict[str, Any] = {"docs_url": None, "redoc_url": None}
"""FastAPI's documentation pages, left out: Swagger UI and ReDoc load their scripts from elsewhere."""
ROUTES = (
    "/", "/translate", "/languages", "/detect", "/frontend/settings", "/health", "/info", "/metrics", OPENAPI,
)  # fmt: skip
CROSS_ORIGIN = ("/translate", "/languages", "/detect", "/frontend/settings")
"""The routes a page of any origin may call, as LibreTranslate lets browser clients call them;
/info (model paths) and /metrics stay same-origin."""


SERVE_MODULES = ("fastapi", "lxml", "prometheus_client", "py3langid", "python_multipart", "uvicorn")


def require_extra() -> None:
    """Fail with one line naming the extra when a package of it (fastapi, uvicorn...) is missing,
    or the package and its ImportError when one is installed but does not import."""
    try:
        import fastapi  # noqa: F401
        import lxml  # noqa: F401
        import prometheus_client  # noqa: F401
        import py3langid  # noqa: F401
        import python_multipart  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as err:
        # The one that failed: the first not imported (a failed import leaves no module behind, or
        # None where an import of it is blocked).
        module = next((name for name in SERVE_MODULES if sys.modules.get(name) is None), str(err.name))
        missing = f"nmt serve needs {module}, part of an optional extra: {EXTRA}"
        raise optional_import_failure(err, missing, module) from None


def create_app(
    models: Sequence[tuple["Translator", list[Path]]], limits: ServeLimits, keys: ApiKeys | None = None
) -> "FastAPI":
    """The app over one (translator, checkpoint paths) per language pair; its lifespan starts the
    decoding threads and, on shutdown, decodes what is left."""
    from fastapi import FastAPI
    from starlette.exceptions import HTTPException

    from nmt_cli.serving import openapi, routes

    service = Service.over(models, limits, keys)
    # FastAPI serves the document at OPENAPI (`serving.openapi`), open like /health.
    app = FastAPI(title="nmt", version=__version__, lifespan=_lifespan, openapi_url=OPENAPI, **NO_PAGES)
    app.state.service = service  # what the routes share, handed to them by `dependencies.shared_service`
    app.add_middleware(CrossOrigin, paths=CROSS_ORIGIN)
    app.add_middleware(CountRequests, metrics=service.metrics)
    app.add_exception_handler(HTTPException, routes.http_error)  # 404, 405: JSON too
    app.add_exception_handler(Exception, routes.failed)  # a bug: 500, JSON too
    app.add_exception_handler(Refused, routes.refused)
    app.include_router(routes.nmt_routes())
    app.include_router(routes.libretranslate_routes())
    app.include_router(routes.status_routes())
    # Written once, here, so that a route without its entry in the document fails at start; FastAPI
    # serves it rather than one it infers (the routes read their bodies by hand).
    schema = openapi.document(app, service)
    app.openapi = lambda: schema  # type: ignore[method-assign]
    return app


@contextlib.asynccontextmanager
async def _lifespan(app: "FastAPI") -> AsyncIterator[None]:
    service: Service = app.state.service
    service.start()
    watch = asyncio.create_task(service.keep_workers())
    try:
        yield
    except asyncio.CancelledError:
        # A second Ctrl-C: uvicorn ends without the lifespan's shutdown and cancels it here, which
        # Starlette would log as a failed shutdown, traceback and all. Nothing is decoded any more.
        watch.cancel()
        return
    watch.cancel()
    await service.finish()


class CountRequests:
    """ASGI middleware that counts every HTTP answer by route and status, with its latency. Plain
    ASGI (not Starlette's BaseHTTPMiddleware), so that a handler still sees its client disconnect."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
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
            path, method = scope.get("path", ""), scope.get("method", "")
            route = path if path in ROUTES else "other"
            self.metrics.answered(route, method, status, time.perf_counter() - start)


class CrossOrigin:
    """ASGI middleware: CORS (Starlette's) on `paths` only, allowing any origin without credentials;
    a browser's preflight (OPTIONS) there is answered here."""

    def __init__(self, app: ASGIApp, paths: Sequence[str]) -> None:
        from starlette.middleware.cors import CORSMiddleware

        self.app = app
        self.paths = frozenset(paths)
        self.cors = CORSMiddleware(
            app,
            allow_origins=["*"],
            allow_methods=["GET", "POST"],
            allow_headers=["Authorization", "Content-Type"],
            max_age=20 * 24 * 3600,
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        crossing = scope["type"] == "http" and scope.get("path") in self.paths
        await (self.cors if crossing else self.app)(scope, receive, send)
