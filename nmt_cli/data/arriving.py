"""Input lines as they arrive: a background thread reads, so that a pipe that sends one line and
waits gets that line translated before EOF, while a file is taken a buffer at a time."""

from __future__ import annotations

import os
import queue
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from nmt_cli.data.text import decode_line
from nmt_cli.errors import RunFailure


def _is_text(raw: bytes) -> bool:
    if b"\x00" in raw:
        return False
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def stdin_bytes() -> BinaryIO:
    """Standard input as a stream of its own, over a duplicate descriptor. The thread that reads it
    is still blocked in a read when a signal ends the command, holding the stream's lock; were that
    sys.stdin, the interpreter's shutdown would wait for the lock and abort (SIGABRT instead of
    130/143). Left open: closing it would wait for that lock too; the process ends soon after."""
    try:
        return os.fdopen(os.dup(sys.stdin.fileno()), "rb")
    except (AttributeError, OSError, ValueError):  # not a real descriptor (tests, embedded use)
        return sys.stdin.buffer


def arriving_lines(
    source: BinaryIO, name: str, buffer_size: int, warn: Callable[[str], None] | None = None
) -> Iterator[list[str]]:
    """Lists of decoded lines: whatever has arrived (at least one line), at most buffer_size.
    `warn` hears of the first line with a NUL byte or invalid UTF-8, once."""
    lines: queue.Queue = queue.Queue(maxsize=4 * buffer_size)
    end = object()
    failed: list[BaseException] = []  # a read error, raised once the lines read before it are done

    def read() -> None:
        try:
            for raw in iter(source.readline, b""):
                lines.put(raw)
        except BaseException as err:  # MemoryError too: never taken for the end of the input
            failed.append(err)
        finally:
            lines.put(end)

    threading.Thread(target=read, daemon=True).start()
    number = 0
    while True:
        item = lines.get()
        if item is end:
            if failed and isinstance(failed[0], OSError):
                err = failed[0]
                raise RunFailure(f"{name}: reading failed after line {number:,} ({err.strerror or err})")
            if failed:
                raise failed[0]
            return
        batch = [item]
        while len(batch) < buffer_size:
            try:
                item = lines.get_nowait()
            except queue.Empty:
                break
            if item is end:
                lines.put(end)
                break
            batch.append(item)
        decoded = []
        for raw in batch:
            number += 1
            if warn is not None and not _is_text(raw):
                warn(
                    f"{name}:{number}: not UTF-8 text (a NUL byte or invalid UTF-8), translated with "
                    "spaces and U+FFFD in its place; is this a binary or UTF-16 file?"
                )
                warn = None  # once: a binary file would repeat it on every line
            # Translation must survive any bytes: bad UTF-8 is replaced and NUL becomes a space.
            decoded.append(decode_line(raw.replace(b"\x00", b" "), name, number, errors="replace"))
        yield decoded


def first_lines(source: BinaryIO, path: Path | None, most: int) -> list[str]:
    """The first lines of the input, left to be read: of a file (`path`), `most` at most; of a
    pipe, the whole lines that have arrived, without waiting for more."""
    if path is not None and path.is_file():
        with path.open("rb") as again:
            raw = [line for _, line in zip(range(most), again, strict=False)]
    else:
        peek = getattr(source, "peek", None)
        arrived = peek(1 << 16) if peek is not None else b""
        raw = arrived.splitlines(keepends=True)
        if raw and not raw[-1].endswith(b"\n") and len(raw) > 1:  # a line still arriving
            raw.pop()
    return [line.decode("utf-8", "replace") for line in raw]


def whole_text(source: BinaryIO) -> str:
    """All of the input as one text: bad UTF-8 replaced, a NUL as a space, a BOM at the start dropped."""
    return source.read().decode("utf-8", "replace").replace("\x00", " ").removeprefix("\ufeff")
