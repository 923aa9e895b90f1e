"""Stopping training cleanly on a signal: the first SIGINT or SIGTERM asks the loop to finish the
current update, save and exit; a second Ctrl-C stops at once."""

from __future__ import annotations

import signal
from typing import Any


class StopSignal:
    """SIGINT/SIGTERM ask the loop to finish the current update, save and exit."""

    def __init__(self) -> None:
        self.received: str | None = None
        self._previous: dict[int, Any] = {}  # whatever signal.signal returned

    def __enter__(self) -> StopSignal:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, _frame: object) -> None:
        if self.received is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt  # a second Ctrl-C: stop now
        self.received = signal.Signals(signum).name

    def __exit__(self, *_exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
