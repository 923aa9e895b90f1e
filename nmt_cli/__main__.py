"""The `nmt` script and `python -m nmt_cli`."""

import os
import sys

from nmt_cli.cli.main import main
from nmt_cli.cli.session import Globals


def console() -> None:
    """main(), then, after a translation, an exit that skips the interpreter's teardown, where
    unloading torch costs about 0.45 s: a quarter of a short translation's wall time. The
    output is complete by then; only the standard streams need a flush. A command stopped at
    once (`nmt serve`'s second Ctrl-C) ends so too, with its exit code: threads of its own may
    still be decoding, and the teardown would abort in torch or wait for them."""
    code = 0
    try:
        main()
    except SystemExit as exc:
        fast = Globals.fast_exit and exc.code in (0, None)
        if not (fast or (Globals.exit_at_once and isinstance(exc.code, int))):
            raise
        code = exc.code if isinstance(exc.code, int) else 0
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


if __name__ == "__main__":
    console()
