"""The training loop (§5): token batches, accumulation, mixed precision, validation, checkpoints.

`train()` sets the run up and returns why it stopped, a `stopping.Stop`. `_Run` carries it from
update to update: each epoch (`_Run.epoch`) builds its batches and takes `update_freq` of them at
a time (`update_freq` x world size under torchrun, shared out among the processes) for an update
(`_Run.update`: accumulate gradients normalised by the update's target tokens, step Adam with the
schedule's learning rate), checks the stop conditions (`stopping.check`), and at intervals logs,
validates and saves (`_Run.at_intervals`). With several processes only rank 0 logs, validates
and saves; `distributed.py` holds the collectives, `stopping.py` the stop conditions and
`run_state.py` what a checkpoint saves and a resumed run restores.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import cast

import numpy as np
import torch

from nmt_cli import checkpoint
from nmt_cli.config import TrainConfig
from nmt_cli.data.batching import collate, make_batches, weighted_epoch
from nmt_cli.data.prefetch import Ahead
from nmt_cli.errors import RunFailure
from nmt_cli.report import MetricsLog
from nmt_cli.training import distributed, run_state, stopping, tensorboard
from nmt_cli.training.bookkeeping import Bookkeeping, Progress
from nmt_cli.training.precision import HalfWeights
from nmt_cli.training.schedule import learning_rate
from nmt_cli.training.session import Session
from nmt_cli.training.signals import StopSignal
from nmt_cli.training.stopping import Agreed, Stop
from nmt_cli.training.update import accumulate_gradients, apply_update, packed, with_real_rows
from nmt_cli.training.validate import validate


def train(s: Session, resume: checkpoint.Checkpoint | None) -> Stop:
    """Train until a stop condition; returns why it stopped."""
    tc, model, world = s.cfg.train, s.model, s.world
    # The bf16 copy of train.half_weights, or None: Adam updates `model`'s fp32 weights either way.
    half = HalfWeights(model) if tc.half_weights and tc.precision == "bf16" else None
    # Autocast would put the copy's layer norms and residual stream back in fp32.
    precision = "fp32" if half is not None else tc.precision
    net = distributed.wrap(model if half is None else half.copy, world, s.device)  # forward and backward
    if tc.compile:
        # Shares the model's parameters: validation and checkpoints use `model` itself.
        net = compiled(net)
    optimizer, scaler, progress = run_state.start_state(s, resume)
    done = stopping.nothing_to_do(tc, progress)
    if done is not None:  # the same command run again: no update past the limit, no checkpoint pushed out
        return done
    board = tensorboard.metrics_log(s.run_dir, tc.tensorboard, progress.update, s.reporter, world.is_main)
    with board as metrics:  # closed (its TensorBoard events flushed) however the session ends
        book = Bookkeeping(tc, progress, scaler, metrics, s.reporter, s.world.is_main, s.run_dir)
        run = _Run(
            s,
            net,
            half,
            precision,
            optimizer,
            scaler,
            progress,
            book,
            metrics,
            lengths=(s.train_data.src.lengths(), s.train_data.tgt.lengths()),  # read once: large
            multiple=shape_multiple(tc, s.device),
            base_seconds=progress.train_seconds,
            saved=resume.update if resume is not None else None,
        )
        model.train()
        if half is not None:
            half.copy.train()
        with StopSignal(s.reporter.info if world.is_main else None) as signals:
            try:
                stop = run.until_stopped(signals)
            finally:
                # The updates since the last record, so that a run that stops before its first log
                # interval (or fails) still leaves one.
                book.settle()
                if world.is_main and book.window.updates:
                    book.log()
            book.bar.close()
            if world.is_main and run.saved != progress.update:
                run_state.save(s, model, optimizer, scaler, progress)
    distributed.barrier(world, s.device)  # the others wait until rank 0's last checkpoint is written
    return stop.at(progress.update)


@dataclass
class _Run:
    """What `train` carries from one update to the next within this session."""

    s: Session
    net: torch.nn.Module
    """Runs forward and backward (see `train`); validation and checkpoints use the session's model."""
    half: HalfWeights | None
    precision: str
    optimizer: torch.optim.Adam
    scaler: torch.amp.GradScaler
    progress: Progress
    book: Bookkeeping
    metrics: MetricsLog
    lengths: tuple[np.ndarray, np.ndarray]
    """The training pairs' source and target lengths."""
    multiple: int
    """What batch lengths are padded to (`shape_multiple`)."""
    base_seconds: float
    """The run's training time before this session."""
    saved: int | None = None
    """The update checkpoint_last.pt holds (None before a run's first save). Not read from the
    numbered files: a save that stopped between the numbered checkpoint and the last leaves one
    of a newer update, which must not stop the last from being written."""
    agreed: Agreed = field(default_factory=Agreed)
    """What the processes agreed after the last update."""
    session_start: float = field(default_factory=time.monotonic)
    last_save: float = field(default_factory=time.monotonic)

    def until_stopped(self, signals: StopSignal) -> Stop:
        """Train epoch after epoch until a stop condition is met."""
        while True:
            stop = self.epoch(signals)
            if stop is not None:
                return stop

    def epoch(self, signals: StopSignal) -> Stop | None:
        """The current epoch's updates from where the run stands, until a stop; at the epoch's end,
        the next epoch's place, and whether train.max_epochs is reached."""
        s, progress = self.s, self.progress
        batches = _epoch_batches(s, *self.lengths, progress.epoch, self.multiple)
        self.book.epoch_size = len(batches)
        stop = None
        with Ahead(_updates(s, batches, progress.batch, self.multiple)) as updates:
            for group, tensors, idle in updates:
                stop = self.step(group, tensors, idle, signals)
                if stop is not None:
                    break
        if progress.batch >= len(batches):
            progress.epoch, progress.batch = progress.epoch + 1, 0
            stop = stop or stopping.check(s.cfg.train, progress, self.agreed, signals.received)
        return stop

    def step(
        self, group: list[np.ndarray], tensors: list[dict], idle: bool, signals: StopSignal
    ) -> Stop | None:
        """One update, then the stop check and, where due, the log, validation and save; returns
        why to stop (None to go on)."""
        self.update(group, tensors, idle, signals)
        stop = stopping.check(self.s.cfg.train, self.progress, self.agreed, signals.received)
        minutes_due = self.minutes_due()
        if self.book.due(stop is not None) or minutes_due:
            return self.at_intervals(signals, minutes_due)
        return None

    def update(self, group: list[np.ndarray], tensors: list[dict], idle: bool, signals: StopSignal) -> None:
        """Accumulate the gradients of this process's share of `group`, step Adam at the schedule's
        learning rate and queue the update's figures; `agreed` then says whether any process was
        signalled and whether any ran out of time."""
        s, tc, progress = self.s, self.s.cfg.train, self.progress
        distributed.seed_update(tc.seed, progress.update, s.world)
        loss = accumulate_gradients(
            self.net,
            tensors,
            tc.label_smoothing,
            self.precision,
            self.scaler,
            s.device,
            ntokens=distributed.target_tokens(group, self.lengths[1]),
            idle=idle,
        )
        distributed.sum_in_place(loss.sums, s.world)  # every process skips alike
        progress.batch += len(group)
        progress.train_seconds = self.base_seconds + time.monotonic() - self.session_start
        self.agreed = stopping.agree(signals.received, tc, progress, s.world, s.device)
        spent = self.agreed.spent
        lr = learning_rate(
            progress.update + 1, tc.lr_schedule, s.cfg.model.d_model, tc.warmup, tc.lr_scale, tc.lr, spent
        )
        if self.half is not None:
            self.half.to_master()
        outcome = apply_update(s.model, self.optimizer, self.scaler, lr, tc.clip_norm, loss.sums[0])
        if self.half is not None:
            self.half.from_master()
        self.book.queue(loss, outcome, lr)  # counted as stepped until settled

    def minutes_due(self) -> bool:
        """Whether train.save_every_minutes have passed since the last save."""
        return 0 < self.s.cfg.train.save_every_minutes * 60 <= time.monotonic() - self.last_save

    def at_intervals(self, signals: StopSignal, minutes_due: bool) -> Stop | None:
        """Settle the queued updates, then log, validate and save where due at the exact count;
        returns why to stop (None to go on)."""
        s, tc, progress, book = self.s, self.s.cfg.train, self.progress, self.book
        book.settle()  # the update count is exact from here on
        own_signal = signals.received  # as the update was agreed, not after a long validation
        if s.world.is_main and book.log_due(tc.log_every_updates):
            book.log()
        if book.first_time(tc.valid_every_updates, "valid"):
            if s.world.is_main:
                _validate(s, self.metrics, progress)
            stopping.share_patience(progress, s.world)
        stop = stopping.check(tc, progress, self.agreed, own_signal)
        if s.world.is_main and (book.first_time(tc.save_every_updates, "save") or minutes_due):
            run_state.save(s, s.model, self.optimizer, self.scaler, progress)
            self.last_save, self.saved = time.monotonic(), progress.update
        return stop


def compiled(net: torch.nn.Module) -> torch.nn.Module:
    """`net` through torch.compile, with dynamic shapes from the first batch on: batch lengths
    and rows vary, and compiling for the first shape alone would compile again at the second."""
    return cast(torch.nn.Module, torch.compile(net, dynamic=True))


def _epoch_batches(
    s: Session, src_len: np.ndarray, tgt_len: np.ndarray, epoch: int, multiple: int
) -> list[np.ndarray]:
    """This epoch's batches of pair indices (each corpus's share drawn anew where weighted)."""
    tc = s.cfg.train
    pairs = None
    if tc.corpus_weights:
        pairs = weighted_epoch(s.corpus_sizes, tc.corpus_weights, tc.seed, epoch)
    batches = make_batches(src_len, tgt_len, tc.max_tokens, tc.seed, epoch, pairs=pairs, multiple=multiple)
    if not batches:
        raise RunFailure("no training pair fits in train.max_tokens; raise train.max_tokens")
    return batches


def shape_multiple(tc: TrainConfig, device: torch.device) -> int:
    """What batch lengths are padded to, and rows cut at: train.pad_to_multiple, or where it is
    0, 8 for a compiled model on a GPU (few distinct shapes for the compiler) and 1 otherwise.
    Eager kernels take any length (SDPA's flash and memory-efficient attention; the matmuls'
    fixed sizes are d_model, d_ff and the vocabulary), and padding to 8 would add tokens computed
    for nothing (bench/collate_speed.py prints the share of real tokens at each multiple)."""
    if tc.pad_to_multiple:
        return tc.pad_to_multiple
    return 8 if tc.compile and device.type == "cuda" else 1


def _updates(
    s: Session, batches: list[np.ndarray], start: int, multiple: int
) -> Iterator[tuple[list[np.ndarray], list[dict], bool]]:
    """The updates of an epoch from batch `start` on: (the update's batches, this process's share
    collated, whether it is idle). Run ahead in a thread by `train`."""
    pin = s.device.type == "cuda"
    data, tc = s.train_data, s.cfg.train
    while start < len(batches):
        group, mine = distributed.update_share(batches, start, tc.update_freq, s.world)
        tensors = []
        for idx in mine or group[:1]:  # group[:1]: a stand-in for an idle process
            pairs = [data.src[i] for i in idx], [data.tgt[i] for i in idx]
            padded = collate(*pairs, s.cfg.model.start_id, multiple)
            batch = packed(padded) if tc.packed else with_real_rows(padded)
            tensors.append({k: v.pin_memory() for k, v in batch.items()} if pin else batch)
        yield group, tensors, not mine
        start += len(group)


def _validate(s: Session, metrics: MetricsLog, progress: Progress) -> None:
    """Validate, keep the best checkpoint by train.best_metric, and count the validations without
    improvement (for train.patience: `stopping.check`)."""
    result = validate(s.model, s.valid_data, s.cfg, s.device, s.tgt_processor)
    metric = s.cfg.train.best_metric
    if metric != progress.best_metric:  # changed on resume: start its best (and patience) afresh
        progress.best_metric, progress.bad_validations, progress.best_valid_score = metric, 0, -math.inf
        progress.best_valid_loss = math.inf
    if metric == "loss":
        improved = result["loss"] < progress.best_valid_loss
    else:
        improved = result[metric] > progress.best_valid_score
        progress.best_valid_score = max(progress.best_valid_score, result[metric])
    progress.best_valid_loss = min(progress.best_valid_loss, result["loss"])
    progress.bad_validations = 0 if improved else progress.bad_validations + 1
    record = {"type": "valid", "update": progress.update, **result, "best_loss": progress.best_valid_loss}
    if metric != "loss":
        record[f"best_{metric}"] = progress.best_valid_score
    metrics.write({**record, "wall_s": round(progress.train_seconds, 1)})
    scores = "".join(
        f", {name} {result[key]:.2f}" for name, key in (("BLEU", "bleu"), ("chrF", "chrf")) if key in result
    )
    s.reporter.info(
        f"valid at update {progress.update}: loss {result['loss']:.3f}, ppl {result['ppl']:.2f}{scores}"
    )
    if improved:
        run_state.save_best(s, progress)
