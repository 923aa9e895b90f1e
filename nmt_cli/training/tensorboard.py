"""train.tensorboard (`nmt train --tensorboard DIR`): the train and valid records of
metrics.jsonl also as TensorBoard scalars, in DIR/<the run directory's name>, one point per
record at its update ("train/loss", "valid/bleu", ...).

Written by rank 0 only, at the records only (the event file's own thread writes to disk), so the
updates never wait for it. A resumed run writes from its checkpoint's update on, and its first
event is a restart at the next update: TensorBoard hides what a killed session wrote past the
checkpoint, which this session writes again, so each curve has one point per logged update.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from nmt_cli.errors import InputError, optional_import_failure
from nmt_cli.report import MetricsLog, Reporter

MISSING = (
    'TensorBoard logs (--tensorboard, train.tensorboard) need tensorboard: pip install "nmt-cli[tensorboard]"'
)
SECTIONS = ("train", "valid")  # the records that are curves; skip records are single events
NOT_CURVES = {"type", "update"}


def require() -> None:
    """Refuse, in one line, a run that asks for TensorBoard logs without the extra (before its
    data is loaded and its first update)."""
    try:
        import tensorboard  # noqa: F401
        import torch.utils.tensorboard  # noqa: F401
    except ImportError as err:
        raise optional_import_failure(err, MISSING, "tensorboard") from None


def log_directory(logdir: str, run_dir: Path) -> Path:
    """Where the run's event files go: a folder named after the run directory, so that the runs
    logged to one DIR are told apart (and compared) by TensorBoard."""
    return Path(logdir) / run_dir.resolve().name


class MirroredLog(MetricsLog):
    """metrics.jsonl, whose train and valid records are also written as TensorBoard scalars.
    A failed TensorBoard write is said once and the run goes on: metrics.jsonl keeps every record."""

    def __init__(self, path: Path, writer: Any, reporter: Reporter) -> None:
        super().__init__(path)
        self.writer: Any = writer  # None once a write failed
        self.reporter = reporter

    def write(self, record: dict) -> None:
        super().write(record)
        if self.writer is None or record.get("type") not in SECTIONS:
            return
        with self._or_give_up():
            for name, value in record.items():
                if name not in NOT_CURVES and isinstance(value, int | float) and not isinstance(value, bool):
                    self.writer.add_scalar(f"{record['type']}/{name}", value, record["update"])

    def close(self) -> None:
        with self._or_give_up():
            if self.writer is not None:
                self.writer.close()  # flushes what is queued
        self.writer = None

    @contextlib.contextmanager
    def _or_give_up(self) -> Iterator[None]:
        try:
            yield
        except OSError as err:  # a full disk, a folder gone: the writer's thread raises it on the next call
            self.reporter.warn(
                f"train.tensorboard: cannot write {self.writer.get_logdir()} ({err.strerror or err}); "
                "no more TensorBoard points this session, metrics.jsonl keeps the records"
            )
            self.writer = None


@contextlib.contextmanager
def metrics_log(
    run_dir: Path, logdir: str, resume_update: int, reporter: Reporter, writes: bool
) -> Iterator[MetricsLog]:
    """The run's metrics.jsonl for the session; mirrored to TensorBoard where `logdir` is given
    and this process `writes` (rank 0), and closed (flushed) however the session ends."""
    path = run_dir / "metrics.jsonl"
    if not logdir or not writes:
        yield MetricsLog(path)
        return
    from torch.utils.tensorboard import SummaryWriter

    folder = log_directory(logdir, run_dir)
    try:
        # The restart event at resume_update + 1 hides the points of a killed session past its
        # checkpoint; a new run (0) hides those of a run of the same name in the same DIR.
        writer = SummaryWriter(str(folder), purge_step=resume_update + 1)
    except OSError as err:
        raise InputError(
            f"train.tensorboard {logdir}: cannot write {folder} ({err.strerror or err}); choose a writable "
            "directory"
        ) from None
    log = MirroredLog(path, writer, reporter)
    try:
        yield log
    finally:
        log.close()
