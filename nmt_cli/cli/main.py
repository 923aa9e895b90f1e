"""The entry point of the command line: runs the Typer app, and turns whatever escapes a command
into one line on stderr and an exit code: 2 for bad input or usage (a usage error too, instead of
click's usage box), 1 for runtime failures, 130 when interrupted; a traceback only with --debug.
This is the only place that prints errors.
"""

from __future__ import annotations

import contextlib
import errno
import gc
import io
import signal
import sys
import threading
import traceback
import typing
from collections.abc import Iterator

import typer

from nmt_cli.cli.app import app
from nmt_cli.cli.session import Globals
from nmt_cli.errors import STOPS_TAKEN, NmtError, SettingError, Terminated, describe
from nmt_cli.files import hold_closed_standard_descriptors

try:  # recent Typer releases ship their own copy of click
    from typer._click.exceptions import NoArgsIsHelpError, UsageError
except ImportError:
    from click.exceptions import NoArgsIsHelpError, UsageError  # type: ignore[assignment]


def main(argv: list[str] | None = None) -> None:
    """Console entry point. Everything that escapes a command, a usage error included, becomes
    one line and an exit code here; SIGTERM too (`nmt train` and `nmt serve` stop on it their own
    way while they run)."""
    _standard_streams()
    gc.disable()  # until the command's modules are imported (`session.imported`)
    try:
        with _stop_handlers():
            _run(argv)
    finally:
        gc.unfreeze()  # for a caller that goes on in this process (the tests)
        gc.enable()


@contextlib.contextmanager
def _stop_handlers() -> Iterator[None]:
    """SIGTERM raises Terminated while the command runs (in the main thread), and the handler it
    replaced is put back after. A stop signal that one of nmt's handlers took meanwhile is passed
    on to the handler that the program running `main` had installed itself (a test runner, a
    service), so that the program stops as it would have without nmt. Python's defaults are not
    called: the command line ends with the command's exit code (143, 130)."""
    if not _main_thread():
        yield
        return
    first = len(STOPS_TAKEN)
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    signal.signal(signal.SIGTERM, _terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous[signal.SIGTERM])
        taken = set(STOPS_TAKEN[first:])
        del STOPS_TAKEN[first:]
        for sig, handler in previous.items():
            if sig in taken and callable(handler) and handler is not signal.default_int_handler:
                signal.raise_signal(sig)


def _run(argv: list[str] | None) -> None:
    try:
        code = app(args=argv, prog_name="nmt", standalone_mode=False)
    except NoArgsIsHelpError as err:  # `nmt` alone: the help, as click shows it
        err.show()
        sys.exit(err.exit_code)
    except UsageError as err:
        where = err.ctx.command_path if err.ctx is not None else "nmt"
        _fail(f"{err.format_message()} (see {where} --help)", err.exit_code)
    except BrokenPipeError:
        sys.stderr.close()  # the reader went away (e.g. `| head`); nothing left to say
        sys.exit(1)
    except typer.Abort:  # click's form of Ctrl-C
        _fail(INTERRUPTED, 130)
    except SettingError as err:
        _fail(err.as_option(), err.exit_code)
    except (Exception, KeyboardInterrupt, Terminated) as exc:  # the last defence against a traceback
        message, exit_code = describe(exc) or (str(exc), 1)
        if exit_code in (130, 143) and not isinstance(exc, NmtError):  # no command named what it kept
            message = f"{message}; {WHOLE_OR_NOTHING}"
        _fail(message, exit_code)
    if code == 130:  # Typer's answer to Ctrl-C in a command that does not handle it itself
        _fail(INTERRUPTED, 130)
    if isinstance(code, int) and code != 0:
        sys.exit(code)


WHOLE_OR_NOTHING = "files are written whole or not at all, so no output was left half-written"
INTERRUPTED = f"interrupted; {WHOLE_OR_NOTHING}"


class _ClosedOutput(io.TextIOBase):
    """Standard output that was closed when the process started: writing fails as the closed
    descriptor would, in one line."""

    def write(self, _text: str) -> int:
        raise OSError(errno.EBADF, "standard output is closed (>&-); leave it open, or redirect it to a file")


def _standard_streams() -> None:
    """A process started with a standard descriptor closed (`2>&-`, `<&-`, `>&-`, as some daemons
    and cron jobs run) gets None for its stream: messages would then go to stdout (print's default),
    into the translations. Each closed descriptor is held by /dev/null (`files`): closed stderr
    discards messages, closed stdin reads as empty input, and writing to closed stdout fails in
    one line."""
    try:
        hold_closed_standard_descriptors()
    except OSError:  # no /dev/null (a bare chroot) or no descriptor left: in-memory stand-ins
        pass
    if sys.stderr is None:
        sys.stderr = _opened(2, "w") or io.StringIO()
    if sys.stdin is None:
        sys.stdin = _opened(0, "r") or io.StringIO()
    if sys.stdout is None:
        sys.stdout = _ClosedOutput()


def _opened(fd: int, mode: str) -> typing.TextIO | None:
    try:
        return typing.cast(typing.TextIO, open(fd, mode, encoding="utf-8", closefd=False))  # noqa: SIM115
    except OSError:
        return None


def _terminate(signum: int, _frame: object) -> None:
    STOPS_TAKEN.append(signum)
    raise Terminated


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _fail(message: str, code: int) -> None:
    if Globals.debug:
        traceback.print_exc()
    print(f"nmt: error: {message}", file=sys.stderr)
    sys.exit(code)
