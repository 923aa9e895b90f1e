"""What the host knows of training while the updates run ahead on the device: where training
stands (`Progress`, saved in checkpoints), the updates queued and not yet read, the figures of
the current log window, and the skipped updates.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from nmt_cli.config import TrainConfig
from nmt_cli.errors import RunFailure
from nmt_cli.report import MetricsLog, Reporter, duration
from nmt_cli.training.update import Pending, Settled, UpdateLoss

MAX_BAD_UPDATES = 10  # non-finite updates in a row before the run is declared diverged


@dataclass
class Progress:
    """Where training stands; saved in every checkpoint so a resumed run continues exactly."""

    update: int = 0
    epoch: int = 1
    batch: int = 0
    """Batches of the current epoch already consumed. Every process builds the same batch list,
    so this is a place in that list whatever the number of processes: a run can resume with
    another world size."""
    train_seconds: float = 0.0
    """Wall time spent training over all sessions of this run (for train.max_minutes)."""
    best_valid_loss: float = math.inf
    bad_validations: int = 0
    best_valid_score: float = -math.inf
    """The best valid BLEU or chrF so far, when train.best_metric is one of them."""
    best_metric: str = "loss"
    """The train.best_metric behind bad_validations and checkpoint_best.pt (reset when it changes)."""


class Window:
    """The settled updates since the last train record."""

    def __init__(self, progress: Progress) -> None:
        self.loss = self.nll = 0.0
        self.tokens = self.updates = 0
        self.epoch = 0  # of the window's last update: a record written after its epoch ended is of it
        self.start = time.monotonic()
        self.place = (progress.epoch, progress.batch)  # where the data stood: the pace in batches


class Bookkeeping:
    """What the host knows of the updates: those queued on the device and not yet read, the
    figures of the current log window, and when each periodic task last ran.

    An update counts as stepped from the moment it is queued; `settle` reads the queued figures
    (one synchronisation), takes the skipped updates back off the count, records and warns about
    them, and ends the run once too many in a row were skipped. So the count is exact whenever
    the loop logs, validates, saves or stops, and no update waits for the device before."""

    def __init__(
        self,
        tc: TrainConfig,
        progress: Progress,
        scaler: torch.amp.GradScaler,
        metrics: MetricsLog,
        reporter: Reporter,
        is_main: bool,
        run_dir: Path,
    ):
        self.tc, self.progress, self.scaler, self.metrics = tc, progress, scaler, metrics
        self.reporter, self.is_main, self.run_dir = reporter, is_main, run_dir
        self.pending = Pending()
        self.window = Window(progress)
        self.bad_in_row = 0
        self.lr = 0.0
        self.last = {"valid": progress.update, "save": progress.update}
        self.epoch_size = 0  # batches in the current epoch, set by the loop: the time left to max_epochs
        # A bar on a terminal; elsewhere `log` writes a line per record.
        bar_total = tc.max_updates or None
        self.bar = reporter.bar("train", total=bar_total, unit="upd", initial=progress.update, lines=False)

    def queue(self, loss: UpdateLoss, outcome: torch.Tensor, lr: float) -> None:
        self.pending.add(loss, outcome, (self.progress.epoch, self.progress.batch))
        self.progress.update += 1
        self.bar.update(1)
        self.lr = lr

    def due(self, stopping: bool) -> bool:
        """Whether the queued figures must be read now: the run `stopping`, or a log, validation
        or save due by the provisional count."""
        tc = self.tc
        every = (tc.log_every_updates, tc.valid_every_updates, tc.save_every_updates)
        return stopping or any(n and self.progress.update % n == 0 for n in every)

    def log_due(self, every: int) -> bool:
        return bool(self.window.updates) and self.progress.update % every == 0

    def first_time(self, every: int, task: str) -> bool:
        """Whether `task`, due every `every` updates, is due at this (settled) update and has not
        run at it yet (a skipped update leaves the count where it was)."""
        update = self.progress.update
        if not every or update % every or self.last[task] == update:
            return False
        self.last[task] = update
        return True

    def settle(self) -> None:
        queued = self.pending.settle()
        progress = self.progress
        progress.update -= len(queued)  # the count before the first queued update
        longest_bad = 0
        for done in queued:
            if done.skipped:
                self._skipped(done)
                longest_bad = max(longest_bad, self.bad_in_row)
                continue
            self.bad_in_row = 0
            progress.update += 1
            self.window.loss += done.loss
            self.window.nll += done.nll
            self.window.tokens += done.tokens
            self.window.updates += 1
            self.window.epoch = done.place[0]
        self.bar.update(-sum(done.skipped for done in queued))
        if longest_bad >= MAX_BAD_UPDATES and not self._scaling_helps():
            raise RunFailure(
                f"training diverged: {longest_bad} updates in a row had a non-finite loss or gradient; "
                f"the last good checkpoint is in {self.run_dir / 'checkpoints'}; lower the learning rate "
                "or use --precision fp32"
            )

    def _skipped(self, done: Settled) -> None:
        """Log a skipped update; too many in a row (fp16: once loss scaling cannot help) end the run."""
        self.bad_in_row += 1
        update = self.progress.update
        if self.is_main:
            # Where the data stood once the skipped update's batches were taken: a resumed run
            # redoes the skips past its checkpoint's place, and keeps the records of the others.
            place = {"epoch": done.place[0], "batch": done.place[1]}
            self.metrics.write(
                {"type": "skip", "update": update, **place, "loss": done.loss, "grad_norm": done.grad_norm}
            )
            self.reporter.warn(f"update {update + 1}: non-finite loss or gradient, skipped")

    def _scaling_helps(self) -> bool:
        return self.scaler.is_enabled() and self.scaler.get_scale() > 1e-4

    def log(self) -> None:
        """Write the window's train record and start a new window."""
        window, progress, lr = self.window, self.progress, self.lr
        elapsed = max(time.monotonic() - window.start, 1e-9)
        tokens = max(window.tokens, 1)
        record = {
            "type": "train",
            "update": progress.update,
            "epoch": window.epoch or progress.epoch,
            "loss": window.loss / tokens,
            "nll_loss": window.nll / tokens,
            "ppl": math.exp(min(window.nll / tokens, 100.0)),
            "lr": lr,
            "tokens_per_s": window.tokens / elapsed,
            "updates_per_s": window.updates / elapsed,
            "wall_s": round(progress.train_seconds, 1),
        }
        self.metrics.write(record)
        self.bar.set_postfix_str(
            f"loss {record['loss']:.3f} lr {lr:.2e} {record['tokens_per_s']:,.0f} tok/s "
            f"{record['updates_per_s']:.2f} upd/s"
        )
        if self.reporter.lines_enabled:
            self.reporter.info(self._line(record, elapsed))
        self.window = Window(progress)

    def _line(self, record: dict, elapsed: float) -> str:
        """The record as a log line, with the time left to the stop condition met first."""
        limit = f"/{self.tc.max_updates:,}" if self.tc.max_updates else ""
        left = self.time_left(record["updates_per_s"], elapsed)
        eta = f", {duration(left[0])} left to {left[1]}" if left is not None else ""
        return (
            f"update {record['update']:,}{limit}, epoch {record['epoch']}: loss {record['loss']:.3f}, "
            f"lr {record['lr']:.2e}, {record['tokens_per_s']:,.0f} tok/s, {record['updates_per_s']:.2f} "
            f"upd/s, {duration(self.progress.train_seconds)} trained{eta}"
        )

    def time_left(self, updates_per_s: float, elapsed: float) -> tuple[float, str] | None:
        """Seconds to the first of train.max_updates, max_minutes and max_epochs to be met at the
        current window's pace, and its name; None where none is set (or no pace is known)."""
        tc, progress = self.tc, self.progress
        left = []
        if tc.max_updates and updates_per_s > 0:
            left.append(((tc.max_updates - progress.update) / updates_per_s, "train.max_updates"))
        if tc.max_minutes:
            left.append((60 * tc.max_minutes - progress.train_seconds, "train.max_minutes"))
        if tc.max_epochs and self.epoch_size:
            epoch, batch = self.window.place
            done = (progress.epoch - epoch) * self.epoch_size + progress.batch - batch
            remaining = (tc.max_epochs - progress.epoch + 1) * self.epoch_size - progress.batch
            if done > 0:
                left.append((remaining * elapsed / done, "train.max_epochs"))
        return min(left) if left else None
