"""The training loop (§5): token batches, accumulation, mixed precision, validation, checkpoints.

`train()` reads top to bottom: build batches for the epoch, take `update_freq` of them
(`update_freq` x world size under torchrun, shared out among the processes), accumulate
gradients normalised by the update's target tokens, step Adam with the schedule's learning
rate, then log, validate, save and check the stop conditions. With several processes only
rank 0 logs, validates and saves; `distributed.py` holds the collectives.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from sentencepiece import SentencePieceProcessor

from nmt_cli import checkpoint
from nmt_cli.config import PAD_ID, RunConfig, TrainConfig
from nmt_cli.data.batching import collate, make_batches, weighted_epoch
from nmt_cli.data.corpus import ParallelSplit
from nmt_cli.errors import RunFailure
from nmt_cli.files import replace_with_link
from nmt_cli.model import Transformer
from nmt_cli.recipe import to_dict
from nmt_cli.report import MetricsLog, Reporter
from nmt_cli.training import distributed
from nmt_cli.training.distributed import World
from nmt_cli.training.loss import label_smoothed_nll
from nmt_cli.training.precision import autocast
from nmt_cli.training.schedule import learning_rate
from nmt_cli.training.signals import StopSignal
from nmt_cli.training.validate import validate

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


@dataclass
class Session:
    """What one `nmt train` invocation works with."""

    model: Transformer
    cfg: RunConfig
    train_data: ParallelSplit
    valid_data: ParallelSplit
    languages: tuple[str, str]
    """(source, target) of the corpus, recorded in every checkpoint."""
    run_dir: Path
    spm_models: dict[str, bytes]
    device: torch.device
    reporter: Reporter
    tgt_processor: SentencePieceProcessor
    """The target side's, for validation BLEU."""
    world: World = field(default_factory=World)
    """This process's place among the torchrun processes (one process by default)."""
    corpus_sizes: list[int] = field(default_factory=list)
    """Pairs of each training corpus, in order (for train.corpus_weights)."""
    initial_optimizer: dict | None = None
    """Adam's state to start a new run with (`nmt train --init-from --keep-optimizer`)."""


def accumulate_gradients(
    model: torch.nn.Module,
    batches: list[dict],
    label_smoothing: float,
    precision: str,
    scaler: torch.amp.GradScaler,
    device: torch.device,
    ntokens: int | None = None,
    idle: bool = False,
) -> dict[str, float]:
    """Forward and backward over this process's batches of one update. The loss is normalised by
    `ntokens`, the update's target tokens over the batches of all processes (default: those of
    `batches`), so accumulation, and DDP's summed all-reduce, equal one big batch.

    Under DDP gradients are all-reduced in the last backward only. An `idle` process (no batch
    left for it at the end of an epoch) runs one stand-in batch with weight 0, so that it still
    joins the all-reduce; it reports no loss and no tokens."""
    if ntokens is None:
        ntokens = sum(int((b["tgt_out"] != PAD_ID).sum()) for b in batches)
    total_loss = total_nll = 0.0
    for i, batch in enumerate(batches):
        src, tgt_in, tgt_out = (batch[k].to(device, non_blocking=True) for k in ("src", "tgt_in", "tgt_out"))
        with distributed.gradient_sync(model, i == len(batches) - 1):
            with autocast(device, precision):
                logits = model(src, tgt_in)
            loss, nll = label_smoothed_nll(logits, tgt_out, label_smoothing)
            if idle:
                loss, nll = loss * 0.0, nll * 0.0
            scaler.scale(loss / ntokens).backward()
        total_loss += float(loss.detach())
        total_nll += float(nll.detach())
    return {"loss": total_loss, "nll": total_nll, "tokens": ntokens}


def apply_update(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scaler: torch.amp.GradScaler,
    lr: float,
    clip_norm: float,
    loss: float,
) -> tuple[bool, float]:
    """Step the optimizer unless the loss or gradient is non-finite. Returns (stepped, grad norm)."""
    scaler.unscale_(optimizer)
    grad_norm = float(
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip_norm if clip_norm > 0 else math.inf)
    )
    if not (math.isfinite(loss) and math.isfinite(grad_norm)):
        scaler.update()  # fp16: lower the loss scale; otherwise a no-op
        optimizer.zero_grad(set_to_none=True)
        return False, grad_norm
    for group in optimizer.param_groups:
        group["lr"] = lr
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    return True, grad_norm


def train(s: Session, resume: checkpoint.Checkpoint | None) -> str:
    """Train until a stop condition; returns why it stopped."""
    cfg, tc, model, world = s.cfg, s.cfg.train, s.model, s.world
    start = cfg.model.start_id
    net = distributed.wrap(model, world, s.device)  # what forward and backward go through
    optimizer = torch.optim.Adam(
        model.parameters(), lr=0.0, betas=(tc.adam_betas[0], tc.adam_betas[1]), eps=tc.adam_eps, fused=True
    )  # fused: one kernel for all parameters instead of several per tensor
    scaler = torch.amp.GradScaler(s.device.type, enabled=tc.precision == "fp16")
    progress = Progress()
    if resume is not None:
        if resume.train_state is None or resume.progress is None:
            raise RunFailure(f"{s.run_dir}: its last checkpoint holds no training state; use a new --out")
        optimizer.load_state_dict(resume.train_state.optimizer)
        restore_scaler(scaler, resume.train_state.scaler)
        progress = Progress(**resume.progress)
        _set_rng_state(resume.train_state.rng, s.device)
    elif s.initial_optimizer is not None:
        optimizer.load_state_dict(s.initial_optimizer)
        for params in optimizer.param_groups:  # the moments carry over; the settings are this recipe's
            params.update(betas=(tc.adam_betas[0], tc.adam_betas[1]), eps=tc.adam_eps)
    metrics = MetricsLog(s.run_dir / "metrics.jsonl")
    src_len, tgt_len = s.train_data.src.lengths(), s.train_data.tgt.lengths()
    bar = s.reporter.bar("train", total=tc.max_updates or None, unit="upd", initial=progress.update)
    session_start = time.monotonic()
    base_seconds, last_save = progress.train_seconds, time.monotonic()
    window = {"loss": 0.0, "nll": 0.0, "tokens": 0, "updates": 0, "start": time.monotonic()}
    bad_in_row, reason, lr = 0, "", 0.0
    model.train()
    with StopSignal() as stop:
        try:
            while not reason:
                pairs = None
                if tc.corpus_weights:
                    pairs = weighted_epoch(s.corpus_sizes, tc.corpus_weights, tc.seed, progress.epoch)
                batches = make_batches(src_len, tgt_len, tc.max_tokens, tc.seed, progress.epoch, pairs=pairs)
                if not batches:
                    raise RunFailure("no training pair fits in train.max_tokens; raise train.max_tokens")
                while progress.batch < len(batches) and not reason:
                    group, mine = distributed.update_share(batches, progress.batch, tc.update_freq, world)
                    tensors = [
                        collate([s.train_data.src[i] for i in idx], [s.train_data.tgt[i] for i in idx], start)
                        for idx in mine or group[:1]  # group[:1]: a stand-in for an idle process
                    ]
                    distributed.seed_update(tc.seed, progress.update, world)
                    stats = accumulate_gradients(
                        net,
                        tensors,
                        tc.label_smoothing,
                        tc.precision,
                        scaler,
                        s.device,
                        ntokens=distributed.target_tokens(group, tgt_len),
                        idle=not mine,
                    )
                    progress.batch += len(group)
                    progress.train_seconds = base_seconds + time.monotonic() - session_start
                    # All processes now hold the same gradients; agree on the loss and on stopping.
                    stats, signalled, out_of_time, spent = _agree(
                        stats, stop.received, tc, progress, world, s.device
                    )
                    lr = learning_rate(
                        progress.update + 1,
                        tc.lr_schedule,
                        cfg.model.d_model,
                        tc.warmup,
                        tc.lr_scale,
                        tc.lr,
                        spent,
                    )
                    stepped, grad_norm = apply_update(
                        model, optimizer, scaler, lr, tc.clip_norm, stats["loss"]
                    )
                    if not stepped:
                        bad_in_row += 1
                        _skipped(s, metrics, progress, stats["loss"], grad_norm, bad_in_row, scaler)
                        continue
                    bad_in_row = 0
                    progress.update += 1
                    for key in ("loss", "nll", "tokens"):
                        window[key] += stats[key]
                    window["updates"] += 1
                    bar.update(1)
                    if world.is_main and progress.update % tc.log_every_updates == 0:
                        _log_train(metrics, bar, window, progress, lr)
                    if tc.valid_every_updates and progress.update % tc.valid_every_updates == 0:
                        early_stop = _validate(s, metrics, progress) if world.is_main else ""
                        reason = str(distributed.from_main(early_stop, world))
                    minutes_due = (
                        tc.save_every_minutes and time.monotonic() - last_save >= 60 * tc.save_every_minutes
                    )
                    updates_due = tc.save_every_updates and progress.update % tc.save_every_updates == 0
                    if world.is_main and (updates_due or minutes_due):
                        _save(s, model, optimizer, scaler, progress)
                        last_save = time.monotonic()
                    reason = reason or _stop_reason(tc, progress, signalled, stop.received, out_of_time)
                if progress.batch >= len(batches):
                    progress.epoch, progress.batch = progress.epoch + 1, 0
                    if tc.max_epochs and progress.epoch > tc.max_epochs and not reason:
                        reason = f"reached train.max_epochs = {tc.max_epochs}"
        finally:
            if world.is_main and window["updates"]:
                # The updates since the last record, so that a run that stops before its first
                # log interval (or fails) still leaves one.
                _log_train(metrics, bar, window, progress, lr)
        bar.close()
        if world.is_main and not _saved_at(s.run_dir, progress.update):
            _save(s, model, optimizer, scaler, progress)
    distributed.barrier(world, s.device)  # the others wait until rank 0's last checkpoint is written
    return f"{reason} at update {progress.update}"


def restore_scaler(scaler: torch.amp.GradScaler, state: dict) -> None:
    """Resume the loss scale. A bf16 or fp32 run saved an empty state (its scaler was off), so
    resuming it in fp16 starts a fresh scale; one saved by fp16 is ignored by a disabled scaler."""
    if state:
        scaler.load_state_dict(state)


def _agree(
    stats: dict[str, float],
    own_signal: str | None,
    tc: TrainConfig,
    progress: Progress,
    world: World,
    device: torch.device,
) -> tuple[dict[str, float], bool, bool, float]:
    """The update's loss summed over the processes, whether any process was signalled or ran
    out of time, and the share of the budget spent (clocks differ: the processes' mean): one
    small all-reduce, none on one process, so that all processes skip, log, stop and set the
    learning rate alike. Returns (stats, signalled, out of time, spent)."""
    out_of_time = bool(tc.max_minutes) and progress.train_seconds >= 60 * tc.max_minutes
    loss, nll, signalled, timed_out, spent = distributed.all_reduce_sum(
        [
            stats["loss"],
            stats["nll"],
            float(own_signal is not None),
            float(out_of_time),
            budget_spent(tc, progress.update + 1, progress.train_seconds),
        ],
        world,
        device,
    )
    return {**stats, "loss": loss, "nll": nll}, signalled > 0, timed_out > 0, spent / world.size


def budget_spent(tc: TrainConfig, update: int, train_seconds: float) -> float:
    """How much of the run's budget `update` and `train_seconds` use, from 0 to 1: the larger
    share of max_updates and max_minutes (0 where neither is set)."""
    by_updates = update / tc.max_updates if tc.max_updates else 0.0
    by_time = train_seconds / (60 * tc.max_minutes) if tc.max_minutes else 0.0
    return min(1.0, max(by_updates, by_time))


def _skipped(
    s: Session,
    metrics: MetricsLog,
    progress: Progress,
    loss: float,
    grad_norm: float,
    in_row: int,
    scaler: torch.amp.GradScaler,
) -> None:
    """Log a skipped update; too many in a row (fp16: once loss scaling cannot help) end the run."""
    if s.world.is_main:
        metrics.write({"type": "skip", "update": progress.update, "loss": loss, "grad_norm": grad_norm})
        s.reporter.warn(f"update {progress.update + 1}: non-finite loss or gradient, skipped")
    scaling_helps = scaler.is_enabled() and scaler.get_scale() > 1e-4
    if in_row >= MAX_BAD_UPDATES and not scaling_helps:
        raise RunFailure(
            f"training diverged: {in_row} updates in a row had a non-finite loss or gradient; the last good "
            f"checkpoint is in {s.run_dir / 'checkpoints'}; lower the learning rate or use --precision fp32"
        )


def _stop_reason(
    tc: TrainConfig, progress: Progress, signalled: bool, own_signal: str | None, out_of_time: bool
) -> str:
    if signalled:
        return f"stopped by {own_signal or 'a signal to another process'}"
    if tc.max_updates and progress.update >= tc.max_updates:
        return f"reached train.max_updates = {tc.max_updates}"
    if out_of_time:
        return f"reached train.max_minutes = {tc.max_minutes:g}"
    return ""


def _log_train(metrics: MetricsLog, bar, window: dict, progress: Progress, lr: float) -> None:
    elapsed = max(time.monotonic() - window["start"], 1e-9)
    tokens = max(window["tokens"], 1)
    record = {
        "type": "train",
        "update": progress.update,
        "epoch": progress.epoch,
        "loss": window["loss"] / tokens,
        "nll_loss": window["nll"] / tokens,
        "ppl": math.exp(min(window["nll"] / tokens, 100.0)),
        "lr": lr,
        "tokens_per_s": window["tokens"] / elapsed,
        "updates_per_s": window["updates"] / elapsed,
        "wall_s": round(progress.train_seconds, 1),
    }
    metrics.write(record)
    bar.set_postfix_str(
        f"loss {record['loss']:.3f} lr {lr:.2e} {record['tokens_per_s']:,.0f} tok/s "
        f"{record['updates_per_s']:.2f} upd/s"
    )
    window.update({"loss": 0.0, "nll": 0.0, "tokens": 0, "updates": 0, "start": time.monotonic()})


def _validate(s: Session, metrics: MetricsLog, progress: Progress) -> str:
    """Validate, keep the best checkpoint by train.best_metric, and apply early stopping."""
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
        _save_best(s, progress)
    if s.cfg.train.patience and progress.bad_validations >= s.cfg.train.patience:
        return f"early stopping (valid {metric} did not improve for {progress.bad_validations} validations)"
    return ""


def _rng_state(device: torch.device) -> dict:
    """The CPU generator and, on a GPU, this process's device generator only (reading every
    visible GPU's would open a CUDA context on each of them from rank 0)."""
    state = {"torch": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def _set_rng_state(state: dict, device: torch.device) -> None:
    torch.set_rng_state(state["torch"])
    if "cuda" in state and device.type == "cuda":
        cuda = state["cuda"]  # one state; a list (one per GPU) in checkpoints of earlier versions
        torch.cuda.set_rng_state(cuda if isinstance(cuda, torch.Tensor) else cuda[0], device)


def _saved_at(run_dir: Path, update: int) -> bool:
    return (run_dir / "checkpoints" / checkpoint.numbered_name(update)).exists()


def _save(s: Session, model, optimizer, scaler, progress: Progress) -> None:
    """Write the full training state as a numbered checkpoint, which `checkpoint_last.pt` then names."""
    ckpt_dir = s.run_dir / "checkpoints"
    state = checkpoint.TrainState(optimizer.state_dict(), scaler.state_dict(), _rng_state(s.device))
    ckpt = checkpoint.Checkpoint(
        "train", to_dict(s.cfg), model.state_dict(), s.spm_models, s.languages, asdict(progress), state
    )
    path = ckpt_dir / checkpoint.numbered_name(progress.update)
    checkpoint.save(ckpt, path)
    replace_with_link(path, ckpt_dir / "checkpoint_last.pt")
    checkpoint.prune(ckpt_dir, s.cfg.train.keep_last)


def _save_best(s: Session, progress: Progress) -> None:
    ckpt = checkpoint.Checkpoint(
        "best", to_dict(s.cfg), s.model.state_dict(), s.spm_models, s.languages, asdict(progress)
    )
    checkpoint.save(ckpt, s.run_dir / "checkpoints" / "checkpoint_best.pt")
