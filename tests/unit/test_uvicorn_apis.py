"""The uvicorn that `nmt serve` needs: pyproject.toml bounds it below its next minor release, and
every private part of it that nmt builds on is still there with the shape nmt expects.
`serving/connection_guard.py` subclasses uvicorn's HTTP/1.1 protocol (`H11Protocol`, not a public
API) and reads its per-connection state; `serving/server.py` overrides `uvicorn.Server`'s signal
handling and start-up and edits its logging configuration. An upgrade that changes any of them
fails here, naming what nmt relies on, before it fails as a server that misbehaves."""

from __future__ import annotations

import asyncio
import inspect
import re
import tomllib
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

pytest.importorskip("uvicorn")
import h11  # noqa: E402  (uvicorn's dependency: present where uvicorn is)
import uvicorn  # noqa: E402
from uvicorn.protocols.http.h11_impl import H11Protocol  # noqa: E402
from uvicorn.server import ServerState  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]

PROTOCOL_METHODS = {
    # name: the parameters after self, as connection_guard.GuardedProtocol overrides or calls it
    "connection_made": ["transport"],
    "data_received": ["data"],
    "connection_lost": ["exc"],
    "pause_writing": [],
    "resume_writing": [],
    "shutdown": [],
    "send_400_response": ["msg"],
}
SERVER_METHODS = {
    "capture_signals": [],  # replaced by GracefulServer: exit 0 after SIGTERM, not a re-raised signal
    "handle_exit": ["sig", "frame"],  # called from GracefulServer.take_stop
    "startup": ["sockets"],  # extended by GracefulServer to log the address it listens on
}


def parameters(function: Any) -> list[str]:
    return [name for name in inspect.signature(function).parameters if name != "self"]


@pytest.mark.parametrize("name", sorted(PROTOCOL_METHODS))
def test_the_h11_protocol_has_each_method_connection_guard_overrides(name: str) -> None:
    where = f"uvicorn {uvicorn.__version__}: H11Protocol.{name}, which serving/connection_guard.py overrides"
    assert callable(getattr(H11Protocol, name, None)), f"{where}, is gone"
    assert parameters(getattr(H11Protocol, name)) == PROTOCOL_METHODS[name], (
        f"{where}, changed its parameters"
    )


@pytest.mark.parametrize("name", sorted(SERVER_METHODS))
def test_uvicorn_server_has_each_method_serve_overrides(name: str) -> None:
    where = (
        f"uvicorn {uvicorn.__version__}: Server.{name}, which serving/server.py's GracefulServer overrides"
    )
    assert callable(getattr(uvicorn.Server, name, None)), f"{where}, is gone"
    assert parameters(getattr(uvicorn.Server, name)) == SERVER_METHODS[name], (
        f"{where}, changed its parameters"
    )


async def _plain_answer(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


def test_the_h11_protocol_holds_the_connection_state_connection_guard_reads() -> None:
    """One connection driven by hand: the attributes GuardedProtocol reads exist, of the kinds
    it takes them for, before a request, while it is answered and after."""

    async def one_request() -> None:
        config = uvicorn.Config(_plain_answer, lifespan="off", log_config=None)
        protocol = H11Protocol(config=config, server_state=ServerState(), app_state={})
        transport = mock.Mock(spec=asyncio.Transport)
        transport.get_extra_info.return_value = None
        transport.is_closing.return_value = False
        protocol.connection_made(transport)
        where = f"uvicorn {uvicorn.__version__}: H11Protocol's"
        assert protocol.loop is asyncio.get_running_loop(), f"{where} loop (the timers' clock)"
        assert protocol.transport is transport, f"{where} transport"
        assert protocol.flow.write_paused is False, f"{where} flow.write_paused"
        assert hasattr(protocol, "client"), f"{where} client (the address of one-too-many refusals)"
        assert isinstance(protocol.conn, h11.Connection), f"{where} conn (an h11.Connection)"
        assert protocol.conn.their_state is h11.IDLE and protocol.conn.trailing_data == (b"", False)
        assert protocol.cycle is None, f"{where} cycle (None before the first request)"
        protocol.data_received(b"GET / HTTP/1.1\r\nHost: test\r\n\r\n")
        assert protocol.cycle is not None and protocol.cycle.response_started is False, f"{where} cycle"
        for _ in range(10):  # the app's task answers on the loop
            await asyncio.sleep(0)
        assert protocol.cycle.response_started is True, f"{where} cycle.response_started"
        protocol.connection_lost(None)

    asyncio.run(one_request())


def test_uvicorn_server_holds_the_state_and_logging_serve_reads() -> None:
    server = uvicorn.Server(uvicorn.Config(_plain_answer, lifespan="off", log_config=None))
    where = f"uvicorn {uvicorn.__version__}: Server"
    assert server.started is False and server.force_exit is False, f"{where}.started and .force_exit"
    logging = uvicorn.config.LOGGING_CONFIG
    assert "default" in logging["handlers"] and "access" in logging["handlers"], f"{where}'s LOGGING_CONFIG"
    assert isinstance(logging["loggers"], dict)


def test_the_uvicorn_bound_in_pyproject_holds_the_installed_version() -> None:
    """pyproject.toml bounds uvicorn to the minor releases connection_guard was written against:
    a newer one must pass this file's tests before the bound moves."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    for extra in ("serve", "dev"):
        (spec,) = [d for d in extras["optional-dependencies"][extra] if d.startswith("uvicorn")]
        bound = re.fullmatch(r"uvicorn>=(\d+)\.(\d+),<(\d+)\.(\d+)", spec)
        assert bound is not None, (
            f"the {extra} extra's {spec!r} has no upper bound below uvicorn's next minor"
        )
        low, high = (int(bound[1]), int(bound[2])), (int(bound[3]), int(bound[4]))
        found = re.match(r"(\d+)\.(\d+)", uvicorn.__version__)
        assert found is not None
        have = (int(found[1]), int(found[2]))
        assert low <= have < high, f"uvicorn {uvicorn.__version__} is outside the {extra} extra's {spec}"
