"""Slow and greedy clients against a real `nmt serve`, with real sockets on loopback: a client that
sends part of a request, or nothing, is answered 408 and closed after --request-timeout; one client
address holds at most --max-client-connections open connections (the next gets 429); while
such clients hold what they may, another client's translations are answered; and a client that
stops reading its answers is dropped, and cannot keep a stopping server from exiting. Every
socket is bounded in count and time, and closed by the test."""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from helpers import TrainedRun
from serve_helpers import Server, running_server

TIMEOUT_S = 2.0
PER_CLIENT = 6
OTHER_CLIENT = "127.0.0.2"  # another address on loopback: another client to the server


@pytest.fixture(scope="module")
def server(trained: TrainedRun) -> Iterator[Server]:
    options = ["--request-timeout", TIMEOUT_S, "--max-client-connections", PER_CLIENT, "--max-queue", 8]
    options += ["--max-lines", 8]
    with running_server(trained.checkpoint, *options) as running:
        assert running.post({"text": ["apple"]}).status_code == 200  # warm: later answers are quick
        yield running


def address(server: Server) -> tuple[str, int]:
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


@contextlib.contextmanager
def sockets(server: Server, count: int, first_bytes: bytes) -> Iterator[list[socket.socket]]:
    """`count` connections from 127.0.0.1 that each send `first_bytes` and then nothing."""
    opened = []
    try:
        for _ in range(count):
            sock = socket.create_connection(address(server), timeout=10)
            if first_bytes:
                sock.sendall(first_bytes)
            opened.append(sock)
        yield opened
    finally:
        for sock in opened:
            sock.close()


def answer(sock: socket.socket, within: float) -> tuple[int, dict[str, Any], float]:
    """(status, JSON body, seconds waited) of what the server sends before it closes `sock`."""
    start = time.monotonic()
    sock.settimeout(within)
    data = b""
    while chunk := sock.recv(4096):
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split()[1])
    return status, json.loads(body), time.monotonic() - start


def still_open(sock: socket.socket) -> bool:
    """Whether the server has neither answered nor closed `sock` yet (a look without waiting)."""
    timeout = sock.gettimeout()
    sock.settimeout(0)
    try:
        sock.recv(1, socket.MSG_PEEK)
    except BlockingIOError:
        return True
    finally:
        sock.settimeout(timeout)
    return False


def other_client_translates(server: Server) -> httpx.Response:
    transport = httpx.HTTPTransport(local_address=OTHER_CLIENT)
    with httpx.Client(transport=transport, timeout=30) as client:
        return client.post(server.url + "/translate", json={"text": ["apple river"]})


UNFINISHED = {
    "nothing": b"",
    "part of the headers": b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Ty",
    "one byte of a 100-byte body": b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{",
}


def test_an_unfinished_request_gets_408_and_is_closed_after_the_timeout(server: Server) -> None:
    with contextlib.ExitStack() as stack:  # the three at once, each on its own connection
        opened = {what: stack.enter_context(sockets(server, 1, sent))[0] for what, sent in UNFINISHED.items()}
        for what, sock in opened.items():
            status, body, _ = answer(sock, within=TIMEOUT_S + 10)
            assert status == 408, what
            assert "--request-timeout" in body["error"]


def test_one_address_holds_a_bounded_number_of_connections_and_others_are_served(server: Server) -> None:
    partial = b"POST /translate HTTP/1.1\r\nHost: x\r\n"
    with sockets(server, PER_CLIENT, partial) as held, sockets(server, 2, partial) as extra:
        for sock in extra:
            status, body, _ = answer(sock, within=5)
            assert status == 429
            assert f"more than {PER_CLIENT} open connections" in body["error"]
        # The slow client holds all it may; another address still gets its translation.
        response = other_client_translates(server)
        assert response.status_code == 200, response.text
        assert response.json()["translations"][0]
        assert all(still_open(sock) for sock in held), "answered while the slow connections were held"
        for sock in held:
            assert answer(sock, within=TIMEOUT_S + 10)[0] == 408
    # Once they are closed, the address may connect again.
    assert httpx.post(server.url + "/translate", json={"text": ["apple"]}, timeout=30).status_code == 200


@pytest.fixture(scope="module")
def crowded(trained: TrainedRun) -> Iterator[Server]:
    # --max-queue 8: the server holds at most 2 * 8 + 64 = 80 connections. The long timeout keeps
    # the held connections open for as long as the test needs them.
    options = ["--max-queue", 8, "--max-lines", 8, "--max-client-connections", PER_CLIENT]
    with running_server(trained.checkpoint, *options, "--request-timeout", 60) as running:
        yield running


def idle_connections(server: Server, count: int, first: int) -> list[socket.socket]:
    """`count` connections that send nothing, PER_CLIENT from each address from 127.0.0.10 on
    (the `first`-th connection's address is 127.0.0.{10 + first // PER_CLIENT})."""
    opened = []
    for i in range(first, first + count):
        sock = socket.socket()
        sock.settimeout(10)
        sock.bind((f"127.0.0.{10 + i // PER_CLIENT}", 0))
        sock.connect(address(server))
        opened.append(sock)
    return opened


def head_of_answer(sock: socket.socket) -> bytes:
    head = b""
    while b"\r\n\r\n" not in head and (chunk := sock.recv(4096)):
        head += chunk
    return head


def test_idle_connections_from_many_addresses_make_room_for_a_request(crowded: Server) -> None:
    """Each address holds what it may, together more than the server holds: the connections
    without a whole request that have been silent longest are closed for newcomers, who are
    served; an upload that is moving is not closed."""
    held: list[socket.socket] = []
    kept_alive = socket.create_connection(address(crowded), timeout=10)  # silent longest, between requests
    upload = socket.create_connection(address(crowded), timeout=10)
    body = json.dumps({"text": ["apple river"]}).encode()
    try:
        kept_alive.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        first = head_of_answer(kept_alive)
        assert first.startswith(b"HTTP/1.1 200 ")
        upload.sendall(f"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n".encode())
        held += idle_connections(crowded, 42, first=0)
        time.sleep(0.5)  # the server has taken them in
        upload.sendall(body[:5])  # the upload moves on: heard after those connected
        time.sleep(0.5)
        held += idle_connections(crowded, 42, first=42)
        response = other_client_translates(crowded)
        assert response.status_code == 200, response.text
        # 2 + 84 held + the newcomer = 87 of 80: the seven silent longest made room.
        assert [i for i, sock in enumerate(held) if not still_open(sock)] == list(range(6))
        assert still_open(upload)
        upload.sendall(body[5:])
        assert head_of_answer(upload).startswith(b"HTTP/1.1 200 ")
        # Between two requests, closed as its keep-alive timeout would close it: no answer to a
        # request it has not sent (its client sends it again on a new connection).
        while chunk := kept_alive.recv(4096):  # the rest of the /health answer, then its close
            first += chunk
        assert first.count(b"HTTP/1.1 ") == 1
        status, answered, _ = answer(held[0], within=10)  # connected, and no request yet: told why
        assert status == 503 and "has sent no whole request" in answered["error"]
    finally:
        for sock in (kept_alive, upload, *held):
            sock.close()


def test_a_kept_alive_connection_is_timed_per_request(server: Server) -> None:
    """The timeout runs from a request's first byte, not from the connection: a client that sends
    whole requests on one connection, with pauses between them shorter than uvicorn's keep-alive,
    is answered every time (the connection lives longer than the timeout)."""
    with httpx.Client(timeout=30) as client:
        for _ in range(3):
            response = client.post(server.url + "/translate", json={"text": ["apple"]})
            assert response.status_code == 200
            time.sleep(TIMEOUT_S * 0.6)  # under uvicorn's 5 s keep-alive


@pytest.mark.slow  # waits out a send timeout and a stopping server: about 5 s
def test_a_client_that_stops_reading_is_dropped_and_cannot_hold_a_stopping_server(
    trained: TrainedRun,
) -> None:
    """A client pipelines requests and reads none of the answers: once the server has more to send
    than the sockets hold, the connection is dropped after --request-timeout, and SIGTERM ends the
    server (it waits for every answer to be sent, and would wait for this one forever)."""
    with running_server(trained.checkpoint, "--request-timeout", TIMEOUT_S) as server:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connecting: a small window
        try:
            sock.connect(address(server))
            sock.settimeout(TIMEOUT_S + 10)
            request = b"GET /" + b"a" * 15_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n"  # a 404 naming the path
            with pytest.raises((ConnectionResetError, BrokenPipeError)):  # dropped, not timed out
                while True:  # until the server stops reading, then drops the connection
                    sock.sendall(request)
            assert server.get("/health").status_code == 200
            server.process.send_signal(signal.SIGTERM)
            assert server.process.wait(60) == 0
        finally:
            sock.close()


def server_end(server_port: int, client_port: int) -> tuple[str, int] | None:
    """The server's end of a connection as the kernel holds it: its state (/proc/net/tcp's st,
    "01" while established) and the bytes queued unsent; None once closed and gone."""
    for line in open("/proc/net/tcp", encoding="ascii").read().splitlines()[1:]:
        local, remote, state, queues = line.split()[1:5]
        if int(local.split(":")[1], 16) == server_port and int(remote.split(":")[1], 16) == client_port:
            return state, int(queues.split(":")[0], 16)
    return None


@pytest.mark.slow  # 200 requests a twentieth of a second apart, then three timeouts
def test_a_client_that_stops_reading_once_the_kernel_is_full_is_let_go(trained: TrainedRun) -> None:
    """The client stops sending as soon as the kernel's buffers are full of answers, leaving a few
    KB in the server's own buffer (well under the 64 KiB that pauses writing by default), and never
    reads. The server must close its end all the same, not hold it open for the client."""
    with running_server(trained.checkpoint, "--request-timeout", TIMEOUT_S) as server:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        try:
            sock.connect(address(server))
            sock.settimeout(TIMEOUT_S)
            ports = address(server)[1], sock.getsockname()[1]
            request = b"GET /" + b"a" * 15_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n"  # a 404 naming the path
            held = None
            for _ in range(1000):
                sock.sendall(request)
                time.sleep(0.05)
                now = server_end(*ports)
                if now == held:  # this answer found no room in the kernel: it waits in the server
                    break
                held = now
            time.sleep(TIMEOUT_S * 3)
            end = server_end(*ports)
            assert end is None or end[0] != "01", f"the server still holds the connection open: {end}"
            assert server.get("/health").status_code == 200
        finally:
            sock.close()
