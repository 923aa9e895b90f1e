"""Where `nmt translate` writes its lines: to stdout; to a stream (a FIFO, a character device) in
place; or to a file by way of TARGET.partial, one flushed buffer at a time, renamed to TARGET at the
end. A run that stops keeps the buffers it finished in TARGET.partial, and its error says how many
input lines they cover."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable
from pathlib import Path

from nmt_cli.errors import InputError, NmtError, RunFailure, describe
from nmt_cli.files import fsync_directory, open_in_place, partial_path

Write = Callable[..., None]
"""A writer of translations with its input and settings bound: (output stream, flushed callback)."""


def write_lines(write: Write, output_path: Path | None, destination: tuple[Path, bool] | None) -> None:
    """`write` to stdout where there is no --output, else to `output_target`'s `destination`."""
    if output_path is None or destination is None:
        write(sys.stdout)
    elif destination[1]:  # a FIFO or a device: written in place, as stdout would be
        _translate_to_stream(write, output_path, destination[0])
    else:
        _translate_to_file(write, output_path, destination[0])


def partial_not_in_the_way(output_path: Path, target: Path) -> None:
    """Refuse, before the model is loaded, to start where TARGET.partial already is: most likely
    the lines an earlier run kept when it stopped, never overwritten."""
    partial = partial_path(target)
    if partial.is_symlink() or partial.exists():
        raise InputError(
            f"--output {output_path}: {partial} is in the way (lines an earlier run kept?); move it"
        )


def _translate_to_stream(write: Write, output_path: Path, target: Path) -> None:
    """Write to a FIFO or a character device in place, buffer by buffer; a write error (/dev/full)
    is a failure that says how many lines went out."""
    done = 0

    def flushed(lines: int) -> None:
        nonlocal done
        done = lines

    try:
        with open_in_place(target) as out:
            write(out, flushed)
    except OSError as err:
        raise RunFailure(
            f"--output {output_path}: cannot write ({err.strerror or err}); stopped after {done:,} lines"
        ) from None


def _translate_to_file(write: Write, output_path: Path, target: Path) -> None:
    """Write to TARGET.partial, one flushed buffer at a time, and rename it to TARGET at the end
    (TARGET is OUTPUT, or the file a link named OUTPUT points to: the link stays).

    TARGET itself is never touched before the run succeeds. On any failure, Ctrl-C included, the
    buffers finished so far stay in TARGET.partial (cut back to the last complete buffer) and the
    error says how many input lines they cover, so that hours of work are not thrown away.
    """
    partial = partial_path(target)
    partial_not_in_the_way(output_path, target)  # again: another run may have made one since
    done = 0  # input lines whose output is written and flushed to `partial`
    size = 0  # the length of `partial` at that point
    try:
        out = partial.open("x", encoding="utf-8")
    except OSError as err:
        raise InputError(f"--output {output_path}: cannot write {partial} ({err.strerror or err})") from None

    def flushed(lines: int) -> None:
        nonlocal done, size
        done, size = lines, os.fstat(out.fileno()).st_size

    try:
        write(out, flushed)
        out.flush()
        os.fsync(out.fileno())  # the renamed file must hold its lines after a power loss too
        out.close()
        os.replace(partial, target)
        fsync_directory(target.parent)
    except BaseException as err:
        # Closing flushes whatever part of an unfinished buffer was pending; cutting the file back
        # leaves only complete buffers, so that it holds exactly the lines the error counts. Both
        # are suppressed: a full disk fails them too, and that must not replace the error itself.
        with contextlib.suppress(OSError):
            out.close()
        with contextlib.suppress(OSError):
            os.truncate(partial, size)
        if done == 0:  # nothing worth keeping
            with contextlib.suppress(OSError):
                partial.unlink()
        stopped = _stopped(err, output_path, partial, done)
        if stopped is None:
            raise
        raise stopped from err


def _stopped(err: BaseException, output_path: Path, partial: Path, done: int) -> NmtError | None:
    """The one-line error for `err` that also says what `partial` keeps, with the exit code the
    same error gets without a partial file; None: re-raise `err` as it is."""
    kept = f"after {done:,} lines; they are in {partial}" if done else "before the first line was written"
    where = f"--output {output_path}"
    if isinstance(err, OSError):  # writing the output failed: a full disk, a failing device
        return RunFailure(f"{where}: cannot write ({err.strerror or err}); stopped {kept}")
    described = describe(err)
    if described is None:
        return None
    message, code = described
    return NmtError(f"{message}; {where}: stopped {kept}", exit_code=code)
