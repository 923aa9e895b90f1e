"""When training stops: every limit is checked in `check`, after each update (a signal and the
clock as agreed among the processes, so that all of them stop, and set the learning rate, alike)
and before a resumed run's first update (`nothing_to_do`). Why it stopped is a `Stop`."""

from __future__ import annotations

import dataclasses
import signal
from dataclasses import dataclass
from typing import Literal, cast

import torch

from nmt_cli.config import TrainConfig
from nmt_cli.training import distributed
from nmt_cli.training.bookkeeping import Progress
from nmt_cli.training.distributed import World

StopKind = Literal["signal", "limit", "patience", "nothing to do"]


@dataclass(frozen=True)
class Stop:
    """Why training stopped, in the words the command says it."""

    kind: StopKind
    message: str
    signal: signal.Signals | None = None
    """The signal this process received (kind "signal"): the command exits 128 + its number.
    None where another process was signalled: this one stopped with the others, as asked."""

    def at(self, update: int) -> Stop:
        """The same stop, saying at which update."""
        return dataclasses.replace(self, message=f"{self.message} at update {update}")


@dataclass(frozen=True)
class Agreed:
    """What the processes agreed after an update (`agree`)."""

    signalled: bool = False
    """Any process received a stop signal."""
    out_of_time: bool = False
    """Any process's clock reached train.max_minutes."""
    spent: float = 0.0
    """The share of the budget spent (the processes' mean), for the learning-rate schedule."""


def agree(
    own_signal: str | None, tc: TrainConfig, progress: Progress, world: World, device: torch.device
) -> Agreed:
    """Whether any process was signalled or ran out of time, and the share of the budget spent
    (clocks differ: the processes' mean): one small all-reduce of host values, none on one
    process, so that all processes stop and set the learning rate alike."""
    signalled, timed_out, spent = distributed.all_reduce_sum(
        [
            float(own_signal is not None),
            float(_out_of_time(tc, progress)),
            budget_spent(tc, progress.update + 1, progress.train_seconds),
        ],
        world,
        device,
    )
    return Agreed(signalled > 0, timed_out > 0, spent / world.size)


def budget_spent(tc: TrainConfig, update: int, train_seconds: float) -> float:
    """How much of the run's budget `update` and `train_seconds` use, from 0 to 1: the larger
    share of max_updates and max_minutes (0 where neither is set)."""
    by_updates = update / tc.max_updates if tc.max_updates else 0.0
    by_time = train_seconds / (60 * tc.max_minutes) if tc.max_minutes else 0.0
    return min(1.0, max(by_updates, by_time))


def check(
    tc: TrainConfig, progress: Progress, agreed: Agreed | None = None, own_signal: str | None = None
) -> Stop | None:
    """The first stop condition met, or None: a signal, train.max_updates, train.max_minutes,
    train.max_epochs, train.patience. After an update, `agreed` says whether a process was
    signalled (`own_signal` names this one's) and whether the clock ran out; without it (before
    a run's first update) the clock is `progress`'s. Every process checks alike: the patience
    counts are rank 0's (`share_patience`)."""
    if agreed is not None and agreed.signalled:
        received = signal.Signals[own_signal] if own_signal else None
        return Stop("signal", f"stopped by {own_signal or 'a signal to another process'}", received)
    if tc.max_updates and progress.update >= tc.max_updates:
        return Stop("limit", f"reached train.max_updates = {tc.max_updates}")
    if agreed.out_of_time if agreed is not None else _out_of_time(tc, progress):
        return Stop("limit", f"reached train.max_minutes = {tc.max_minutes:g}")
    if tc.max_epochs and progress.epoch > tc.max_epochs:
        return Stop("limit", f"reached train.max_epochs = {tc.max_epochs}")
    if tc.patience and progress.best_metric == tc.best_metric and progress.bad_validations >= tc.patience:
        without = f"did not improve for {progress.bad_validations} validations"
        return Stop("patience", f"early stopping (valid {tc.best_metric} {without})")
    return None


def nothing_to_do(tc: TrainConfig, progress: Progress) -> Stop | None:
    """The limit a resumed run has met already (the same command run again), or None."""
    met = check(tc, progress)
    if met is None:
        return None
    what = f"stopped early (train.patience = {tc.patience})" if met.kind == "patience" else met.message
    return Stop(
        "nothing to do",
        f"nothing to do: the run {what} at update {progress.update}; raise it with --set to go on",
    )


def share_patience(progress: Progress, world: World) -> None:
    """Give every process rank 0's validation counts, which only rank 0 keeps (it alone
    validates), so that all of them stop early alike."""
    shared = distributed.from_main((progress.best_metric, progress.bad_validations), world)
    progress.best_metric, progress.bad_validations = cast(tuple[str, int], shared)


def _out_of_time(tc: TrainConfig, progress: Progress) -> bool:
    return bool(tc.max_minutes) and progress.train_seconds >= 60 * tc.max_minutes
