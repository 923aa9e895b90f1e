"""One process at a time in an output directory: an advisory lock that the kernel releases
however the process ends, so that a killed run can be resumed."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from nmt_cli.errors import InputError


@contextlib.contextmanager
def locked_directory(directory: Path, name: str) -> Iterator[None]:
    """Hold `directory`'s lock (DIR/.lock, an advisory flock) for the block, so that two processes
    never work in one directory at once. The kernel releases it when the process ends, however it
    ends, so a killed run can be resumed; the file is removed on the way out. The directory is made
    if missing, and removed again if nothing was written into it. `name` is
    the option, for errors."""
    if directory.exists() and not directory.is_dir():
        raise InputError(f"{name} {directory}: exists and is not a directory")
    not_the_working_directory(directory, name)
    made = not directory.exists()
    lock = directory / ".lock"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd = _lock(lock)
    except BlockingIOError:
        raise InputError(
            f"{name} {directory}: another process is working in it; wait for it to finish, or choose "
            "another directory"
        ) from None
    except OSError as err:
        raise InputError(f"{name} {directory}: cannot use it ({err.strerror or err})") from None
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            lock.unlink()  # while still held: whoever opened it meanwhile sees it is gone (_lock)
            if made and not any(directory.iterdir()):
                directory.rmdir()
        os.close(fd)


def not_the_working_directory(directory: Path, name: str) -> None:
    """An output directory must be named: an empty --out would be the working directory."""
    if directory.resolve() == Path.cwd().resolve():
        raise InputError(f"{name} {str(directory)!r}: the working directory; name a directory of its own")


def _lock(path: Path) -> int:
    """An open descriptor of `path` holding its exclusive lock; BlockingIOError if another holds
    it. A file unlinked by its last holder between our open and our lock is not the lock any more:
    then try again on the new one."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if os.fstat(fd).st_ino == os.stat(path).st_ino:
                return fd
        except FileNotFoundError:
            pass
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)
