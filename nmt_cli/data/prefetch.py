"""Work done ahead in a background thread: while the device trains on one update's batches, the
next ones are gathered from the corpus, padded and (for a GPU) put in pinned memory, from which
they are copied without the host waiting."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from types import TracebackType
from typing import Generic, TypeVar

T = TypeVar("T")

_DONE = object()


class Ahead(Generic[T]):
    """Iterate over `items` up to `depth` items ahead, in a daemon thread. An exception raised
    by `items` is raised again where the item it replaced would have been taken. Use as a context
    manager: leaving it stops the thread, also when iteration stops early."""

    def __init__(self, items: Iterator[T], depth: int = 2) -> None:
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._fill, args=(items,), name="nmt-prefetch", daemon=True)
        self._thread.start()

    def _fill(self, items: Iterator[T]) -> None:
        try:
            for item in items:
                if not self._put(item):
                    return
        except BaseException as exc:  # handed to the consumer, which raises it
            self._put(exc)
            return
        self._put(_DONE)

    def _put(self, item: object) -> bool:
        """Queue `item` unless the consumer has gone; whether it was queued."""
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def __iter__(self) -> Iterator[T]:
        while True:
            item = self._queue.get()
            if item is _DONE:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    def close(self) -> None:
        self._stop.set()
        self._thread.join()

    def __enter__(self) -> Ahead[T]:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
