"""What a run's checkpoints hold besides the weights, and how a run starts from them: Adam's
moments, the loss scale, the random states and the progress counters; the numbered, last and
best checkpoints `train` saves."""

from __future__ import annotations

from dataclasses import asdict

import torch

from nmt_cli import checkpoint
from nmt_cli.errors import RunFailure
from nmt_cli.recipe import to_dict
from nmt_cli.training import run_directory
from nmt_cli.training.bookkeeping import Progress
from nmt_cli.training.session import Session


def start_state(
    s: Session, resume: checkpoint.Checkpoint | None
) -> tuple[torch.optim.Adam, torch.amp.GradScaler, Progress]:
    """Adam, the fp16 loss scaler and the progress counters: fresh, resumed from the run's last
    checkpoint, or with the moments of the model the run starts from (--init-from)."""
    tc = s.cfg.train
    optimizer = torch.optim.Adam(
        s.model.parameters(), lr=0.0, betas=(tc.adam_betas[0], tc.adam_betas[1]), eps=tc.adam_eps, fused=True
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
    return optimizer, scaler, progress


def restore_scaler(scaler: torch.amp.GradScaler, state: dict) -> None:
    """Resume the loss scale. A bf16 or fp32 run saved an empty state (its scaler was off), so
    resuming it in fp16 starts a fresh scale; one saved by fp16 is ignored by a disabled scaler."""
    if state:
        scaler.load_state_dict(state)


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


def save(s: Session, model, optimizer, scaler, progress: Progress) -> None:
    """A numbered checkpoint of the weights alone (what averaging and translating need), then
    `checkpoint_last.pt` with the training state (what resume reads): a run keeping K numbered
    checkpoints takes K times the weights, not K times Adam's moments besides."""
    ckpt_dir, tc = s.run_dir / "checkpoints", s.cfg.train
    config, weights, place = to_dict(s.cfg), model.state_dict(), asdict(progress)
    kept = checkpoint.numbered_weights(weights, tc.checkpoint_precision, tc.precision)
    numbered = checkpoint.Checkpoint(
        "train", config, kept, s.spm_models, s.languages, place, tokenizers=s.tokenizers
    )
    checkpoint.save(numbered, ckpt_dir / checkpoint.numbered_name(progress.update))
    state = checkpoint.TrainState(optimizer.state_dict(), scaler.state_dict(), _rng_state(s.device))
    last = checkpoint.Checkpoint(
        "train", config, weights, s.spm_models, s.languages, place, state, tokenizers=s.tokenizers
    )
    if (ckpt_dir / "checkpoint_last.pt").is_symlink():  # replaced, never written through
        (ckpt_dir / "checkpoint_last.pt").unlink()
    checkpoint.save(last, ckpt_dir / "checkpoint_last.pt")
    checkpoint.prune(ckpt_dir, tc.keep_last)
    kept_in = tc.precision if kept is not weights else "fp32"
    run_directory.describe(ckpt_dir, kept_in)


def save_best(s: Session, progress: Progress) -> None:
    ckpt = checkpoint.Checkpoint(
        "best",
        to_dict(s.cfg),
        s.model.state_dict(),
        s.spm_models,
        s.languages,
        asdict(progress),
        tokenizers=s.tokenizers,
    )
    checkpoint.save(ckpt, s.run_dir / "checkpoints" / "checkpoint_best.pt")
