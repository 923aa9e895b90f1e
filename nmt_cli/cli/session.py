"""What one run of the command line shares between its commands' parsers: the global options,
and the moment a command's modules are imported."""

from __future__ import annotations

import gc


class Globals:
    debug = False
    quiet = False
    fast_exit = False  # set by commands whose process has nothing left to do once they return
    exit_at_once = False  # set by a command stopped at once: its exit code, without the teardown


def imported() -> None:
    """Called by each command once its modules (torch among them) are imported: those objects
    live as long as the process, so the garbage collector, off since `cli.main` started, leaves
    them out of its scans from now on (`gc.freeze`; forked decoding workers then share their
    pages instead of copying them) and runs again: scanning torch's objects cost every start
    tens of milliseconds."""
    gc.freeze()
    gc.enable()
