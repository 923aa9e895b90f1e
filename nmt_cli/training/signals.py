"""Stopping training cleanly on a signal: the first SIGINT or SIGTERM asks the loop to finish the
current update, save and exit; a second Ctrl-C stops at once."""

from __future__ import annotations

import signal
from collections.abc import Callable
from typing import Any

from nmt_cli.errors import STOPS_TAKEN


class StopSignal:
    """SIGINT/SIGTERM ask the loop to finish the current update, save and exit."""

    def __init__(self, tell: Callable[[str], None] | None = None) -> None:
        self.received: str | None = None
        self._tell = tell  # says at once that the signal was heard: a save can take a while
        self._previous: dict[int, Any] = {}  # whatever signal.signal returned

    def __enter__(self) -> StopSignal:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, _frame: object) -> None:
        STOPS_TAKEN.append(signum)
        if self.received is not None:
            if signum == signal.SIGINT:
                raise KeyboardInterrupt  # a second Ctrl-C: stop now
            return  # a repeated SIGTERM: the first signal names the stop, its line and exit code
        self.received = signal.Signals(signum).name
        if self._tell is not None:
            again = " (Ctrl-C again: at once, without it)" if signum == signal.SIGINT else ""
            self._tell(f"{self.received}: stopping after this update with a checkpoint{again}")

    def __exit__(self, *_exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
