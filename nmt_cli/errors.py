"""Errors that reach the user as one line.

Library code raises these with "what, where, what to do"; only the command line prints
them and turns them into exit codes, through `describe`.
"""

from __future__ import annotations

import reprlib
from collections.abc import Callable


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


class SettingError(InputError, ValueError):
    """A setting out of range, or in conflict with another (exit 2). It carries the setting's
    name as the Python API and HTTP requests spell it (`max_len_a`), the value given and the
    problem, so that each front end words it in its own terms: `--max-len-a inf: ...` on the
    command line, `max_len_a=inf: ...` from Python (the message of the exception itself), and
    `max_len_a: ...` over HTTP. Other settings named in `problem` are written `{name}`."""

    def __init__(self, name: str, value: object, problem: str) -> None:
        self.name, self.value, self.problem = name, value, problem
        super().__init__(f"{name}={_SHORT.repr(value)}: {self._problem(str)}")

    def as_option(self) -> str:
        """As the command line words it: settings are --flags (an on/off flag given alone)."""
        given = "" if self.value is True else f" {self.value}"
        return f"{_flag(self.name)}{given}: {self._problem(_flag)}"

    def as_field(self) -> str:
        """As an HTTP error names it: the JSON field, then the problem."""
        return f"{self.name}: {self._problem(str)}"

    def _problem(self, spell: Callable[[str], str]) -> str:
        return self.problem.format_map(_Names(spell))


def literal(text: str) -> str:
    """`text` (a user's term, a path) as it must be written into a SettingError's problem, whose
    `{name}` marks name settings: braces doubled, so that they come out as written."""
    return text.replace("{", "{{").replace("}", "}}")


class _Names(dict[str, str]):
    def __init__(self, spell: Callable[[str], str]) -> None:
        super().__init__()
        self.spell = spell

    def __missing__(self, key: str) -> str:
        return self.spell(key)


def _short_repr() -> reprlib.Repr:
    """repr() cut to a line's worth: a value such as a glossary of thousands of entries is shown
    by its first few."""
    short = reprlib.Repr()
    short.maxstring = short.maxother = short.maxlong = 80
    short.maxdict = short.maxlist = short.maxtuple = short.maxset = 4
    return short


_SHORT = _short_repr()


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


class RunFailure(NmtError):
    """A failure while doing valid work: disk full, diverged training (exit 1)."""

    exit_code = 1


class Terminated(BaseException):
    """SIGTERM, raised in the main thread so that a command can finish its cleanup and say what
    it kept (exit 143, as a process ended by SIGTERM reports)."""


STOPS_TAKEN: list[int] = []
"""The stop signals (SIGINT, SIGTERM) that nmt's own handlers took, in order: `cli.main` passes
those of a command on to the handlers of the program that runs it (a test runner, a service)."""


def describe(exc: BaseException) -> tuple[str, int] | None:
    """The one line and the exit code for an error that ends a command; None for what is not a
    failure (SystemExit and the like)."""
    if isinstance(exc, NmtError):
        return str(exc), exc.exit_code
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted", 130
    if isinstance(exc, Terminated):
        return "terminated by SIGTERM", 143
    if isinstance(exc, MemoryError) or _torch_out_of_memory(exc):
        return "out of memory; use smaller batches (--batch-tokens, train.max_tokens) or a smaller model", 1
    if isinstance(exc, OSError):
        where = f" ({exc.filename})" if exc.filename else ""
        return f"{exc.strerror or exc}{where}", 1
    if isinstance(exc, Exception):
        if (stop := stop_within(exc)) is not None:
            return describe(stop)
        return f"internal error: {type(exc).__name__}: {exc} (run with --debug for the traceback)", 1
    return None


def stop_within(exc: BaseException) -> BaseException | None:
    """Ctrl-C or SIGTERM that a library wrapped in an error of its own (Python's class creation
    during an import: "Error calling __set_name__"; an extension's "initialization failed"): the
    stop is what ended the command."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt | Terminated):
            return cause
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return None


def optional_import_failure(
    err: ImportError, missing: str, package: str, modules: tuple[str, ...] = ()
) -> BaseException:
    """The error for an optional package that did not import. `missing` is the line for a package
    that is not installed (what needs it and the pip command); `modules` are the modules whose
    absence that line describes (`package` itself when none are given). An installed
    package that fails to import (a dependency missing, or at a version it cannot use) is not
    called missing: its ImportError is the real cause, and installing the extra again would not
    change it. Ctrl-C or SIGTERM during the import (an extension's "initialization failed") is
    the stop."""
    if (stop := stop_within(err)) is not None:
        return stop
    if isinstance(err, ModuleNotFoundError) and err.name in (modules or (package,)):
        return InputError(missing)
    cause = " ".join(str(err).split())
    return InputError(
        f"{package} is installed but does not import: {cause}; `pip check` names versions that do not "
        "work together, and `pip install --force-reinstall NAME` mends the package named"
    )


def _torch_out_of_memory(exc: BaseException) -> bool:
    """torch's allocators raise RuntimeErrors, not MemoryError: torch.OutOfMemoryError on a GPU,
    a plain one from the CPU allocator (a recipe's model or batch larger than the memory). Told
    by name and words, so that this module needs no torch."""
    return isinstance(exc, RuntimeError) and (
        type(exc).__name__ == "OutOfMemoryError" or "DefaultCPUAllocator: can't allocate memory" in str(exc)
    )
