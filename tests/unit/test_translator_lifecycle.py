"""A Translator's life: its decoding workers end with it (when it is closed, left by a `with`
block, or no longer referenced), bad descriptors for them are refused before any fork, and it
refuses to be pickled or copied with a message that says what to do instead."""

from __future__ import annotations

import copy
import gc
import multiprocessing
import pickle
import subprocess
import sys
import weakref
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from helpers import TrainedRun, one_thread, subprocess_env, wait_until

from nmt_cli import Translator
from nmt_cli.decoding.workers import can_fork
from nmt_cli.errors import SettingError

needs_fork = pytest.mark.skipif(not can_fork(), reason="decoding workers are forked")


@pytest.fixture
def translator(trained: TrainedRun) -> Iterator[Translator]:
    with one_thread():
        loaded = Translator.load(trained.checkpoint, device="cpu")
        yield loaded
        loaded.close()


def children() -> set[int]:
    return {process.pid for process in multiprocessing.active_children() if process.pid is not None}


@needs_fork
def test_a_translator_no_longer_referenced_is_freed_and_its_workers_end(trained: TrainedRun) -> None:
    before = children()
    with one_thread():
        translator = Translator.load(trained.checkpoint, device="cpu")
        translator.start_workers(2)
        assert translator.translate(["apple river"]) == ["apple river"]
    workers = children() - before
    assert len(workers) == 2
    alive = weakref.ref(translator)
    del translator
    gc.collect()
    assert alive() is None  # nothing in the library keeps it (once, the workers module did)
    wait_until(lambda: not children() & workers, "its workers end", timeout=30)


@needs_fork
def test_a_with_block_closes_the_workers_and_a_second_start_replaces_the_first(
    translator: Translator,
) -> None:
    before = children()
    with translator as entered:
        assert entered is translator
        translator.start_workers(2)
        first = children() - before
        translator.start_workers(2)
        wait_until(lambda: not children() & first, "the first workers end", timeout=30)
        assert len(children() - before) == 2
    assert translator.workers == 1
    wait_until(lambda: not children() - before, "the workers end with the block", timeout=30)
    assert translator.translate(["green"]) == ["green"]  # still usable, in this process


@needs_fork
@pytest.mark.parametrize(
    ("close_fds", "error", "says"),
    [
        ([99999], SettingError, "close_fds=[99999]: 99999 is not an open descriptor of this process"),
        ("ab", TypeError, "close_fds: a list of file descriptors (int), not str"),
        ([1.5], TypeError, "close_fds: close_fds[0] is float, not a file descriptor (int)"),
        (5, TypeError, "close_fds: a list of file descriptors (int), not int"),
    ],
)
def test_bad_descriptors_to_close_are_refused_before_any_fork(
    translator: Translator,
    capfd: pytest.CaptureFixture[str],
    close_fds: object,
    error: type[Exception],
    says: str,
) -> None:
    before = children()
    with pytest.raises(error) as raised:
        translator.start_workers(2, close_fds=close_fds)  # type: ignore[arg-type]
    assert str(raised.value) == says
    assert children() == before and translator.workers == 1
    assert capfd.readouterr() == ("", "")  # no worker started, so none printed a traceback


@needs_fork
def test_a_refused_start_keeps_the_workers_already_running(translator: Translator) -> None:
    translator.start_workers(2)
    running = children()
    with pytest.raises(SettingError):
        translator.start_workers(2, close_fds=[99999])
    assert translator.workers == 2 and children() == running


def _in_the_fork(translator: Translator, answers: Any) -> None:
    try:
        answers.put(("translated", translator.translate(["apple river", "green"])))
        translator.close()  # the fork's copy of the workers: the parent's must keep running
        answers.put(("closed", None))
    except BaseException as err:  # noqa: BLE001  (the parent names whatever it was)
        answers.put(("failed", repr(err)))


def translated_in_a_fork(translator: Translator) -> Any:
    """The answers of `_in_the_fork` run in a process forked from this one; a hang fails the test."""
    context = multiprocessing.get_context("fork")
    answers = context.Queue()
    fork = context.Process(target=_in_the_fork, args=(translator, answers))
    fork.start()
    fork.join(120)
    if fork.is_alive():
        fork.kill()
        pytest.fail("the forked process is still translating after 120 s")
    return answers


@needs_fork
def test_a_process_forked_from_one_with_workers_translates_in_itself(translator: Translator) -> None:
    # The workers answer only the process that started them: a translate in a fork (a user's
    # multiprocessing pool) waited forever, and its close() would have ended the parent's workers.
    translator.start_workers(2)
    workers = children()
    answers = translated_in_a_fork(translator)
    assert answers.get(timeout=10) == ("translated", ["apple river", "green"])
    assert answers.get(timeout=10) == ("closed", None)
    assert children() == workers and translator.workers_alive() == 2
    assert translator.translate(["green"]) == ["green"]


@needs_fork
def test_a_fork_of_a_process_that_decoded_on_two_threads_translates(trained: TrainedRun) -> None:
    # GNU OpenMP (torch's CPU threads) hangs in a fork of a process whose threads it started: a
    # user's multiprocessing pool forked after a translate waited forever in the fork's first one.
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    translator = Translator.load(trained.checkpoint, device="cpu")
    try:
        assert translator.translate(["apple river", "green"] * 20)[:2] == ["apple river", "green"]
        translator.start_workers(2)
        assert translator.workers == 2
        answers = translated_in_a_fork(translator)
        assert answers.get(timeout=10) == ("translated", ["apple river", "green"])
    finally:
        translator.close()
        torch.set_num_threads(threads)


FORK_THAT_ASKS_FOR_THREADS = """
import multiprocessing, sys, torch
from nmt_cli import Translator

def child(answers):
    translator = Translator.load(sys.argv[1], device="cpu", threads=2)
    translator.translate(["green"])
    answers.put(torch.get_num_threads())

context = multiprocessing.get_context("fork")
answers = context.Queue()
context.Process(target=child, args=(answers,)).start()
print(answers.get(timeout=120))
"""


@needs_fork
def test_a_fork_of_a_process_that_never_decoded_keeps_the_threads_it_asks_for(trained: TrainedRun) -> None:
    # Only a fork of a process whose torch threads had started must decode on one: a server that
    # forks first and loads its models after asks for its own threads. (A process of its own: this
    # one has decoded on threads in other tests.)
    done = subprocess.run(
        [sys.executable, "-c", FORK_THAT_ASKS_FOR_THREADS, str(trained.checkpoint)],
        capture_output=True,
        text=True,
        env=subprocess_env(),
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "2"


@pytest.mark.parametrize(
    "copied", [pickle.dumps, copy.deepcopy, copy.copy], ids=["pickle", "deepcopy", "copy"]
)
def test_a_translator_is_not_pickled_or_copied(translator: Translator, copied: object) -> None:
    with pytest.raises(TypeError, match=r"^a Translator cannot be pickled or copied; call Translator\.load"):
        copied(translator)  # type: ignore[operator]


def test_a_translator_is_equal_to_itself_only_and_can_key_a_cache(
    translator: Translator, trained: TrainedRun
) -> None:
    # Field-wise equality would compare counters that change as lines are translated.
    with one_thread():
        other = Translator.load(trained.checkpoint, device="cpu")
    cache = {translator: "first", other: "second"}
    assert translator != other and cache[translator] == "first" and cache[other] == "second"
    translator.translate(["A dog runs."])
    assert cache[translator] == "first" and translator in weakref.WeakSet([translator])
