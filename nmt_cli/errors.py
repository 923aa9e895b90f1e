"""Errors that reach the user as one line. Imports nothing.

Library code raises these with "what, where, what to do"; only `cli.py` prints
them and turns them into exit codes.
"""


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
