"""Small file-system helpers shared by every writer of files: where an output may go, atomic
replacement, and the cleanup of what a killed writer left."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import stat
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from nmt_cli.errors import InputError, NmtError, RunFailure

# The directory lock lives in nmt_cli.locking; commands/train.py still imports it from here.
from nmt_cli.locking import locked_directory as locked_directory

NAME_MAX = 255  # bytes in one file name, on Linux's and macOS's file systems alike


def temporary_name(path: Path) -> Path:
    """The hidden file beside `path` that a writer fills before renaming it: `.NAME.tmp-PID`."""
    return path.with_name(hidden_name(path.name, f".tmp-{os.getpid()}"))


def hidden_name(name: str, suffix: str, spare: int = 0) -> str:
    """`.NAME` + `suffix`, the name of a writer's temporary beside NAME, in at most NAME_MAX
    bytes with `spare` bytes left over (for mkdtemp's random letters)."""
    return fitted_name(".", name, suffix, spare)


def partial_path(target: Path) -> Path:
    """TARGET.partial, where `nmt translate -o TARGET` writes (and keeps, when stopped) its lines."""
    return target.with_name(fitted_name("", target.name, ".partial"))


def fitted_name(prefix: str, name: str, suffix: str, spare: int = 0) -> str:
    """`prefix` + NAME + `suffix` in at most NAME_MAX bytes with `spare` left over. A legal NAME
    near the limit would make it too long: NAME is then cut, and a hash of the whole of it keeps
    two names that share their beginning apart."""
    whole = f"{prefix}{name}{suffix}"
    if len(os.fsencode(whole)) + spare <= NAME_MAX:
        return whole
    raw = os.fsencode(name)
    tail = f"~{hashlib.sha256(raw).hexdigest()[:12]}{suffix}"
    room = NAME_MAX - spare - len(os.fsencode(prefix)) - len(os.fsencode(tail))
    # Cut at a character's boundary: half a UTF-8 character is a name some file systems refuse.
    return f"{prefix}{raw[:room].decode('utf-8', 'ignore') if _utf8(raw) else os.fsdecode(raw[:room])}{tail}"


def _utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False  # a name of other bytes (os.fsdecode's escapes) is cut as bytes
    return True


def write_failure(err: OSError, where: str, option: str | None = None) -> NmtError:
    """One line for an output the system would not write: `where` names it ("--output x.pt"),
    then the reason and a hint that fits it; `option`, the option that chooses another place.
    As `translate -o`: exit 2 where the output itself is at fault (permissions, a read-only file
    system, a name too long), 1 where the run failed while writing (a full disk, an I/O error)."""
    reason = err.strerror or str(err)
    elsewhere = f" or choose another {option}" if option else ""
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        return RunFailure(f"{where}: cannot write ({reason}); free some disk space{elsewhere}")
    if err.errno in (errno.EACCES, errno.EPERM):
        return InputError(
            f"{where}: cannot write ({reason}); check the permissions of its directory{elsewhere}"
        )
    if err.errno in (errno.EROFS, errno.ENAMETOOLONG):
        fix = f"choose another {option}" if option else "write elsewhere"
        return InputError(f"{where}: cannot write ({reason}); {fix}")
    return RunFailure(f"{where}: cannot write ({reason}); check the disk{elsewhere}")


HELD_DESCRIPTORS: set[int] = set()
"""Standard descriptors that were closed when the process started, now held by /dev/null
(`hold_closed_standard_descriptors`): no output may be written through them."""


def hold_closed_standard_descriptors() -> set[int]:
    """Put /dev/null on each of descriptors 0-2 that is closed, so that no file opened later takes
    its number (a library's writes to it would land in that file); returns those descriptors."""
    held, opened = set(), os.open(os.devnull, os.O_RDWR)
    while opened <= 2:  # each open takes the lowest free descriptor: the closed ones first
        held.add(opened)
        opened = os.open(os.devnull, os.O_RDWR)
    os.close(opened)
    HELD_DESCRIPTORS.update(held)
    return held


def output_target(path: Path, name: str) -> tuple[Path, bool]:
    """Where an output the user named goes (`name` is the option, for errors): (the file to
    replace atomically, False), or (the path, True) for a stream (a FIFO, a character device
    such as /dev/null or a terminal, or one of this process's descriptors such as /dev/stdout),
    which is written in place and never replaced (`open_in_place`). A symlink is written
    through: its target is replaced, the link stays. A directory, a block device or a socket is
    refused: only what is or will be a regular file is ever replaced."""
    descriptor = own_descriptor(path)
    if descriptor is not None:
        # /dev/stdout leads to the file the shell redirected to: replacing that file would undo
        # the redirection (`>> log` would lose the log), and a pipe has no path to replace.
        try:
            flags = fcntl.fcntl(descriptor, fcntl.F_GETFL)
        except (OSError, OverflowError):
            raise InputError(f"{name} {path}: descriptor {descriptor} is not open") from None
        if descriptor in HELD_DESCRIPTORS:
            raise InputError(
                f"{name} {path}: descriptor {descriptor} was closed when nmt started; leave it open, "
                "or give a file name"
            )
        if flags & os.O_ACCMODE == os.O_RDONLY:  # /dev/stdin of a pipe: nothing could be written
            raise InputError(
                f"{name} {path}: descriptor {descriptor} is open for reading only; give a file name"
            )
        return path, True
    real = Path(os.path.realpath(path))  # follows every link; a missing file's path as it would be
    try:
        mode = os.stat(real).st_mode
    except FileNotFoundError:
        if not real.parent.is_dir():
            raise InputError(f"{name} {path}: directory {real.parent} does not exist") from None
        return real, False
    except OSError as err:
        raise InputError(f"{name} {path}: {err.strerror or err}") from None
    if stat.S_ISREG(mode):
        return real, False
    if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
        return real, True
    kind = "a directory" if stat.S_ISDIR(mode) else "a block device" if stat.S_ISBLK(mode) else "a socket"
    raise InputError(f"{name} {path}: is {kind}, not a file; give a file name")


OWN_DESCRIPTORS = ("/dev/fd", "/proc/self/fd", "/proc/thread-self/fd")
MAX_LINKS = 40  # as many as the kernel follows in one path


def own_descriptor(path: Path) -> int | None:
    """The descriptor of this process that `path` names, directly or through links
    (/dev/stdout, /dev/fd/N, /proc/self/fd/N), or None."""
    here = os.path.abspath(path)
    for _ in range(MAX_LINKS):
        parent, _, leaf = here.rpartition("/")
        if parent in (*OWN_DESCRIPTORS, f"/proc/{os.getpid()}/fd") and leaf.isascii() and leaf.isdecimal():
            return int(leaf)
        if not os.path.islink(here):
            return None
        here = os.path.abspath(os.path.join(os.path.dirname(here), os.readlink(here)))
    return None


def open_in_place(target: Path, binary: bool = False) -> IO[Any]:
    """Open a stream output (`output_target`'s second case): one of this process's descriptors
    through a copy of it, keeping the shell's redirection (`>>` appends, a pipe stays a pipe);
    a FIFO or a device by its path."""
    descriptor = own_descriptor(target)
    if descriptor is not None:
        return (
            os.fdopen(os.dup(descriptor), "wb")
            if binary
            else os.fdopen(os.dup(descriptor), "w", encoding="utf-8")
        )
    return open(target, "wb") if binary else open(target, "w", encoding="utf-8")


def to_terminal(output_path: Path | None) -> bool:
    """Whether an output (stdout where None) is a terminal, which a progress bar would cut through."""
    if output_path is None:
        return sys.stdout.isatty()
    descriptor = own_descriptor(output_path)
    if descriptor is not None:
        return os.isatty(descriptor)
    return os.path.realpath(output_path) == "/dev/tty"


def line_count(input_path: Path) -> int | None:
    """The lines of an input file (for a progress bar's total), in a pass at disk speed; None for
    what is not a regular file (a pipe can be read once only)."""
    if not input_path.is_file():
        return None
    lines, last = 0, b"\n"
    with input_path.open("rb") as counted:
        for chunk in iter(lambda: counted.read(1 << 20), b""):
            lines, last = lines + chunk.count(b"\n"), chunk[-1:]
    return lines + (last != b"\n")  # a last line without its newline is a line too


def not_an_input(output: Path, inputs: Iterable[Path], name: str) -> None:
    """Refuse an output that is one of the command's inputs, the same file however it is named
    (links included): writing it would replace what the command reads. Streams (/dev/null, a
    FIFO) may be both."""
    try:
        out = os.stat(output)
    except OSError:
        return  # a file to be made is nobody's input
    if not stat.S_ISREG(out.st_mode):
        return
    for path in inputs:
        try:
            same = os.stat(path)
        except OSError:
            continue
        if (same.st_dev, same.st_ino) == (out.st_dev, out.st_ino):
            shown = "" if str(path) == str(output) else f" (as {path})"
            raise InputError(f"{name} {output}: is an input of this command{shown}; write to another file")


@contextlib.contextmanager
def output_file(path: Path, name: str, binary: bool = False, durable: bool = False) -> Iterator[IO[Any]]:
    """Write an output the user named, as `output_target` says: a file atomically (the old one
    stays until the new one is complete), a stream in place."""
    target, stream = output_target(path, name)
    if not stream:
        with atomic_write(target, binary, durable) as handle:
            yield handle
        return
    with open_in_place(target, binary) as handle:
        yield handle


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
    tmp = target.with_name(hidden_name(target.name, f".link-{os.getpid()}"))
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
