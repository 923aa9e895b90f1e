"""uvicorn's HTTP/1.1 protocol with two bounds that keep slow or greedy clients from holding the
server's connections (uvicorn's limit_concurrency counts open connections, however idle):

- a request, headers and body, must arrive within `limits.request_timeout` seconds of the
  connection (or, on a kept-alive connection, of its first byte): a client that sends part of a
  request, or nothing, gets 408 and is closed;
- a client that reads none of its answer for `limits.request_timeout` seconds is dropped, so
  that one that stops reading (say after pipelining requests) holds neither a connection nor a
  stopping server, which waits for every answer to be sent;
- one client address holds at most `limits.max_client_connections` open connections: the next
  gets 429 and is closed;
- the server holds at most `limits.max_connections`: past it, the connection without a whole
  request that has been silent longest is closed (503) to make room (idle connections from many addresses
  cannot lock out a client with a request to make), and only where every connection has one
  is the newcomer refused (503).

Errors that uvicorn answers itself (a request that is not HTTP) get nmt's JSON error too.

It imports uvicorn and h11 (the serve extra): `server` imports it only once the server runs.
"""

import asyncio
import json
from collections import Counter
from typing import ClassVar

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from nmt_cli.serving.limits import ServeLimits
from nmt_cli.serving.refusals import RETRY_AFTER_S

LINGER_S = 2.0  # how long a refused connection is read and dropped before it is closed
UNFINISHED = (h11.IDLE, h11.SEND_BODY)  # the client's states before its request is complete


class GuardedProtocol(H11Protocol):
    """One connection. uvicorn makes one instance per connection from the class it is given,
    so what the connections of a server share lives on a class of that server's own
    (`bounded_by`)."""

    limits: ClassVar[ServeLimits]
    open_by_client: ClassVar[Counter[str]]
    """Open connections by client address, over all of the server's connections."""
    live: ClassVar[dict["GuardedProtocol", None]]
    """The server's connections not being closed, oldest first (a dict keeps insertion order)."""

    _deadline: asyncio.TimerHandle | None = None
    _reading_watch: asyncio.TimerHandle | None = None
    _stopping = False  # the server is shutting down: answers still to come are watched too
    _heard = 0.0  # when the client last sent something (or connected)
    _address: str | None = None
    _refused = False

    @classmethod
    def bounded_by(cls, limits: ServeLimits) -> type["GuardedProtocol"]:
        """The protocol class of one server: its limits and its own count of connections."""
        shared = {"limits": limits, "open_by_client": Counter(), "live": {}}
        return type(cls.__name__, (cls,), shared)

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        # Writing pauses as soon as anything waits unsent (not past 64 KiB): an answer the client
        # does not read is watched however small the part the kernel could not take.
        transport.set_write_buffer_limits(high=0)
        self._heard = self.loop.time()
        self.live[self] = None
        if self.client:
            self._address = self.client[0]
            self.open_by_client[self._address] += 1
            if self.open_by_client[self._address] > self.limits.max_client_connections:
                self._refuse_one_too_many()
                return
        if len(self.live) > self.limits.max_connections and not self._make_room():
            message = (
                f"the server holds its most connections ({self.limits.max_connections}), each with a request"
            )
            self._close_with(refusal(503, "Service Unavailable", f"{message}; retry later", retry=True))
            return
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return  # answered and closing: what still arrives is read and dropped
        self._heard = self.loop.time()
        if self._deadline is None and self.conn.their_state is h11.IDLE:
            self._arm()  # the first byte of the next request on a kept-alive connection
        super().data_received(data)
        if self.conn.their_state not in UNFINISHED:
            self._disarm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self._reading_watch is not None:
            self._reading_watch.cancel()
            self._reading_watch = None
        self.live.pop(self, None)
        if self._address is not None:
            self.open_by_client[self._address] -= 1
            if self.open_by_client[self._address] <= 0:
                del self.open_by_client[self._address]
            self._address = None
        super().connection_lost(exc)

    def pause_writing(self) -> None:
        super().pause_writing()
        self._watch_reading()

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._reading_watch is not None:  # all read: a later pause is watched afresh
            self._reading_watch.cancel()
            self._reading_watch = None
        if self._stopping:
            self._watch_reading()

    def shutdown(self) -> None:
        super().shutdown()
        self._stopping = True
        self._watch_reading()

    def _watch_reading(self) -> None:
        if self._reading_watch is None:
            unsent = self.transport.get_write_buffer_size()
            timeout = self.limits.request_timeout
            self._reading_watch = self.loop.call_later(timeout, self._check_reading, unsent)

    def _check_reading(self, unsent_before: int) -> None:
        """Drop the connection if its client has read nothing of what waits to be sent since the
        watch began; else watch on while an answer waits or the server stops."""
        self._reading_watch = None
        unsent = self.transport.get_write_buffer_size()
        if unsent and unsent == unsent_before:
            self.transport.abort()
        elif unsent or self.flow.write_paused or self._stopping:
            self._watch_reading()

    def _refuse_one_too_many(self) -> None:
        message = (
            f"more than {self.limits.max_client_connections} open connections from "
            f"{self._address}; reuse one (keep-alive) or wait for one to close"
        )
        self._close_with(refusal(429, "Too Many Requests", message))

    def _make_room(self) -> bool:
        """Close the other connection still waiting for its request that has been silent longest
        (an upload that is moving is not); False if none is."""
        waiting = [other for other in self.live if other is not self and other._waiting_for_request()]
        if not waiting:
            return False
        other = min(waiting, key=lambda connection: connection._heard)
        message = (
            f"the server holds its most connections ({self.limits.max_connections}) and this one "
            "has sent no whole request; send a request once connected"
        )
        # A kept-alive connection between requests is closed without an answer, as its keep-alive
        # timeout would close it: clients send the next request again by themselves.
        kept_alive = other.cycle is not None and other.conn.their_state is h11.IDLE
        between = kept_alive and not other.conn.trailing_data[0]
        other._close_with(b"" if between else refusal(503, "Service Unavailable", message, retry=True))
        return True

    def _waiting_for_request(self) -> bool:
        # IDLE: not even a request's headers; SEND_BODY before the app answers: part of a body.
        answered = self.cycle is not None and self.cycle.response_started
        state = self.conn.their_state
        return state is h11.IDLE or (state is h11.SEND_BODY and not answered)

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to bytes that are not an HTTP request, as JSON (its own is plain text)."""
        self._close_with(refusal(400, "Bad Request", f"not a valid HTTP/1.1 request ({msg.rstrip('.')})"))

    def _arm(self) -> None:
        self._deadline = self.loop.call_later(self.limits.request_timeout, self._too_slow)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _too_slow(self) -> None:
        self._deadline = None
        state = self.conn.their_state
        if state not in UNFINISHED:
            return
        # In SEND_BODY the app has the request's headers and may have answered already.
        answered = state is h11.SEND_BODY and self.cycle is not None and self.cycle.response_started
        message = (
            f"the request did not arrive within {self.limits.request_timeout:g} s (--request-timeout); "
            "send it whole"
        )
        self._close_with(b"" if answered else refusal(408, "Request Timeout", message))

    def _close_with(self, response: bytes) -> None:
        """Answer and close. Closing a socket with unread bytes makes the kernel reset the
        connection, and the client may lose the answer: so the server sends its end (FIN),
        then reads and drops what still comes for up to LINGER_S, until the client closes."""
        if self.transport.is_closing() or self._refused:
            return
        self._refused = True
        self._disarm()
        self.live.pop(self, None)
        if response:
            self.transport.write(response)
        if self.transport.can_write_eof():
            self.transport.write_eof()
            self.loop.call_later(LINGER_S, self.transport.close)
        else:
            self.transport.close()


def refusal(status: int, reason: str, message: str, retry: bool = False) -> bytes:
    """A whole HTTP/1.1 response with nmt's JSON error, closing the connection."""
    body = json.dumps({"error": message}).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\naccess-control-allow-origin: *\r\n"
        + (f"retry-after: {RETRY_AFTER_S}\r\n" if retry else "")
        + "\r\n"
    )
    return head.encode("ascii") + body
