"""Decoding in several processes of one thread each, as CTranslate2's inter_threads does.

Decoding runs many small operations per step; one thread a process keeps every core busy with
arithmetic instead of waiting at the barriers of a multi-threaded operation. The processes are
forked from the loaded translator (the weights are shared, copy-on-write, not reloaded); each
call deals its lines out to them by length, round robin, so they finish together, and puts the
answers back in input order.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections.abc import Callable
from typing import Any

import torch

Work = Callable[[list[str], Any], tuple[list[Any], int]]
"""(a part of the lines, the call's settings) -> (one result per line, a count to add up)."""

MIN_LINES_PER_PART = 32

_WORK: Work | None = None  # what a forked worker runs; set in the parent just before the fork


def usable_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def can_fork() -> bool:
    return "fork" in multiprocessing.get_all_start_methods()


class WorkerPool:
    """`workers` forked processes that run `work` on parts of a list of lines."""

    def __init__(self, work: Work, workers: int):
        global _WORK
        _WORK = work
        self.workers = workers
        self._pool = multiprocessing.get_context("fork").Pool(workers, initializer=_start_worker)

    def map(self, lines: list[str], settings: Any) -> tuple[list[Any], int]:
        """`work` over all lines, split among the workers: results in input order, counts summed.
        Safe to call from several threads at once (multiprocessing's pool queues the parts)."""
        by_length = sorted(range(len(lines)), key=lambda i: len(lines[i]))
        # A few lines go to one worker whole: splitting them would not make the steps of a search
        # fewer, and it would keep the other worker from a concurrent caller's lines (nmt serve).
        count = max(1, min(self.workers, len(lines) // MIN_LINES_PER_PART))
        parts = [by_length[w::count] for w in range(count)]
        parts = [p for p in parts if p]
        answers = self._pool.starmap(_run, [([lines[i] for i in part], settings) for part in parts])
        results: list[Any] = [None] * len(lines)
        for part, (found, _) in zip(parts, answers, strict=True):
            for i, result in zip(part, found, strict=True):
                results[i] = result
        return results, sum(count for _, count in answers)

    def close(self) -> None:
        self._pool.terminate()
        self._pool.join()


def _start_worker() -> None:
    # Ctrl-C reaches the whole process group: the parent stops the pool and reports it once.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    torch.set_num_threads(1)


def _run(lines: list[str], settings: Any) -> tuple[list[Any], int]:
    assert _WORK is not None, "a worker runs only in a process forked by WorkerPool"
    return _WORK(lines, settings)
