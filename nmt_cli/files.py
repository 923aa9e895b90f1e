"""Small file-system helpers shared by every writer of files: atomic replacement and the
cleanup of what a killed writer left."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any


def temporary_name(path: Path) -> Path:
    """The hidden file beside `path` that a writer fills before renaming it: `.NAME.tmp-PID`."""
    return path.with_name(f".{path.name}.tmp-{os.getpid()}")


@contextlib.contextmanager
def atomic_write(path: Path, binary: bool = False, durable: bool = False) -> Iterator[IO[Any]]:
    """Open a temporary file for writing that replaces `path` when the block ends without an
    error, and is removed when it does not: `path` is always the old file or the complete new
    one. `durable` also syncs the file and its directory, so that a power loss keeps it."""
    tmp = temporary_name(path)
    try:
        with open(tmp, "wb") if binary else open(tmp, "w", encoding="utf-8") as stream:
            yield stream
            if durable:
                stream.flush()
                os.fsync(stream.fileno())
        os.replace(tmp, path)
        if durable:
            fsync_directory(path.parent)
    finally:
        # Suppressed: when the parent is not a directory, unlink fails too (ENOTDIR), and that
        # error must not replace the one that got here.
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)


def replace_with_link(source: Path, target: Path) -> None:
    """Make `target` the same file as `source` (a hard link) without a moment where `target` is
    missing: the link is made under `.NAME.link-PID`, then renamed."""
    tmp = target.with_name(f".{target.name}.link-{os.getpid()}")
    tmp.unlink(missing_ok=True)
    os.link(source, tmp)
    os.replace(tmp, target)


def fsync_directory(directory: Path) -> None:
    """Make a rename inside `directory` survive a power loss."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def process_alive(pid: int) -> bool:
    """Whether a process still runs: a temporary file whose writer is gone is a leftover."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, under another user
    return True
