"""Small file-system helpers shared by the writers of corpora and checkpoints. Imports only os."""

from __future__ import annotations

import os


def process_alive(pid: int) -> bool:
    """Whether a process still runs: a temporary file whose writer is gone is a leftover."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, under another user
    return True
