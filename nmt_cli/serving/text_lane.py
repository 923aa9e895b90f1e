"""The work a request's texts need around their decoding (HTML parsed and rebuilt, sentences cut
and joined, phrases encoded), done on one thread of its own, off the event loop: the loop
stays free to accept connections, answer /health and run the request timers however much
HTML arrives. One thread, because this work is Python holding the interpreter's lock: more
threads would not do it sooner, and each would take the lock from the loop for longer. What
waits is bounded as the decoding queue is, so that a flood is refused (`QueueFull`: 503 and
Retry-After), not held in memory.

Knows nothing of HTTP: the work is a plain function."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

from nmt_cli.serving.batcher import QueueFull

T = TypeVar("T")


class TextLane:
    """Runs `submit`ted work one at a time, in order; at most `max_texts` texts and `max_tags`
    HTML tags in the work taken and not yet done."""

    def __init__(self, max_texts: int, max_tags: int) -> None:
        self.max_texts = max_texts
        self.max_tags = max_tags
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="nmt-texts")
        self._lock = threading.Lock()
        self._texts = 0  # under _lock
        self._tags = 0  # under _lock

    def submit(self, texts: int, tags: int, work: Callable[[], T]) -> Future[T]:
        """`work` queued, counting `texts` and `tags` until it is done (or cancelled before it
        ran); QueueFull when they would take what waits past the bounds."""
        with self._lock:
            if self._texts + texts > self.max_texts or self._tags + tags > self.max_tags:
                raise QueueFull(
                    f"{self._texts} texts with {self._tags} HTML tags are being read "
                    f"(at most {self.max_texts} and {self.max_tags})"
                )
            self._texts += texts
            self._tags += tags

        def counted() -> T:
            try:
                return work()
            finally:  # before the future is done: whoever has its result finds the room free
                self._release(texts, tags)

        def if_cancelled(done: Future[T]) -> None:  # never ran: counted() released nothing
            if done.cancelled():
                self._release(texts, tags)

        future = self._executor.submit(counted)
        future.add_done_callback(if_cancelled)
        return future

    def _release(self, texts: int, tags: int) -> None:
        with self._lock:
            self._texts -= texts
            self._tags -= tags

    def close(self) -> None:
        """Finish the work taken (uvicorn has answered every request by now) and stop the thread."""
        self._executor.shutdown(wait=True)
