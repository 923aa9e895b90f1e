"""Batching across requests for `nmt serve`: lines from many callers decoded in one call.

Callers `submit` lines with their decode settings and get a `concurrent.futures.Future`; a
decoding thread takes the oldest waiting request, gives others up to `max_wait_s` (counted from
that request's arrival) to join it, up to `max_batch_tokens` source tokens, decodes the lines of
every request with the same settings in one call, and hands each request its own results. With
several decoding threads, a request that finds all of them idle, no other request waiting and a
last batch of one request starts at once: a lone client does not pay the wait. The clients of a
batch send their next requests together, so the gathering thread stops waiting as soon as as many
requests are back as the last batches of the idle threads held (the wait would only leave them
idle), and takes its share of what waits: the other idle threads take the rest at once, so that
a burst is decoded by every free thread side by side, not by one while the others wait for its
answers to come back.
Requests with other settings wait for a later batch. With several decoding threads (one per
decoding worker process), one gathers the next batch while the others decode theirs. Waiting
lines are bounded (`max_queue`): beyond that `submit` raises `QueueFull` at once, so memory
stays bounded under overload.

Knows nothing of HTTP or of the model: the decode and token-count functions are given, and the
settings are only compared.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, TypeAlias, TypeVar

if TYPE_CHECKING:
    from nmt_cli.decoding.settings import DecodeSettings
    from nmt_cli.decoding.terms import Constrained

Result = TypeVar("Result")
Line: TypeAlias = "str | Constrained"
"""A line to translate, or one with the phrases its translation must contain."""


@dataclass
class BatchStats:
    """Counters since start, for /health, /info and the log."""

    # What came in, and how it was decoded.
    requests: int = 0
    lines: int = 0
    batches: int = 0
    merged_batches: int = 0  # batches that held lines of more than one request
    most_requests_in_a_batch: int = 0

    # What was not decoded.
    rejected: int = 0  # requests refused because the queue was full
    cancelled: int = 0  # requests dropped before decoding: their clients went away


class QueueFull(Exception):
    """More lines are waiting than the batcher may hold; the caller should retry later."""


class TooLarge(Exception):
    """More lines in one request than the whole queue holds: retrying cannot help."""


class Closed(Exception):
    """The batcher is shutting down and takes no new work."""


@dataclass
class _Request(Generic[Result]):
    lines: list[Line]
    key: DecodeSettings
    arrived: float
    future: Future[list[Result]] = field(default_factory=Future)
    tokens: int | None = None
    """Source tokens, counted by the decoding thread (off the caller's thread)."""


class Batcher(Generic[Result]):
    """Decoding threads fed by a bounded queue of requests. `start()`, `submit()` from any
    thread, `close()` to finish every waiting request and stop."""

    def __init__(
        self,
        decode: Callable[[list[Line], DecodeSettings], list[Result]],
        count_tokens: Callable[[Line], int],
        max_batch_tokens: int,
        max_wait_s: float,
        max_queue: int,
        on_batch: Callable[[int, int, int, float], None] | None = None,
        decoders: int = 1,
    ) -> None:
        """`decode(lines, key)` returns one result per line, and is called from `decoders` threads at
        once; `on_batch(requests, lines, tokens, seconds)` is told of every batch (for logging)."""
        self.decode = decode
        self.count_tokens = count_tokens
        self.max_batch_tokens = max_batch_tokens
        self.max_wait_s = max_wait_s
        self.max_queue = max_queue
        self.on_batch = on_batch
        self.stats = BatchStats()
        self._cond = threading.Condition()
        self._inbox: deque[_Request[Result]] = deque()  # shared with submitters, under _cond
        self._backlog: list[_Request[Result]] = []  # the gathering thread's, under _gather; oldest first
        self._gather = threading.Lock()  # one decoding thread at a time gathers a batch
        self._waiting_lines = 0  # lines in _inbox and _backlog, under _cond
        self._closing = False
        self._decoding: set[int] = set()  # the decoding threads decoding a batch now, under _cond
        self._last_batch_requests = 1  # of the last batch any thread took, under _cond
        self._last_sizes = [1] * decoders  # requests in each thread's last batch, under _cond
        self._threads = [
            threading.Thread(target=self._run, args=(i,), name=f"nmt-decoder-{i}", daemon=True)
            for i in range(decoders)
        ]

    @property
    def waiting_lines(self) -> int:
        return self._waiting_lines

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def submit(self, lines: list[Line], key: DecodeSettings) -> Future[list[Result]]:
        """Queue `lines`; the future gets one result per line, in order (or the decode's error).
        Raises QueueFull when the lines would take the queue past `max_queue`, TooLarge when they
        are more than it holds at all, Closed after close()."""
        request: _Request[Result] = _Request(list(lines), key, time.monotonic())
        with self._cond:
            if self._closing:
                raise Closed("the server is shutting down")
            if len(lines) > self.max_queue:  # never queued, however long its client waited: say so
                raise TooLarge(f"{len(lines):,} lines, more than the whole queue holds ({self.max_queue:,})")
            if self._waiting_lines + len(lines) > self.max_queue:
                self.stats.rejected += 1
                raise QueueFull(f"{self._waiting_lines} lines are waiting (at most {self.max_queue})")
            self._waiting_lines += len(lines)
            self.stats.requests += 1
            self.stats.lines += len(lines)
            self._inbox.append(request)
            self._cond.notify()
        return request.future

    def close(self, timeout: float | None = None) -> None:
        """Take no new work, decode everything waiting (without waiting for latecomers), stop."""
        with self._cond:
            self._closing = True
            self._cond.notify()
        for thread in self._threads:
            if thread.is_alive():
                thread.join(timeout)

    def _run(self, thread: int) -> None:
        while True:
            with self._gather:
                batch = self._next_batch(thread)
            if batch is None:
                return
            try:
                self._decode(batch)
            finally:
                with self._cond:
                    self._decoding.discard(thread)

    def _idle(self) -> list[int]:
        """The decoding threads not decoding now (the gathering one among them); under _cond."""
        return [i for i in range(len(self._threads)) if i not in self._decoding]

    def _next_batch(self, thread: int) -> list[_Request[Result]] | None:
        """The next requests for decoding thread `thread`; None once closed and empty. Once as
        many requests like the first are waiting as the idle threads' last batches held, their
        clients are back and the batch starts without waiting out `max_wait_s`; it takes its share
        of them, an equal part for each idle thread."""
        with self._cond:
            while not self._inbox and not self._backlog:
                if self._closing:
                    return None
                self._cond.wait()
        self._collect()
        first = self._backlog[0]
        deadline = first.arrived + self.max_wait_s
        with self._cond:
            idle = not self._decoding and len(self._backlog) == 1 and not self._inbox
        if idle and self._last_batch_requests == 1 and len(self._threads) > 1:
            # Nothing else in flight, and the last batch held one request: a lone client, which
            # starts at once (another decoding thread stays free for latecomers). After a batch
            # of several, their clients' next requests arrive together: those wait for each other.
            # With one thread, a burst's first request also waits for the rest.
            deadline = first.arrived
        # Wait for more requests like the first until the batch is full or the first has waited
        # long enough. Under load the first has already waited while the previous batch decoded,
        # so the next batch starts at once.
        while self._tokens_like(first.key) < self.max_batch_tokens:
            with self._cond:
                expected = sum(self._last_sizes[i] for i in self._idle())
            if expected > 1 and self._count_like(first.key) >= expected:
                break
            with self._cond:
                remaining = deadline - time.monotonic()
                if self._closing or remaining <= 0:
                    break
                if not self._inbox:
                    self._cond.wait(remaining)
            self._collect()
        with self._cond:
            share = -(-self._count_like(first.key) // len(self._idle()))  # the rest: the other idle threads'
        batch, tokens = [first], first.tokens or 0
        for request in self._backlog[1:]:
            if len(batch) == share:
                break
            if request.key == first.key and tokens + (request.tokens or 0) <= self.max_batch_tokens:
                batch.append(request)
                tokens += request.tokens or 0
        taken = {id(r) for r in batch}
        self._backlog = [r for r in self._backlog if id(r) not in taken]
        with self._cond:
            self._waiting_lines -= sum(len(r.lines) for r in batch)
            self._decoding.add(thread)
            self._last_batch_requests = self._last_sizes[thread] = len(batch)
        # A request whose caller cancelled its future (a client that went away) is dropped here;
        # once running, a future can no longer be cancelled, so its result is always deliverable.
        kept = [r for r in batch if r.future.set_running_or_notify_cancel()]
        with self._cond:
            self.stats.cancelled += len(batch) - len(kept)
        return kept

    def _collect(self) -> None:
        """Move new requests to the backlog and count their tokens outside the lock, so that
        submitters never wait for tokenization."""
        with self._cond:
            new = list(self._inbox)
            self._inbox.clear()
        for request in new:
            try:
                request.tokens = sum(self.count_tokens(line) for line in request.lines)
            except Exception:  # the decode will say what is wrong; characters bound the tokens
                request.tokens = sum(len(line) for line in request.lines)
        self._backlog.extend(new)

    def _count_like(self, key: DecodeSettings) -> int:
        return sum(r.key == key for r in self._backlog)

    def _tokens_like(self, key: DecodeSettings) -> int:
        return sum(r.tokens or 0 for r in self._backlog if r.key == key)

    def _decode(self, batch: list[_Request[Result]]) -> None:
        if not batch:
            return
        lines = [line for request in batch for line in request.lines]
        start = time.perf_counter()
        try:
            results = self.decode(lines, batch[0].key)
        except Exception as err:
            if len(batch) == 1:
                batch[0].future.set_exception(err)
            else:  # decode each request alone, so that only the one that fails gets the error
                for request in batch:
                    self._decode([request])
            return
        seconds = time.perf_counter() - start
        assert len(results) == len(lines), "decode must return one result per line"
        with self._cond:
            self.stats.batches += 1
            self.stats.merged_batches += len(batch) > 1
            self.stats.most_requests_in_a_batch = max(self.stats.most_requests_in_a_batch, len(batch))
        offset = 0
        for request in batch:
            request.future.set_result(results[offset : offset + len(request.lines)])
            offset += len(request.lines)
        if self.on_batch is not None:
            self.on_batch(len(batch), len(lines), sum(r.tokens or 0 for r in batch), seconds)
