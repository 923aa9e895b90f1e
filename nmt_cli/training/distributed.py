"""Training on several processes with torch.distributed: torchrun's environment, the process
group (NCCL on GPU, gloo on CPU), the DDP wrapper, how the batches of an update are shared
out, and the few collectives the training loop needs.

`torchrun` starts one process per device and tells each who it is through RANK, WORLD_SIZE
and LOCAL_RANK (plus MASTER_ADDR/MASTER_PORT or its own rendezvous store). A plain `nmt train`
has none of them: its world is one process and every helper below is then a no-op, so the
single-process path runs no collective at all.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from nmt_cli.errors import InputError

# How long a rank waits in a collective before giving up. Ranks wait for rank 0 while it
# validates (BLEU decoding of the valid set) and writes checkpoints, so this is generous.
COLLECTIVE_TIMEOUT = timedelta(minutes=30)


@dataclass(frozen=True)
class World:
    """This process's place among the training processes."""

    rank: int = 0
    """0 .. size-1 over all nodes; rank 0 logs, validates and writes checkpoints."""
    size: int = 1
    """Number of processes (one per device)."""
    local_rank: int = 0
    """Index of this process on its node: the GPU it uses."""

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.size > 1


def update_share(
    batches: list[np.ndarray], start: int, update_freq: int, world: World
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The batches of the update starting at `start` in the epoch's list, and this process's share.

    An update takes update_freq x world-size consecutive batches of the list that every process
    builds identically; rank r takes the r-th, (r + size)-th, ... of them. So the processes
    together train on what one process with update_freq x world-size would, and the effective
    batch is max_tokens x update_freq x world size."""
    group = batches[start : start + update_freq * world.size]
    return group, group[world.rank :: world.size]


def target_tokens(group: list[np.ndarray], tgt_lengths: np.ndarray) -> int:
    """Non-padding target tokens of the batches in `group` (each target gains an EOS), from the
    lengths every process has: the normaliser of an update is known without communication."""
    return sum(int(tgt_lengths[idx].sum()) + len(idx) for idx in group)


def from_env(environ: Mapping[str, str] = os.environ) -> World:
    """The world torchrun (or `srun` with these variables) describes; one process without them."""
    if "WORLD_SIZE" not in environ:
        return World()
    try:
        world = World(
            rank=int(environ.get("RANK", "0")),
            size=int(environ["WORLD_SIZE"]),
            local_rank=int(environ.get("LOCAL_RANK", "0")),
        )
    except ValueError:
        raise InputError(
            "RANK, WORLD_SIZE and LOCAL_RANK must be integers; launch with torchrun (see docs/distributed.md)"
        ) from None
    if world.size < 1 or not 0 <= world.rank < world.size or world.local_rank < 0:
        raise InputError(
            f"RANK={world.rank}, WORLD_SIZE={world.size}, LOCAL_RANK={world.local_rank}: need "
            "0 <= RANK < WORLD_SIZE; launch with torchrun (see docs/distributed.md)"
        )
    return world


def local_device(device: torch.device, world: World) -> torch.device:
    """The device of this process: with several processes on GPUs, cuda:LOCAL_RANK."""
    if not world.distributed or device.type != "cuda":
        return device
    if device.index is not None:
        raise InputError(
            f"--device {device}: under torchrun each process takes the GPU of its LOCAL_RANK; "
            "use --device cuda (or auto) and choose GPUs with CUDA_VISIBLE_DEVICES"
        )
    visible = torch.cuda.device_count()
    if world.local_rank >= visible:
        raise InputError(
            f"LOCAL_RANK {world.local_rank} but only {visible} GPU(s) visible on this node; "
            "start at most one process per GPU (torchrun --nproc_per_node)"
        )
    torch.cuda.set_device(world.local_rank)
    return torch.device("cuda", world.local_rank)


def init(world: World, device: torch.device) -> None:
    """Join the process group: NCCL between GPUs, gloo between CPU processes."""
    if world.distributed and not dist.is_initialized():
        backend = "nccl" if device.type == "cuda" else "gloo"
        dist.init_process_group(backend, rank=world.rank, world_size=world.size, timeout=COLLECTIVE_TIMEOUT)


def cleanup(world: World) -> None:
    if world.distributed and dist.is_initialized():
        dist.destroy_process_group()


def wrap(model: torch.nn.Module, world: World, device: torch.device) -> torch.nn.Module:
    """The module to train through: DDP around `model` with several processes, else `model`.

    Wrapping broadcasts rank 0's parameters, so every rank starts from the same weights.
    The gradient all-reduce sums instead of DDP's default mean: the loop already divides
    each rank's loss by the target tokens of the whole update, so the sum over ranks is the
    gradient a single process would get for the same batches."""
    if not world.distributed:
        return model
    # The model's buffers are constants (the sinusoid table), equal on every rank: no need to
    # broadcast them before every forward. (torch >= 2.12 renamed the option.)
    no_buffer_sync: dict[str, Any] = (
        {"forward_sync_buffers": False}
        if "forward_sync_buffers" in inspect.signature(DistributedDataParallel).parameters
        else {"broadcast_buffers": False}
    )
    ddp = DistributedDataParallel(
        model, device_ids=[device.index] if device.type == "cuda" else None, **no_buffer_sync
    )
    ddp.register_comm_hook(None, _sum_gradients)
    return ddp


def _sum_gradients(process_group, bucket):
    """DDP communication hook: all-reduce (sum) one bucket of gradients, no division by the world
    size. (Not annotated: DDP compares the annotations with dist.GradBucket and Future[Tensor],
    and under `from __future__ import annotations` they would be strings.)"""
    work = dist.all_reduce(bucket.buffer(), group=process_group, async_op=True)
    return work.get_future().then(lambda fut: fut.value()[0])


def all_reduce_sum(values: list[float], world: World, device: torch.device) -> list[float]:
    """Elementwise sums over all ranks (float64); the values themselves on one process."""
    if not world.distributed:
        return values
    tensor = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(tensor)
    return tensor.tolist()


def sum_in_place(tensor: torch.Tensor, world: World) -> None:
    """Sum `tensor` over all ranks where it lies, without the host reading it (on GPUs NCCL
    queues the all-reduce on the device's stream)."""
    if world.distributed:
        dist.all_reduce(tensor)


def from_main(value: object, world: World) -> object:
    """Rank 0's `value` on every rank (a picklable object, e.g. an early-stopping decision)."""
    if not world.distributed:
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def check_same(value: object, what: str, world: World) -> None:
    """Fail on every rank if the ranks disagree on `value` (say, the update they resume from)."""
    if not world.distributed:
        return
    values: list[object] = [None] * world.size
    dist.all_gather_object(values, value)
    if any(v != values[0] for v in values):
        raise InputError(
            f"the processes disagree on {what}: {values} by rank; every node must see the same "
            "--data and --out (a shared filesystem)"
        )


def lost_peer(err: BaseException, world: World) -> str:
    """What a collective that failed because another process is gone says, in a few words (gloo:
    "Connection closed by peer [host]:port"); "" for any other error, which keeps its own words
    (a CUDA out-of-memory inside NCCL is this process's failure). A process that dies, even by
    SIGKILL, closes its connections, so the others fail in their next collective, never wait."""
    if not world.distributed or not isinstance(err, RuntimeError):
        return ""
    said = re.search(r"Connection (?:closed|reset|refused)[^\n]*", str(err))
    return said.group(0).rstrip(". ") if said else ""


def barrier(world: World, device: torch.device) -> None:
    if world.distributed:
        dist.barrier(device_ids=[device.index] if device.type == "cuda" else None)


def seed_update(seed: int, update: int, world: World) -> None:
    """With several processes, seed the dropout RNG from (seed, rank, update) before each update:
    ranks draw different masks, and a resumed run draws the masks it would have drawn. One
    process keeps its single stream, which checkpoints save and restore."""
    if world.distributed:
        torch.manual_seed(int(np.random.SeedSequence([seed, world.rank, update]).generate_state(1)[0]))


def gradient_sync(model: torch.nn.Module, sync: bool) -> contextlib.AbstractContextManager:
    """Context for one forward/backward: DDP all-reduces its gradients only when `sync` (the
    last backward of an update); a plain module needs no all-reduce."""
    if sync or not isinstance(model, DistributedDataParallel):
        return contextlib.nullcontext()
    return model.no_sync()
