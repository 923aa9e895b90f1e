"""The server of `nmt serve`: the listening socket, bound before the model loads, and uvicorn
running the app until SIGINT or SIGTERM, after which every request in flight is finished."""

import asyncio
import contextlib
import copy
import logging
import re
import signal
import socket
import sys
from collections.abc import Generator
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, unquote_plus

from nmt_cli.errors import STOPS_TAKEN, InputError, NmtError
from nmt_cli.serving.keys import ApiKeys
from nmt_cli.serving.limits import ServeLimits

if TYPE_CHECKING:
    from fastapi import FastAPI
    from uvicorn import Server

log = logging.getLogger("nmt_cli.serving")


class StoppedAtOnce(NmtError):
    """A second Ctrl-C: the server stopped without finishing its requests (exit 130). Its decoding
    threads may still be in torch, so the process must end without the interpreter's teardown,
    which would abort ("terminate called without an active exception") or wait for them."""

    exit_code = 130


BACKLOG = 2048  # uvicorn's own default
LOOP_SWITCH_S = 0.001  # /health under a flood of HTML: p90 24-30 ms, against 61-65 ms at 5 ms
KEY_WORDS = ("key", "token", "secret", "password", "auth")
"""What a query parameter's name holds, case-folded and without its other characters, when it
looks like it carries a secret."""
QUERY_OF_KEYS = "?(query not logged: a name in it looks like a key)"
QUERY_NOT_LOGGED = "?(query not logged)"
PATH_OF_A_KEY = "/(path not logged: it holds an API key)"


class HideKeys(logging.Filter):
    """Keeps API keys out of uvicorn's access log. LibreTranslate clients such as deep-translator
    send `api_key` in the query string, and clients spell it many ways (`API_KEY`, `api-key`,
    `api%5Fkey`...). On a server with keys no query string is logged at all, nor a path with a
    loaded key in it; on any server, no query string that names something like a key."""

    def __init__(self, keys: ApiKeys | None = None) -> None:
        super().__init__()
        self.keys = keys

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(
                hide_key(arg, self.keys) if isinstance(arg, str) else arg for arg in record.args
            )
        return True


def hide_key(path: str, keys: ApiKeys | None = None) -> str:
    """`path` (with its query string) as the access log may show it."""
    base, mark, query = path.partition("?")
    if keys is not None:
        if any(keys.allows(unquote(part)) for part in base.split("/") if part):
            base = PATH_OF_A_KEY
        return base + (QUERY_NOT_LOGGED if mark else "")
    if mark and any(_looks_like_key(name) for name in _names(query)):
        return base + QUERY_OF_KEYS
    return path


def _names(query: str) -> list[str]:
    """The names of a query string's parameters, read more widely than any server reads them:
    escapes undone until none is left (`api%255Fkey`), `&` and `;` both separating."""
    for _ in range(4):
        decoded = unquote_plus(query)
        if decoded == query:
            break
        query = decoded
    return [part.partition("=")[0] for part in re.split("[&;]", query)]


def _looks_like_key(name: str) -> bool:
    letters = "".join(c for c in name.casefold() if c.isalpha())
    return any(word in letters for word in KEY_WORDS)


def bind_socket(host: str, port: int) -> socket.socket:
    """A socket listening on host:port from the start: a taken port fails before the model is
    loaded, and so does a second server started at the same moment (two sockets may bind one port
    while neither listens). Connections made while the model loads wait in the backlog and are
    answered once it is ready."""
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
        sock.listen(BACKLOG)
    except OSError as err:
        sock.close()
        raise InputError(f"--host {host} --port {port}: cannot listen there ({err.strerror})") from None
    return sock


def run_server(
    app: "FastAPI", sock: socket.socket, limits: ServeLimits, quiet: bool, keys: ApiKeys | None = None
) -> None:
    """Serve until SIGINT or SIGTERM, then stop accepting, finish every request, and return.
    `keys`: the server's API keys, which the access log must never show."""
    import uvicorn

    log_config = copy.deepcopy(uvicorn.config.LOGGING_CONFIG)
    level = "warning" if quiet else "info"
    log_config["loggers"]["nmt_cli"] = {"handlers": ["default"], "level": level.upper(), "propagate": False}
    log_config["filters"] = {"hide_keys": {"()": HideKeys, "keys": keys}}
    log_config["handlers"]["access"]["filters"] = ["hide_keys"]
    # The protocol bounds connections (limits.max_connections) itself: uvicorn's limit_concurrency
    # would refuse a newcomer in plain text while idle connections hold every place.
    config = uvicorn.Config(
        app,
        http=guarded_protocol(limits),
        log_config=log_config,
        log_level=level,
        access_log=not quiet,
        lifespan="on",
        limit_concurrency=None,
        ws="none",  # no WebSocket route: an upgrade request is answered as plain HTTP (JSON errors)
    )
    server = _graceful_server(config)
    # The event loop shares the interpreter's lock with the text lane's thread: a thread that wants
    # it back waits up to this interval, 5 ms by default, several times for each request.
    switch = sys.getswitchinterval()
    sys.setswitchinterval(LOOP_SWITCH_S)
    try:
        server.run(sockets=[sock])
    finally:
        sys.setswitchinterval(switch)
    if server.force_exit:
        raise StoppedAtOnce("stopped at once by a second Ctrl-C; requests in flight were dropped")


def guarded_protocol(limits: ServeLimits) -> type[asyncio.Protocol]:
    """uvicorn's HTTP/1.1 protocol, bounding slow and greedy clients by `limits`
    (`serving.connection_guard`): 408 for a request that does not arrive in time, 429 past
    --max-client-connections from one address."""
    from nmt_cli.serving.connection_guard import GuardedProtocol  # uvicorn and h11: the serve extra

    return GuardedProtocol.bounded_by(limits)


def _graceful_server(config: Any) -> "Server":
    import uvicorn

    class GracefulServer(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Generator[None, None, None]:
            # uvicorn re-raises the signal after its graceful shutdown, which would end the process
            # by SIGTERM (or a KeyboardInterrupt) instead of exit status 0 once everything is done.
            previous = {sig: signal.signal(sig, self.take_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
            try:
                yield
            finally:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)

        def take_stop(self, sig: int, frame: Any) -> None:
            STOPS_TAKEN.append(sig)  # for `cli.main` to pass on to a program running nmt
            self.handle_exit(sig, frame)

        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            if self.started and sockets:  # uvicorn names the address only for sockets it binds
                host, port = sockets[0].getsockname()[:2]
                where = f"[{host}]" if ":" in host else host
                log.info(f"nmt serve: listening on http://{where}:{port} (Ctrl-C to stop)")

    return GracefulServer(config)
