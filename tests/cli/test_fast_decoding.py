"""Fast decoding: bf16 and int8 stay close to fp32, and several decoding processes keep one
output line per input line, in order."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import threading
import time
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import pytest
import torch
from helpers import TrainedRun, nmt_command, sentences, subprocess_env, wait_until

from nmt_cli import Sampling, Translator
from nmt_cli.decoding import workers as worker_pool
from nmt_cli.decoding.workers import WorkerDied, WorkerPool, decoding_workers
from nmt_cli.errors import InputError
from nmt_cli.user_settings import RuntimeConfig


@pytest.fixture(scope="module")
def lines() -> list[str]:
    return sentences(200, seed=21)


@pytest.fixture(scope="module")
def fp32(trained: TrainedRun, lines: list[str]) -> list[str]:
    return Translator.load(trained.checkpoint, device="cpu", precision="fp32").translate(lines, beam=4)


@pytest.mark.parametrize("precision", ["bf16", "int8"])
def test_reduced_precision_translates_most_lines_as_fp32(
    trained: TrainedRun, lines: list[str], fp32: list[str], precision: str
) -> None:
    translator = Translator.load(trained.checkpoint, device="cpu", precision=precision)
    if precision == "int8":  # every linear layer quantized, the output projection included
        assert not any(type(m) is torch.nn.Linear for m in translator.ensemble.models[0].modules())
    else:
        assert next(translator.ensemble.models[0].parameters()).dtype == torch.bfloat16
    out = translator.translate(lines, beam=4)
    same = sum(a == b for a, b in zip(out, fp32, strict=True))
    assert same >= 0.9 * len(lines), f"{precision}: {same} of {len(lines)} lines as fp32"


def test_int8_lines_do_not_depend_on_the_batch(trained: TrainedRun, lines: list[str]) -> None:
    # With one activation scale per batch, 189 of these 200 lines scored differently in 64-token
    # batches (by up to 0.26); per-row scales leave only float rounding (none here).
    translator = Translator.load(trained.checkpoint, device="cpu", precision="int8", threads=1)
    large = translator.translate_nbest(lines, beam=4, nbest=1, batch_tokens=4096)
    small = translator.translate_nbest(lines, beam=4, nbest=1, batch_tokens=64)
    assert [h[0][0] for h in small] == [h[0][0] for h in large]
    assert max(abs(a[0][1] - b[0][1]) for a, b in zip(small, large, strict=True)) <= 1e-5
    sampling = Sampling("topk", topk=5, seed=3)
    alone = [translator.translate([line], sampling=sampling)[0] for line in lines[:20]]
    assert alone == translator.translate(lines, sampling=sampling)[:20]


@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_two_workers_give_the_same_lines_in_the_same_order(
    trained: TrainedRun, lines: list[str], tmp_path: Path, precision: str
) -> None:
    # Empty lines and lines of every length, so that the parts dealt out to the workers differ.
    text = [line if i % 7 else "" for i, line in enumerate(lines)] + ["apple " * 40]
    source = tmp_path / "in.txt"
    source.write_text("".join(f"{line}\n" for line in text), encoding="utf-8")
    outputs = []
    for parallel in (["--workers", "1", "--threads", "1"], ["--workers", "2"]):
        done = subprocess.run(
            nmt_command(
                "-q", "translate", "-m", trained.checkpoint, "-i", source, "--precision", precision, *parallel
            ),
            capture_output=True,
            env=subprocess_env(),
            timeout=120,
        )
        assert done.returncode == 0, done.stderr.decode()
        outputs.append(done.stdout.decode().split("\n"))
    assert len(outputs[1]) == len(text) + 1  # one line each, and the final newline
    assert outputs[1] == outputs[0]
    assert all(outputs[1][i] == "" for i in range(0, len(lines), 7))


def test_default_workers_one_per_core_unless_threads_are_given() -> None:
    cpu = torch.device("cpu")
    assert decoding_workers(3, 0, cpu) == 3
    assert decoding_workers(0, 2, cpu) == 1
    assert decoding_workers(0, 0, cpu) >= 1
    assert decoding_workers(4, 0, torch.device("cuda")) == 1
    with pytest.raises(InputError, match="workers=-1"):
        RuntimeConfig(workers=-1)


def test_unknown_precision_is_refused_in_one_line(trained: TrainedRun) -> None:
    with pytest.raises(InputError, match="int4"):
        Translator.load(trained.checkpoint, device="cpu", precision="int4")


def upper_and_count_parts(lines: list[str], settings: object) -> tuple[list[str], int]:
    return [line.upper() for line in lines], 1


def test_workers_split_a_large_call_and_keep_a_small_one_whole() -> None:
    pool = WorkerPool(upper_and_count_parts, 2)
    try:
        many = [f"line {i} " + "x" * (i % 13) for i in range(200)]
        assert pool.map(many, None) == ([line.upper() for line in many], 2)  # in order, two parts
        assert pool.map(many[:5], None) == ([line.upper() for line in many[:5]], 1)  # one worker
    finally:
        pool.close()


def upper_or_wait(lines: list[str], settings: object) -> tuple[list[str], int]:
    """Upper-cases the lines; with a path as settings, first writes this worker's pid there and
    waits (a call in progress, for the test to kill its worker)."""
    if isinstance(settings, Path):
        settings.write_text(str(os.getpid()))
        time.sleep(60)
    return [line.upper() for line in lines], 1


def call_in_progress(pool: WorkerPool, busy: Path) -> tuple[threading.Thread, list[BaseException]]:
    """A call running in a thread, once a worker has taken it (its pid written to `busy`); the
    list receives what the call raised."""
    failure: list[BaseException] = []

    def call() -> None:
        try:
            pool.map(["a", "b"], busy)
        except BaseException as err:
            failure.append(err)

    caller = threading.Thread(target=call)
    caller.start()
    wait_until(lambda: busy.exists() and busy.read_text(), "a worker is in the call", timeout=30)
    return caller, failure


def test_a_worker_killed_during_a_call_fails_that_call_and_the_next_gets_fresh_workers(
    tmp_path: Path,
) -> None:
    pool = WorkerPool(upper_or_wait, 2)
    try:
        busy = tmp_path / "busy"
        caller, failure = call_in_progress(pool, busy)
        os.kill(int(busy.read_text()), signal.SIGKILL)  # as the out-of-memory killer would
        caller.join(30)
        assert not caller.is_alive()  # an error, never a hang
        assert len(failure) == 1 and isinstance(failure[0], WorkerDied) and failure[0].exit_code == 1
        assert pool.map(["c"], None) == (["C"], 1)
    finally:
        pool.close()


def ended(pid: int | None) -> bool:
    """Whether the process is gone or dead (a zombie not yet reaped), by /proc."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text(encoding="ascii").rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")


def test_a_pool_closed_during_a_call_fails_it_and_starts_no_new_workers(tmp_path: Path) -> None:
    # nmt serve's second Ctrl-C closes the pool under a request: fresh workers forked then would
    # keep the exiting process waiting for them.
    # Workers of other pools (a Translator an earlier test left to the collector) may still be
    # alive: only this pool's processes count.
    others = set(multiprocessing.active_children())
    pool = WorkerPool(upper_or_wait, 2)
    workers = set(multiprocessing.active_children()) - others
    caller, failure = call_in_progress(pool, tmp_path / "busy")
    pool.close()
    caller.join(30)
    assert not caller.is_alive() and len(failure) == 1 and isinstance(failure[0], WorkerDied)
    assert len(workers) == 2 and set(multiprocessing.active_children()) - others <= workers  # none new
    # Ended as the kernel sees them: the executor's manager thread and close() both reap them, and
    # multiprocessing can count a process reaped by the other thread as alive.
    wait_until(lambda: all(ended(worker.pid) for worker in workers), "the pool's workers end", timeout=30)
    assert pool.restarts == 0 and not pool.heal()
    with pytest.raises(WorkerDied, match="^the decoding workers were closed"):
        pool.map(["c"], None)  # a later call: one clear error


def test_a_worker_that_dies_idle_costs_no_call() -> None:
    others = set(multiprocessing.active_children())  # an earlier test's workers: not this pool's
    pool = WorkerPool(upper_and_count_parts, 2)
    try:
        assert pool.map(["a"], None) == (["A"], 1)
        for worker in set(multiprocessing.active_children()) - others:
            worker.kill()
            worker.join(10)
        # The pool notices the deaths: its executor's manager thread marks it broken (then the next
        # call replaces it rather than fail).
        wait_until(lambda: pool._executor._broken, "the pool marks itself broken", timeout=30)
        assert pool.map(["b"] * 100, None) == (["B"] * 100, 2)
        assert pool.restarts == 1
    finally:
        pool.close()


class _Stop(BaseException):
    pass


def _stop_on_sigterm(_signum: int, _frame: object) -> None:
    raise _Stop  # as `cli.main` turns SIGTERM into `Terminated`


def test_a_worker_ended_by_sigterm_ends_quietly_whatever_the_parents_handler(
    capfd: pytest.CaptureFixture[str],
) -> None:
    # The pool terminates its other workers when one dies: under `nmt translate`, whose SIGTERM
    # handler raises, an idle worker printed "Process ForkProcess-N:" (and a traceback).
    previous = signal.signal(signal.SIGTERM, _stop_on_sigterm)
    try:
        pool = WorkerPool(upper_and_count_parts, 2)
    finally:
        signal.signal(signal.SIGTERM, previous)
    try:
        worker = next(iter(pool._executor._processes.values()))
        worker.terminate()
        worker.join(10)
        assert worker.exitcode == -signal.SIGTERM
        assert "Process" not in capfd.readouterr().err
    finally:
        pool.close()


def test_a_worker_signalled_before_its_handlers_are_set_ends_quietly(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # The pool may end a worker that is still starting (a machine under load starts it slowly): the
    # signal must wait for the worker's own handler, not run the parent's Python one in the worker.
    start = worker_pool._start_worker

    def signalled_while_starting(*args: object) -> None:
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)  # where the parent's handler would have raised
        except BaseException:
            (tmp_path / f"raised-in-{os.getpid()}").touch()
            raise
        start(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(worker_pool, "_start_worker", signalled_while_starting)
    previous = signal.signal(signal.SIGTERM, _stop_on_sigterm)
    try:
        with pytest.raises(BrokenProcessPool):  # both workers ended before their first task
            WorkerPool(upper_and_count_parts, 2)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert not list(tmp_path.glob("raised-in-*"))  # the signal ended them by its default action
    err = capfd.readouterr().err
    assert "Traceback" not in err and "Exception in initializer" not in err, err


@pytest.mark.parametrize(
    ("hardware_bf16", "amx", "machine", "expected"),
    [
        (True, True, "x86_64", "bf16"),
        (True, False, "x86_64", "int8"),
        (False, False, "x86_64", "int8"),
        (True, False, "aarch64", "bf16"),
        (False, False, "aarch64", "fp32"),
    ],
)
def test_cpu_default_precision_is_int8_on_x86_bf16_with_amx_and_never_emulated_bf16(
    monkeypatch: pytest.MonkeyPatch, hardware_bf16: bool, amx: bool, machine: str, expected: str
) -> None:
    from nmt_cli.decoding import loading

    monkeypatch.setattr(loading, "cpu_has_fast_bf16", lambda: hardware_bf16)
    monkeypatch.setattr(loading, "cpu_has_amx", lambda: amx)
    monkeypatch.setattr(loading.platform, "machine", lambda: machine)
    assert loading.default_precision(torch.device("cpu")) == expected
