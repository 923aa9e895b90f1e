"""When training stops: the limits a resumed run has met already, and after each update a
signal, train.max_updates or train.max_minutes, agreed among the processes so that all of
them stop (and set the learning rate) alike."""

from __future__ import annotations

import torch

from nmt_cli.config import TrainConfig
from nmt_cli.training import distributed
from nmt_cli.training.bookkeeping import Progress
from nmt_cli.training.distributed import World


def agree(
    own_signal: str | None, tc: TrainConfig, progress: Progress, world: World, device: torch.device
) -> tuple[bool, bool, float]:
    """Whether any process was signalled or ran out of time, and the share of the budget spent
    (clocks differ: the processes' mean): one small all-reduce of host values, none on one
    process, so that all processes stop and set the learning rate alike. Returns (signalled,
    out of time, spent)."""
    out_of_time = bool(tc.max_minutes) and progress.train_seconds >= 60 * tc.max_minutes
    signalled, timed_out, spent = distributed.all_reduce_sum(
        [
            float(own_signal is not None),
            float(out_of_time),
            budget_spent(tc, progress.update + 1, progress.train_seconds),
        ],
        world,
        device,
    )
    return signalled > 0, timed_out > 0, spent / world.size


def budget_spent(tc: TrainConfig, update: int, train_seconds: float) -> float:
    """How much of the run's budget `update` and `train_seconds` use, from 0 to 1: the larger
    share of max_updates and max_minutes (0 where neither is set)."""
    by_updates = update / tc.max_updates if tc.max_updates else 0.0
    by_time = train_seconds / (60 * tc.max_minutes) if tc.max_minutes else 0.0
    return min(1.0, max(by_updates, by_time))


def finished(tc: TrainConfig, progress: Progress) -> str:
    """Which limit a resumed run has met already, or ""."""
    if tc.max_updates and progress.update >= tc.max_updates:
        return f"reached train.max_updates = {tc.max_updates}"
    if tc.max_minutes and progress.train_seconds >= 60 * tc.max_minutes:
        return f"reached train.max_minutes = {tc.max_minutes:g}"
    if tc.max_epochs and progress.epoch > tc.max_epochs:
        return f"reached train.max_epochs = {tc.max_epochs}"
    if tc.patience and progress.best_metric == tc.best_metric and progress.bad_validations >= tc.patience:
        return f"stopped early (train.patience = {tc.patience})"
    return ""


def stop_reason(
    tc: TrainConfig, progress: Progress, signalled: bool, own_signal: str | None, out_of_time: bool
) -> str:
    """Why to stop after an update (agreed by `agree`), or ""."""
    if signalled:
        return f"stopped by {own_signal or 'a signal to another process'}"
    if tc.max_updates and progress.update >= tc.max_updates:
        return f"reached train.max_updates = {tc.max_updates}"
    if out_of_time:
        return f"reached train.max_minutes = {tc.max_minutes:g}"
    return ""
