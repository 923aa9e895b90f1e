"""The `nmt` script and `python -m nmt_cli`."""

import os
import sys

from nmt_cli.cli.main import main
from nmt_cli.cli.session import Globals


def console() -> None:
    """main(), then, after a translation, an exit that skips the interpreter's teardown, where
    unloading torch costs about 0.45 s: a quarter of a short translation's wall time. The
    output is complete by then; only the standard streams need a flush."""
    try:
        main()
    except SystemExit as exc:
        if not (Globals.fast_exit and exc.code in (0, None)):
            raise
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(0)


if __name__ == "__main__":
    console()
