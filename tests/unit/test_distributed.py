"""Training on several processes: torchrun's environment, the shared batch schedule, and real
two-process gloo runs on CPU that must match one process with update_freq 2, resume with one
process, and stop together when one process is signalled."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist
from helpers import TINY_MODEL, sets, subprocess_env, wait_until

from nmt_cli.commands import prepare
from nmt_cli.data import corpus
from nmt_cli.data.batching import collate, make_batches
from nmt_cli.demo import make_corpus
from nmt_cli.errors import InputError
from nmt_cli.training.distributed import World, from_env, lost_peer, target_tokens, update_share
from nmt_cli.user_settings import PrepareConfig

TINY = [
    *TINY_MODEL,  # the command tests' tiny model (later settings win)
    "model.dropout=0.0",  # the comparisons are exact only without dropout
    "model.max_positions=128",
    'train.lr_schedule="inverse_sqrt"',
    "train.lr=1e-3",
    "train.warmup=10",
    # Adam's update hardly depends on the gradient's scale when eps is tiny: a large eps makes
    # a wrong normalisation (say, DDP's mean where a sum is due) change the parameters.
    "train.adam_eps=1e-2",
    "train.max_tokens=600",
    "train.save_every_updates=1",
    "train.save_every_minutes=0",
    "train.keep_last=100",
    "train.log_every_updates=1",
    "train.valid_every_updates=5",
    "decode.beam=2",
]


def test_world_from_torchrun_environment():
    assert from_env({}) == World(rank=0, size=1, local_rank=0)
    world = from_env({"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1"})
    assert (world.rank, world.size, world.local_rank, world.is_main, world.distributed) == (
        3,
        8,
        1,
        False,
        True,
    )
    with pytest.raises(InputError, match="RANK=8, WORLD_SIZE=8"):
        from_env({"RANK": "8", "WORLD_SIZE": "8", "LOCAL_RANK": "0"})
    with pytest.raises(InputError, match="must be integers"):
        from_env({"RANK": "x", "WORLD_SIZE": "2"})


def test_ranks_share_out_what_one_process_with_update_freq_times_world_takes():
    batches = [np.array([i]) for i in range(7)]
    one = [update_share(batches, start, 4, World())[1] for start in (0, 4)]
    two = [[update_share(batches, start, 2, World(rank=r, size=2))[1] for r in (0, 1)] for start in (0, 4)]
    for alone, shares in zip(one, two, strict=True):
        together = sorted(int(b[0]) for share in shares for b in share)
        assert together == [int(b[0]) for b in alone]
    # The last update of the epoch has 3 batches for 4 slots: rank 1 gets one, and in a world
    # of 4 the last rank gets none (it then runs a zero-weighted stand-in).
    assert [len(update_share(batches, 4, 1, World(rank=r, size=4))[1]) for r in range(4)] == [1, 1, 1, 0]


def test_update_tokens_from_lengths_equal_the_padded_tensors_count():
    rng = np.random.default_rng(0)
    tgt = [rng.integers(4, 30, n) for n in (2, 6, 5, 3, 9)]
    src = [rng.integers(4, 30, 4) for _ in tgt]
    lengths = np.array([len(t) for t in tgt])
    group = [np.array([0, 3]), np.array([1, 2, 4])]
    counted = sum(
        int((collate([src[i] for i in g], [tgt[i] for i in g])["tgt_out"] != 0).sum()) for g in group
    )
    assert target_tokens(group, lengths) == counted


# --- two real processes (gloo on CPU) --------------------------------------------------------

needs_gloo = pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="no gloo")


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ddp")
    make_corpus(root / "corpus", {"train": 300, "valid": 20})
    config = PrepareConfig(
        train=(str(root / "corpus" / "train"),),
        valid=str(root / "corpus" / "valid"),
        src="en",
        tgt="de",
        out=root / "data",
        vocab_size=120,
        spm_sample=100_000,
        max_ratio=3.0,
        byte_fallback=False,
    )
    prepare.run(config, quiet=True)
    return root / "data"


def _nmt_train(
    data: Path,
    out: Path,
    overrides: list[str],
    processes: int,
    program: tuple[str, ...] = ("-m", "nmt_cli"),
    env: dict[str, str] | None = None,
) -> subprocess.Popen:
    launcher = [sys.executable, *program]
    if processes > 1:
        launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
        launcher += [f"--nproc_per_node={processes}", *program]
    args = ["train", "--data", str(data), "--out", str(out), "--device", "cpu", "--threads", "1"]
    args += sets(*TINY, *overrides)
    return subprocess.Popen(
        [*launcher, *args],
        env={**subprocess_env(), **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish(proc: subprocess.Popen, timeout: float = 120) -> str:
    _, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err[-3000:]
    return err


def _state(run: Path, update: int) -> dict:
    return torch.load(run / "checkpoints" / f"checkpoint_{update}.pt", weights_only=True)


def _assert_same_parameters(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()  # the unwrapped module's names: no DDP "module." prefix
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=1e-5, atol=1e-6, msg=name)


@needs_gloo
@pytest.mark.slow  # three trainings, two of them on two processes: about 8 s
def test_two_processes_equal_one_with_update_freq_2_and_resume_with_one(data_dir: Path, tmp_path: Path):
    split = corpus.load_split(data_dir, "train")
    per_epoch = len(make_batches(split.src.lengths(), split.tgt.lengths(), 600, 1, 1))
    assert per_epoch % 2 == 1, "the corpus must end an epoch with one batch for two processes"
    end_of_epoch = per_epoch // 2 + 1  # the update at which rank 1 has no batch

    two, one = tmp_path / "two", tmp_path / "one"
    # The single-process reference runs beside the two processes (three cores' worth of work).
    reference = _nmt_train(data_dir, one, ["train.update_freq=2", f"train.max_updates={end_of_epoch + 3}"], 1)
    _finish(_nmt_train(data_dir, two, [f"train.max_updates={end_of_epoch + 1}"], 2))
    _finish(reference)
    for update in (1, end_of_epoch, end_of_epoch + 1):
        a, b = _state(two, update), _state(one, update)
        _assert_same_parameters(a["model"], b["model"])
        assert a["progress"]["epoch"] == b["progress"]["epoch"]
        assert a["progress"]["batch"] == b["progress"]["batch"]
    records = [json.loads(line) for line in (two / "metrics.jsonl").read_text().splitlines()]
    train_updates = [r["update"] for r in records if r["type"] == "train"]
    assert train_updates == list(range(1, end_of_epoch + 2))  # rank 0 alone writes the log
    valid_updates = [r["update"] for r in records if r["type"] == "valid"]
    assert valid_updates == list(range(5, end_of_epoch + 2, 5))  # rank 0 validates, once

    # Resume the two-process run with one process and update_freq 2: the same updates follow.
    err = _finish(
        _nmt_train(data_dir, two, ["train.update_freq=2", f"train.max_updates={end_of_epoch + 3}"], 1)
    )
    assert f"resuming {two} at update {end_of_epoch + 1}" in err
    resumed, reference_state = _state(two, end_of_epoch + 3), _state(one, end_of_epoch + 3)
    _assert_same_parameters(resumed["model"], reference_state["model"])
    assert resumed["progress"]["batch"] == reference_state["progress"]["batch"]


@needs_gloo
@pytest.mark.slow  # a two-process training: about 5 s
@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="finds the worker processes in /proc")
def test_a_signal_to_one_process_stops_both_at_the_same_update(data_dir: Path, tmp_path: Path):
    run = tmp_path / "run"
    launcher = _nmt_train(
        data_dir,
        run,
        ["train.max_updates=0", "train.save_every_updates=0", "train.valid_every_updates=0"],
        2,
    )
    metrics = run / "metrics.jsonl"
    wait_until(
        lambda: metrics.exists() and len(metrics.read_text().splitlines()) >= 3,
        "both processes train (3 updates logged)",
        process=launcher,
    )
    rank1 = _worker_pid(launcher.pid, rank=1)
    os.kill(rank1, signal.SIGTERM)
    _, err = launcher.communicate(timeout=60)
    # Rank 1 saved and exits 143, as a process stopped by SIGTERM does (torchrun then reports the
    # job unfinished); rank 0 stopped at the same update.
    assert launcher.returncode != 0 and "exitcode: 143" in err, err[-3000:]
    assert "stopped by SIGTERM" in err and "stopped by a signal to another process" in err
    last = torch.load(run / "checkpoints" / "checkpoint_last.pt", weights_only=True)
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert last["progress"]["update"] == records[-1]["update"]


def _worker_pid(launcher_pid: int, rank: int) -> int:
    """The pid of the torchrun worker with RANK=rank (a child of the launcher)."""
    for task in Path(f"/proc/{launcher_pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            environ = Path(f"/proc/{child}/environ").read_bytes().split(b"\0")
            if f"RANK={rank}".encode() in environ:
                return int(child)
    raise AssertionError(f"no worker with RANK={rank} under pid {launcher_pid}")


@needs_gloo
@pytest.mark.slow  # two processes train a few updates: about 5 s
def test_a_killed_process_ends_the_others_with_one_line(data_dir: Path, tmp_path: Path):
    """Started without torchrun (as `srun` would, from the environment), so that no launcher
    stops the survivor: it must find out itself, at once, and say so in one line."""
    with socket.socket() as probe:  # a free port for the rendezvous
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    run = tmp_path / "run"
    world = {"WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    overrides = ["train.max_updates=0", "train.save_every_updates=2", "train.valid_every_updates=0"]
    ranks = [
        _nmt_train(data_dir, run, overrides, 1, env={**world, "RANK": str(r), "LOCAL_RANK": str(r)})
        for r in (0, 1)
    ]
    wait_until(
        lambda: (run / "checkpoints" / "checkpoint_last.pt").exists(), "a checkpoint", process=ranks[0]
    )
    ranks[1].kill()
    ranks[1].communicate(timeout=60)
    _, err = ranks[0].communicate(timeout=60)  # a hang fails here
    errors = [line for line in err.splitlines() if line.startswith("nmt: error:")]
    assert ranks[0].returncode == 1, err[-3000:]
    assert len(errors) == 1 and "another training process stopped" in errors[0], err[-3000:]
    assert f"kept in {run / 'checkpoints'}" in errors[0] and "Traceback" not in err


@needs_gloo
@pytest.mark.slow  # a two-process training of one update: about 4 s
def test_rank_0_decides_the_cpu_precision_for_all(data_dir: Path, tmp_path: Path):
    """A recipe's bf16 on a CPU depends on a timing; processes that measured differently must
    not refuse to train (nor train in two precisions): rank 0's measure holds for all."""
    program = tmp_path / "measured.py"
    program.write_text(
        "import os\n"
        "import nmt_cli.commands.train as command\n"
        "from nmt_cli.__main__ import console\n"
        "command.cpu_bf16_speedup = lambda: 0.5 if os.environ['RANK'] == '0' else 2.0\n"
        "console()\n"
    )
    run = tmp_path / "run"
    overrides = ['train.precision="bf16"', "train.max_updates=1"]
    _finish(_nmt_train(data_dir, run, overrides, 2, program=(str(program),)))
    assert 'precision = "fp32"' in (run / "config.toml").read_text()
    assert _state(run, 1)["config"]["train"]["precision"] == "fp32"


@pytest.mark.parametrize(
    ("error", "size", "said"),
    [
        (
            RuntimeError("[../gloo/transport/tcp/pair.cc:534] Connection closed by peer [127.0.0.1]:41234"),
            2,
            "Connection closed by peer [127.0.0.1]:41234",
        ),
        (RuntimeError("Connection reset by peer"), 2, "Connection reset by peer"),
        # This process's own failure inside NCCL keeps its words: no peer is to blame.
        (dist.DistBackendError("NCCL error: unhandled cuda error\nCuda failure 'out of memory'"), 2, ""),
        (RuntimeError("Connection closed by peer"), 1, ""),  # one process: no peer
        (ValueError("Connection closed"), 2, ""),
    ],
    ids=["gloo closed", "reset", "nccl oom", "one process", "not a runtime error"],
)
def test_only_a_closed_connection_is_taken_for_a_lost_process(error: Exception, size: int, said: str) -> None:
    assert lost_peer(error, World(rank=0, size=size, local_rank=0)) == said
