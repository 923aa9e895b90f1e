"""`nmt train` killed with SIGKILL at random moments, several times in a row, including while a
checkpoint is being written: after each kill every checkpoint on disk loads, the run resumes, and
the update it resumes from is never more than one checkpoint interval behind the update the killed
process had reached, nor behind where the previous round resumed. SIGINT and SIGTERM (a clean stop
with a checkpoint) are tested in tests/cli/test_train.py.

The child process is `nmt train` with fsync slowed down (a slow disk): a save then takes long
enough that a kill can be aimed at its two dangerous moments, while the temporary file is being
written and between its rename and the update of checkpoint_last.pt.

`nmt translate -o FILE` stopped by SIGINT or SIGKILL keeps the lines it finished in FILE.partial,
complete and in order, and leaves FILE alone.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import Corpus, TrainedRun, nmt, nmt_command, sentences, subprocess_env, train_args, wait_until

from nmt_cli import checkpoint
from nmt_cli.model import Transformer

SAVE_EVERY = 5
FSYNC_DELAY = 0.1  # seconds per fsync: a save (file + directory) takes about 0.2 s
ROUNDS = ("at random", "while writing a checkpoint", "between rename and checkpoint_last", "at random")
SETTINGS = [
    "train.max_updates=0",  # no limit: only the kill stops it
    f"train.save_every_updates={SAVE_EVERY}",
    "train.valid_every_updates=0",
    "train.log_every_updates=1",  # metrics.jsonl shows every update reached
    "train.keep_last=3",  # pruning runs under the kills too
]

CHILD = """
import os, sys, time
fsync = os.fsync
def slow_fsync(fd):
    time.sleep(float(os.environ["NMT_TEST_FSYNC_DELAY"]))
    return fsync(fd)
os.fsync = slow_fsync
from nmt_cli.cli.main import main
main(sys.argv[1:])
"""


def slow_saving(args: list[str], fsync_delay: float) -> subprocess.Popen:
    """`nmt ARGS` in a child whose every fsync waits `fsync_delay` s: saves take long enough to be
    caught in the middle; its stderr is piped."""
    env = {**subprocess_env(), "NMT_TEST_FSYNC_DELAY": str(fsync_delay)}
    command = [sys.executable, "-c", CHILD, *map(str, args)]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)


def reached(metrics: Path) -> int:
    """The highest update the run logged (a line cut short by the kill is ignored)."""
    best = 0
    if metrics.exists():
        for line in metrics.read_text(encoding="utf-8").splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if record.get("type") == "train":
                best = max(best, int(record["update"]))
    return best


def train_records(metrics: Path) -> int:
    if not metrics.exists():
        return 0
    return metrics.read_text(encoding="utf-8").count('"type": "train"')


def check_every_checkpoint_loads(ckpts: Path) -> int:
    """Load every checkpoint into a model; return the update checkpoint_last.pt resumes from."""
    names = [p for p in ckpts.glob("*.pt") if not p.name.startswith(".")]
    assert names, "no checkpoint on disk"
    for path in names:
        payload = checkpoint.load(path)  # raises on a truncated or corrupted file
        model = Transformer(payload.run_config(path).model)
        model.load_state_dict(payload.model)
        if path.name != "checkpoint_last.pt":
            assert checkpoint.numbered_name(payload.update) == path.name
    last = ckpts / "checkpoint_last.pt"
    return checkpoint.load(last).update if last.exists() else 0


def inodes(ckpts: Path) -> set[tuple[int, int]]:
    """(update, inode) of the numbered checkpoints now on disk."""
    found = set()
    for update, path in checkpoint.numbered(ckpts):
        try:
            found.add((update, os.stat(path).st_ino))
        except FileNotFoundError:  # pruned while we looked
            pass
    return found


def in_the_middle_of_a_save(ckpts: Path, pid: int, moment: str, seen: set[tuple[int, int]]) -> bool:
    """Whether process `pid` is at `moment` of a save. `seen`: the numbered checkpoints on disk when
    it started training (one that a killed process renamed into place earlier does not count)."""
    try:
        if moment == "while writing a checkpoint":
            return any(p.name.endswith(f".tmp-{pid}") for p in ckpts.iterdir())
        new = sorted(inodes(ckpts) - seen)
        last = ckpts / "checkpoint_last.pt"
        return bool(new) and (not last.exists() or new[-1][1] != os.stat(last).st_ino)
    except FileNotFoundError:  # a file went while we looked (rename, prune)
        return False


def kill_during(process: subprocess.Popen, run_dir: Path, moment: str, rng: random.Random) -> None:
    """Wait until the process trains (it logged a new update), then SIGKILL it at `moment`."""
    metrics, ckpts = run_dir / "metrics.jsonl", run_dir / "checkpoints"
    before = train_records(metrics)
    wait_until(lambda: train_records(metrics) > before, "training logs a new update", process=process)
    seen = inodes(ckpts)
    if moment == "at random":
        time.sleep(rng.uniform(0.05, 1.5))  # the kill's moment is what is random: not a wait for a state
    else:
        wait_until(
            lambda: in_the_middle_of_a_save(ckpts, process.pid, moment, seen),
            f"a save is seen {moment}",
            process=process,
            poll_s=0.002,
        )
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)


@pytest.mark.slow  # four kills and resumes of a training: about 12 s
def test_sigkill_at_random_moments_never_loses_more_than_one_interval(corpus: Corpus, tmp_path: Path) -> None:
    rng = random.Random(1234)
    run_dir = tmp_path / "run"
    ckpts = run_dir / "checkpoints"
    args = train_args(corpus.data, run_dir, *SETTINGS)
    resumed_from, left_behind = 0, []
    for moment in ROUNDS:
        process = slow_saving(args, FSYNC_DELAY)
        try:
            kill_during(process, run_dir, moment, rng)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        assert process.returncode == -signal.SIGKILL
        reached_update = reached(run_dir / "metrics.jsonl")
        resume = check_every_checkpoint_loads(ckpts)
        assert reached_update - resume <= SAVE_EVERY, (
            f"killed {moment}: reached {reached_update}, resumes {resume}"
        )
        assert resume >= resumed_from, f"killed {moment}: resumes from {resume} after {resumed_from}"
        resumed_from = resume
        left_behind += [p.name for p in ckpts.iterdir() if p.name.startswith(".")]

    # The last resume runs to completion and cleans up what the killed processes left half-written.
    assert any(".tmp-" in name for name in left_behind), "no kill landed while a checkpoint was written"
    target = resumed_from + 2 * SAVE_EVERY
    assert nmt(*args, "--set", f"train.max_updates={target}") == 0
    assert check_every_checkpoint_loads(ckpts) == target
    assert [p.name for p in ckpts.iterdir() if p.name.startswith(".")] == []
    assert len(checkpoint.numbered(ckpts)) <= 3


@pytest.mark.parametrize("pid_alive", [False, True], ids=["dead writer", "live writer"])
def test_stale_temporaries_of_dead_processes_are_removed(pid_alive: bool, tmp_path: Path) -> None:
    pid = os.getppid() if pid_alive else 2**22 + 17  # above the default pid_max: never a live process
    names = [f".checkpoint_10.pt.tmp-{pid}", f".checkpoint_last.pt.link-{pid}"]
    for name in names:
        (tmp_path / name).write_bytes(b"half")
    (tmp_path / "checkpoint_5.pt").write_bytes(b"kept")
    checkpoint.remove_stale_temporaries(tmp_path)
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == sorted(["checkpoint_5.pt", *(names if pid_alive else [])])


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["SIGINT", "SIGKILL"])
def test_a_stopped_translation_keeps_its_complete_lines_in_a_partial_file(
    trained: TrainedRun, tmp_path: Path, sig: signal.Signals
) -> None:
    lines = sentences(50_000, seed=9)  # about a minute of work: the signal lands long before the end
    source, target = tmp_path / "in.txt", tmp_path / "out.txt"
    partial = tmp_path / "out.txt.partial"
    source.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    args = ["-q", "translate", "-m", trained.checkpoint, "-i", source, "-o", target]
    process = subprocess.Popen(
        nmt_command(*args, "--buffer-size", 2, "--threads", 1),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=subprocess_env(),
    )
    try:
        wait_until(
            lambda: partial.exists() and partial.stat().st_size >= 200,
            "a few buffers of translations are in the partial file",
            timeout=90,
            process=process,
            poll_s=0.01,
        )
        process.send_signal(sig)
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert not target.exists()
    text = partial.read_text(encoding="utf-8")
    assert text.endswith("\n")  # no line cut short
    kept = text[:-1].split("\n")
    assert 0 < len(kept) < len(lines)
    exact = sum(hyp == src for hyp, src in zip(kept, lines, strict=False)) / len(kept)
    assert exact >= 0.9, "the partial file does not hold the first lines in order"
    if sig == signal.SIGINT:
        assert process.returncode == 130
        assert err.decode().strip() == (
            f"nmt: error: interrupted; --output {target}: "
            f"stopped after {len(kept):,} lines; they are in {partial}"
        )
    else:
        assert process.returncode == -signal.SIGKILL


@pytest.mark.slow  # two trainings as processes: 4 to 7 s
def test_two_trainings_never_share_a_run_directory(corpus: Corpus, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    args = train_args(corpus.data, run_dir, "train.max_updates=100000", "train.save_every_updates=20")
    first = subprocess.Popen(nmt_command(*args[1:]), env=subprocess_env(), stderr=subprocess.PIPE, text=True)
    try:
        wait_until(
            lambda: checkpoint.numbered(run_dir / "checkpoints"),
            "the first saves a checkpoint (it trains, and holds the lock)",
            timeout=120,
            process=first,
        )
        second = subprocess.run(
            nmt_command(*args[1:]), env=subprocess_env(), capture_output=True, text=True, timeout=120
        )
        assert second.returncode == 2 and second.stderr.count("\n") == 1, second.stderr
        assert "another process is working in it" in second.stderr
        assert first.poll() is None  # the first goes on undisturbed
        first.kill()  # SIGKILL: the kernel releases the lock with the process
        first.wait(30)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait(30)
    done = checkpoint.load(run_dir / "checkpoints" / "checkpoint_last.pt").update
    resumed = train_args(
        corpus.data, run_dir, f"train.max_updates={done + 20}", "train.save_every_updates=20"
    )
    assert nmt(*resumed) == 0  # a killed run resumes: no lock left behind
    assert checkpoint.load(run_dir / "checkpoints" / "checkpoint_last.pt").update == done + 20


@pytest.mark.slow  # a training process, signalled during a slow save: about 3.5 s
def test_a_second_ctrl_c_during_a_save_names_the_checkpoint_to_resume_from(
    corpus: Corpus, tmp_path: Path
) -> None:
    # The first Ctrl-C asks for a save; a second one, while that save is being written, stops at
    # once: the line must still say that the earlier checkpoints are kept and how to resume.
    run_dir = tmp_path / "run"
    ckpts = run_dir / "checkpoints"
    args = train_args(corpus.data, run_dir, *SETTINGS, quiet=False)
    process = slow_saving(args, 0.3)
    try:
        wait_until(lambda: (ckpts / "checkpoint_last.pt").exists(), "a first checkpoint", process=process)
        seen = inodes(ckpts)
        moment = "while writing a checkpoint"
        wait_until(lambda: in_the_middle_of_a_save(ckpts, process.pid, moment, seen), moment, process=process)
        process.send_signal(signal.SIGINT)
        time.sleep(0.05)  # two signals at once would be taken as one
        process.send_signal(signal.SIGINT)
        err = process.communicate(timeout=60)[1].decode()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 130, err
    line = err.strip().splitlines()[-1]
    assert "Traceback" not in err and line.startswith("nmt: error: training stopped by SIGINT at once;"), err
    assert f"kept in {ckpts}: run the same command to resume" in line
    assert check_every_checkpoint_loads(ckpts) >= SAVE_EVERY
