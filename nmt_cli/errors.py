"""Errors that reach the user as one line. Imports nothing.

Library code raises these with "what, where, what to do"; only `cli.py` prints
them and turns them into exit codes, through `describe`.
"""

from __future__ import annotations


class NmtError(Exception):
    """An error the user can act on; `exit_code` is what the process returns."""

    exit_code = 1

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class InputError(NmtError):
    """Bad input from the user: a file, an option, a recipe value (exit 2)."""

    exit_code = 2


class RunFailure(NmtError):
    """A failure while doing valid work: disk full, diverged training (exit 1)."""

    exit_code = 1


def describe(exc: BaseException) -> tuple[str, int] | None:
    """The one line and the exit code for an error that ends a command; None for what is not a
    failure (SystemExit and the like)."""
    if isinstance(exc, NmtError):
        return str(exc), exc.exit_code
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted", 130
    if isinstance(exc, MemoryError):
        return "out of memory; use smaller batches (--batch-tokens, train.max_tokens)", 1
    if isinstance(exc, OSError):
        where = f" ({exc.filename})" if exc.filename else ""
        return f"{exc.strerror or exc}{where}", 1
    if isinstance(exc, Exception):
        return f"internal error: {type(exc).__name__}: {exc} (run with --debug for the traceback)", 1
    return None
