"""Decoding in several processes of one thread each, as CTranslate2's inter_threads does.

Decoding runs many small operations per step; one thread a process keeps every core busy with
arithmetic instead of waiting at the barriers of a multi-threaded operation. The processes are
forked from the loaded translator (the weights are shared, copy-on-write, not reloaded); each
call deals its lines out to them by length, round robin, so they finish together, and puts the
answers back in input order.

A worker that dies (killed, or out of memory) fails the call it was working on with one line
(`WorkerDied`), never a hang, and the pool starts afresh for the next call; one that dies idle
costs no call at all. Workers die with the process that forked them, and with their pool: the
pool holds its work's object (a Translator) weakly, so that object can be collected, and then
the pool's executor, whose manager thread ends the workers. They close the descriptors they must
not hold (a server's listening socket), checked before any fork.
"""

from __future__ import annotations

import contextlib
import inspect
import multiprocessing
import os
import signal
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import CancelledError, Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

import torch

from nmt_cli.errors import RunFailure, SettingError

Work = Callable[[list[Any], Any], tuple[list[Any], int]]
"""(a part of the lines, the call's settings) -> (one result per line, a count to add up)."""

MIN_LINES_PER_PART = 32
MAX_AUTO_WORKERS = 8  # beyond this, more processes cost memory for little gain at translate's batch sizes
PARENT_CHECK_S = 1.0

_WORK: Work | None = None  # what a forked worker runs; set in the parent only while it forks
_FORKING = threading.Lock()
STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}
_DECODED_ON_THREADS = False  # this process has decoded on several torch threads
_FORKED_AFTER_THREADS = False  # this process is a fork of one that had


def _note_the_fork() -> None:
    global _FORKED_AFTER_THREADS
    _FORKED_AFTER_THREADS = _DECODED_ON_THREADS


os.register_at_fork(after_in_child=_note_the_fork)


@contextlib.contextmanager
def fork_safe_threads() -> Iterator[None]:
    """Decoding in this process; in a fork of a process that decoded on several torch threads, on
    one. GNU OpenMP, torch's CPU threads, hangs in a fork of a process whose threads it had
    started (a user's multiprocessing pool forked after a translate); the workers take one thread
    for the same reason. Other forks keep the threads they are given."""
    global _DECODED_ON_THREADS
    if _FORKED_AFTER_THREADS and torch.get_num_threads() > 1:
        torch.set_num_threads(1)
    _DECODED_ON_THREADS = _DECODED_ON_THREADS or torch.get_num_threads() > 1
    yield


class WorkerDied(RunFailure):
    """A decoding worker process ended in the middle of a call (exit 1; HTTP 503)."""


def usable_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def decoding_workers(workers: int, threads: int, device: torch.device) -> int:
    """Decoding processes: `workers` as asked; 0, by default, one per core on CPU (each of one
    thread), unless a thread count is given, which then goes to a single process."""
    if device.type != "cpu":
        return 1
    if workers == 0:
        return 1 if threads > 0 else min(usable_cores(), MAX_AUTO_WORKERS)
    return workers


def can_fork() -> bool:
    return "fork" in multiprocessing.get_all_start_methods()


class WorkerPool:
    """`workers` forked processes that run `work` on parts of a list of lines; `close_fds` are
    descriptors of this process that the workers close at once."""

    def __init__(self, work: Work, workers: int, close_fds: Iterable[int] = ()) -> None:
        # A method is held weakly: its object (a Translator, which holds this pool) must stay free
        # to be collected, and its workers to end with it.
        self._work = weakref.WeakMethod(work) if inspect.ismethod(work) else lambda: work
        self.workers = workers
        self.restarts = 0
        self._close_fds = open_descriptors(close_fds)
        self._lock = threading.Lock()
        self._closed = False
        self._owner = os.getpid()  # a copy of the pool in a process forked from this one has no workers
        self._executor = self._start()

    def _start(self) -> ProcessPoolExecutor:
        global _WORK
        with _FORKING:  # several pools in one process (nmt serve, one per model): each forks its own
            _WORK = self._work()
            try:
                return self._fork()
            finally:
                _WORK = None  # the workers have their copy; here it would keep its object alive

    def _fork(self) -> ProcessPoolExecutor:
        context = multiprocessing.get_context("fork")
        executor = ProcessPoolExecutor(
            self.workers,
            mp_context=context,
            initializer=_start_worker,
            initargs=(os.getpid(), self._close_fds),
        )
        # Every worker is forked now (a fork pool starts them all at the first task): at the first
        # call the caller may have threads of its own, whose locks a fork would copy. A worker
        # starts with the stop signals blocked, and takes them once its own handlers are set
        # (`_start_worker`): one sent before would run this process's Python handler in the
        # half-started worker (a traceback, or no end at all if the fork copied a held lock).
        held = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            first = executor.submit(int)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)  # what came meanwhile arrives now
        first.result()
        return executor

    def map(self, lines: list[Any], settings: Any) -> tuple[list[Any], int]:
        """`work` over all lines, split among the workers: results in input order, counts summed.
        Safe to call from several threads at once. Raises WorkerDied if a worker dies meanwhile.
        Not in a process forked from the pool's (`forked`): the workers answer only their parent."""
        if self.forked():  # the call would wait forever
            raise WorkerDied(
                f"these decoding workers belong to process {self._owner}, not to its fork; "
                "translate through the Translator, which decodes in the fork itself"
            )
        by_length = sorted(range(len(lines)), key=lambda i: len(lines[i]))
        # A few lines go to one worker whole: splitting them would not make the steps of a search
        # fewer, and it would keep the other worker from a concurrent caller's lines (nmt serve).
        count = max(1, min(self.workers, len(lines) // MIN_LINES_PER_PART))
        parts = [p for p in (by_length[w::count] for w in range(count)) if p]
        executor, futures = self._submit([([lines[i] for i in part], settings) for part in parts])
        try:
            answers = [future.result() for future in futures]
        except (BrokenProcessPool, CancelledError):  # cancelled: queued when the pool was stopped
            with self._lock:
                closed = self._closed
                if not closed and self._executor is executor:  # the first caller to see it restarts
                    self._restart()
            if closed:  # its workers were ended on purpose: no process died
                raise WorkerDied(
                    "the decoding workers were closed (close() or start_workers()) during this call; "
                    "these lines were not translated"
                ) from None
            raise WorkerDied(
                "a decoding worker process died (killed, or out of memory?) while translating; "
                "these lines were not translated"
            ) from None
        results: list[Any] = [None] * len(lines)
        for part, (found, _) in zip(parts, answers, strict=True):
            for i, result in zip(part, found, strict=True):
                results[i] = result
        return results, sum(count for _, count in answers)

    def _submit(self, calls: list[tuple[list[Any], Any]]) -> tuple[ProcessPoolExecutor, list[Future]]:
        """The calls queued on the current pool; a pool broken while idle is replaced first."""
        with self._lock:
            if self._closed:  # the executor would say "cannot schedule new futures after shutdown"
                raise WorkerDied("the decoding workers were closed; these lines were not translated")
            try:
                return self._executor, [self._executor.submit(_run, *call) for call in calls]
            except BrokenProcessPool:
                self._restart()
                return self._executor, [self._executor.submit(_run, *call) for call in calls]

    def _restart(self) -> None:
        _stop(self._executor)
        if self._closed:  # a call in flight when the pool closed: no new workers to outlive it
            return
        self._executor = self._start()
        self.restarts += 1

    def heal(self) -> bool:
        """Replace the pool now if a worker has died (a pool with a dead worker is broken: it
        would fail the next call), rather than at the next call; whether it was replaced."""
        with self._lock:
            if self._closed or self.forked() or self.alive() == self.workers:
                return False
            self._restart()
            return True

    def forked(self) -> bool:
        """Whether this is a copy of the pool in a process forked from its own (a user's fork)."""
        return os.getpid() != self._owner

    def alive(self) -> int:
        """Worker processes alive now (a dead one is replaced at the next call); none in a process
        forked from the pool's."""
        if self.forked():
            return 0
        processes = getattr(self._executor, "_processes", None) or {}  # None once broken
        return sum(process.is_alive() for process in list(processes.values()))

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if not self.forked():  # a forked copy must not end the workers of its parent
                _stop(self._executor)


def open_descriptors(close_fds: object) -> tuple[int, ...]:
    """`close_fds` checked before any fork: descriptors of this process, open now: a bad one
    would fail every worker as it starts, each printing a traceback."""
    if isinstance(close_fds, str | bytes) or not isinstance(close_fds, Iterable):
        raise TypeError(f"close_fds: a list of file descriptors (int), not {type(close_fds).__name__}")
    fds = list(close_fds)
    for i, fd in enumerate(fds):
        if not isinstance(fd, int) or isinstance(fd, bool):
            raise TypeError(f"close_fds: close_fds[{i}] is {type(fd).__name__}, not a file descriptor (int)")
        try:
            os.fstat(fd)
        except OSError:
            raise SettingError("close_fds", fds, f"{fd} is not an open descriptor of this process") from None
    return tuple(dict.fromkeys(fds))


def _stop(executor: ProcessPoolExecutor) -> None:
    """End the workers now, busy or not (shutdown alone would wait for a call in progress)."""
    processes = list((getattr(executor, "_processes", None) or {}).values())  # None once broken
    executor.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        process.kill()
    for process in processes:
        process.join(5)


def _start_worker(parent: int, close_fds: tuple[int, ...]) -> None:
    # Die with the parent, whatever kills it. (prctl's PDEATHSIG would follow the thread that
    # forked the worker, and a pool may be restarted from a thread that ends.)
    threading.Thread(target=_exit_with, args=(parent,), daemon=True).start()
    for fd in close_fds:
        with contextlib.suppress(OSError):  # closed since it was checked: as asked
            os.close(fd)
    # Ctrl-C reaches the whole process group: the parent stops the pool and reports it once.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # SIGTERM (the pool ending a worker) ends it quietly: not the parent's handler, whose
    # exception would escape the worker's loop with a "Process ForkProcess-N:" report.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)  # blocked since the fork (`_fork`)
    torch.set_num_threads(1)


def _exit_with(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(PARENT_CHECK_S)
    os._exit(1)


def _run(lines: list[Any], settings: Any) -> tuple[list[Any], int]:
    assert _WORK is not None, "a worker runs only in a process forked by WorkerPool"
    return _WORK(lines, settings)
