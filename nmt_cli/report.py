"""What long-running commands tell the user: progress bars, messages and tables on stderr,
and the machine-readable metrics.jsonl of a training run.

Progress bars show on a terminal. Where stderr is not one (a log file, a pipe, CI, nohup), a bar
becomes a plain line at most every PROGRESS_LINE_SECONDS, and training writes one line per log
interval instead (`training.bookkeeping`), as fairseq and Marian do. --quiet silences both;
messages and warnings are silent only with --quiet.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Iterable, Iterator
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from tqdm import tqdm

from nmt_cli.errors import RunFailure
from nmt_cli.files import atomic_write

if TYPE_CHECKING:
    from rich.console import Console

T = TypeVar("T")
PROGRESS_LINE_SECONDS = 30.0
"""Where stderr is no terminal, a bar's line comes at most this often: work shorter than this
says nothing more than its own messages."""


class Bar(Protocol):
    """What commands do with a progress bar: tqdm's, or its stand-in `ProgressLines`."""

    def update(self, n: float = 1) -> Any: ...

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> Any: ...

    def close(self) -> None: ...

    def __enter__(self) -> Any: ...

    def __exit__(self, *exc: object) -> Any: ...


class Reporter:
    def __init__(self, quiet: bool = False, line_seconds: float | None = None) -> None:
        self.quiet = quiet
        self.bars_enabled = not quiet and sys.stderr.isatty()
        self.lines_enabled = not quiet and not self.bars_enabled
        """Progress as plain lines: stderr is not a terminal (a log, a pipe), and not --quiet."""
        self.line_seconds = PROGRESS_LINE_SECONDS if line_seconds is None else line_seconds

    @cached_property
    def console(self) -> Console:
        """rich's console, made on the first message: importing rich takes 0.1 s, which a command
        that says nothing (--quiet) should not spend before its first line."""
        from rich.console import Console

        return Console(stderr=True, highlight=False, soft_wrap=True)

    def progress(
        self, items: Iterable[T], desc: str, total: int | None = None, unit: str = "it"
    ) -> Iterator[T]:
        """Iterate with a progress bar on stderr (when enabled; lines where it is no terminal)."""
        if not self.lines_enabled:
            yield from self._tqdm(iterable=items, desc=desc, total=total, unit=unit)
            return
        lines = ProgressLines(self, desc, total, unit)
        for item in items:
            yield item
            lines.update(1)

    def bar(
        self, desc: str, total: int | None = None, unit: str = "it", initial: int = 0, lines: bool = True
    ) -> Bar:
        """A manually advanced bar (`bar.update(n)`, `bar.set_postfix_str(...)`, `bar.close()`);
        lines where stderr is no terminal, unless `lines` is False (the caller writes its own)."""
        if self.lines_enabled and lines:
            return ProgressLines(self, desc, total, unit, initial)
        return self._tqdm(desc=desc, total=total, unit=unit, initial=initial)

    def _tqdm(self, **settings: Any) -> tqdm:
        # Off when not a TTY or --quiet; stderr, so that stdout stays the command's output.
        return tqdm(
            disable=not self.bars_enabled, file=sys.stderr, dynamic_ncols=True, leave=False, **settings
        )

    def info(self, message: str) -> None:
        if not self.quiet:
            self.console.print(message, markup=False)

    def warn(self, message: str) -> None:
        if not self.quiet:
            self.console.print(f"warning: {message}", markup=False, style="yellow")

    def table(self, title: str, columns: list[str], rows: list[list[object]]) -> None:
        if self.quiet:
            return
        from rich.table import Table

        table = Table(title=title, title_justify="left")
        for i, column in enumerate(columns):
            table.add_column(column, justify="left" if i == 0 else "right")
        for row in rows:
            table.add_row(*(_fmt(v) for v in row))
        self.console.print(table)


class ProgressLines:
    """A progress bar as plain lines, for a stderr that is no terminal: at most one every
    `reporter.line_seconds` (done, of how many, the rate, the time left), so that a log shows long
    work moving; none for shorter work."""

    def __init__(self, reporter: Reporter, desc: str, total: int | None, unit: str, initial: int = 0) -> None:
        self.reporter, self.desc, self.total, self.unit = reporter, desc, total, unit.strip()
        self.n, self.postfix = initial, ""
        self.start = self.last = time.monotonic()
        self.initial = initial

    def update(self, n: float = 1) -> None:
        self.n += int(n)
        now = time.monotonic()
        if now - self.last >= self.reporter.line_seconds:
            self.last = now
            self.reporter.info(self.line(now - self.start))

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> None:
        self.postfix = s

    def close(self) -> None:
        pass

    def __enter__(self) -> ProgressLines:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def line(self, elapsed: float) -> str:
        rate = (self.n - self.initial) / max(elapsed, 1e-9)
        done = f"{self.n:,} {self.unit}"
        left = ""
        if self.total:
            done = f"{self.n:,}/{self.total:,} {self.unit} ({100 * self.n / self.total:.0f}%)"
            if rate > 0:
                left = f", {duration((self.total - self.n) / rate)} left"
        extra = f", {self.postfix}" if self.postfix else ""
        return f"{self.desc}: {done}, {rate:,.1f} {self.unit}/s, {duration(elapsed)} so far{left}{extra}"


def duration(seconds: float) -> str:
    """A span as a log line writes it: 45s, 12m05s, 3h07m."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:,.4g}" if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


class MetricsLog:
    """Appends one JSON object per line; each line is flushed so a running job can be plotted."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, record: dict) -> None:
        try:
            with self.path.open("a", encoding="utf-8") as f:
                f.write(json.dumps(record, sort_keys=False) + "\n")
        except OSError as err:  # a full disk: say which file, and that the run can go on later
            raise RunFailure(
                f"cannot write {self.path} ({err.strerror or err}); the last checkpoint is kept: make room, "
                "then run the same command to resume"
            ) from None

    def keep_until(self, update: int, place: tuple[int, int]) -> None:
        """Drop the records of updates after `update` (and a line cut short): what a killed
        session wrote past its last checkpoint, which the resumed run writes again. Skipped
        updates leave the count at `update`: those read past the checkpoint's (epoch, batch)
        `place` in the data are redone too."""
        if not self.path.is_file():
            return
        lines = self.path.read_bytes().splitlines(keepends=True)
        kept = [line for line in lines if _update_of(line) < update or _kept_at(line, update, place)]
        if kept != lines:
            with atomic_write(self.path, binary=True) as stream:
                stream.writelines(kept)

    def read(self) -> list[dict]:
        if not self.path.exists():
            return []
        records = []
        for line in self.path.read_bytes().splitlines():
            try:
                records.append(json.loads(line))
            except (json.JSONDecodeError, UnicodeDecodeError):
                continue  # a line cut short by a killed run, or damaged
        return records


def _kept_at(line: bytes, update: int, place: tuple[int, int]) -> bool:
    """Whether a record of `line` is one of update `update` or earlier that a run resumed at
    `update` and data `place` does not write again."""
    if _update_of(line) != update:
        return False
    record = json.loads(line)
    if (
        record.get("type") != "skip"
        or not isinstance(record.get("epoch"), int)
        or not isinstance(record.get("batch"), int)
    ):
        return True  # records written before skips carried their place are kept, as they were
    return (record["epoch"], record["batch"]) <= place


def _update_of(line: bytes) -> float:
    """A metrics record's update (0 where it names none), or infinity for a line that is no record."""
    try:
        record = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return math.inf
    if not line.endswith(b"\n") or not isinstance(record, dict):
        return math.inf
    update = record.get("update", 0)
    return update if isinstance(update, int | float) else 0
