"""GPU steps for the training paths that CPU tests check against the padded autocast path:
packed batches (variable-length flash attention on CUDA), the fused loss, the bf16 copy
(train.half_weights), torch.compile, and train.fit_batch's batch size. `bench/gpu_check.py`
runs them as steps; on a machine without CUDA they run on CPU with a tiny model (a dry run).
That the paths compute the padded update's loss and gradients on the device is a test:
tests/gpu/gpu_checks.py's path_equivalence.

- `path_throughput`: target tokens/s of each path on WMT-shaped batches of the base and big
  models, and each over the padded autocast path's, in one run.
- `batch_fit`: what train.fit_batch finds on this GPU for the WMT14 recipes (25,000 tokens an
  update, the corpus's longest pairs at 251 pieces).
"""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from nmt_cli.config import ModelConfig, TrainConfig
from nmt_cli.model import Transformer
from nmt_cli.training import batch_fit as fit
from nmt_cli.training.loop import compiled
from nmt_cli.training.precision import HalfWeights
from nmt_cli.training.update import Pending, accumulate_gradients, apply_update, packed

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "gpu"))  # the GPU tests' helpers
from gpu_helpers import BASE, BIG, CUDA, DEVICE, Figures, config, model_of, pinned, sync, wmt_batch  # noqa: E402

# The training paths are timed with the dropout they train with.
TINY = config(2, 64, 128, 4, 1000, dropout=0.1)


def timed(run: Callable[[], None], repeats: int) -> float:
    """Seconds per call of `run` after two warm-up calls (CUDA events on a GPU): the first path
    timed would otherwise pay the libraries' first-use set-up in its figure."""
    run()
    run()
    sync()
    if CUDA:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(repeats):
            run()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1000 / repeats
    begin = time.perf_counter()
    for _ in range(repeats):
        run()
    return (time.perf_counter() - begin) / repeats


PATHS = {
    "autocast": {},
    "packed": {"packed": True},
    "half_weights": {"half": True},
    "packed_half_weights": {"packed": True, "half": True},
    "compiled_packed_half_weights": {"packed": True, "half": True, "compile": True},
}


def run_updates(
    net: torch.nn.Module,
    model: Transformer,
    optimizer: torch.optim.Adam,
    half: HalfWeights | None,
    batches: list[dict],
    targets: list[int],
) -> None:
    """One bf16 update per batch, queued as the training loop queues them (figures read once)."""
    scaler = torch.amp.GradScaler(DEVICE.type, enabled=False)
    precision = "fp32" if half else "bf16"  # the bf16 copy runs without autocast, as training does
    pending = Pending()
    for batch, count in zip(batches, targets, strict=True):
        loss = accumulate_gradients(net, [batch], 0.1, precision, scaler, DEVICE, count)
        if half:
            half.to_master()
        pending.add(loss, apply_update(model, optimizer, scaler, 1e-4, 0.0, loss.sums[0]))
        if half:
            half.from_master()
    pending.settle()


def path_throughput(models: dict[str, ModelConfig] | None = None) -> Figures:
    """Target tokens/s of bf16 updates (forward, loss, backward, Adam) on four WMT-shaped
    25k-token batches, per path and model, and each over autocast's; one run, same batches."""
    models = models or ({"base": BASE, "big": BIG} if CUDA else {"tiny": TINY})
    tokens, kinds, repeats = (25000, 4, 3) if CUDA else (1500, 2, 1)
    out: Figures = {}
    for name, cfg in models.items():
        rng = np.random.default_rng(0)
        padded = [wmt_batch(tokens, cfg.tgt_vocab_size, rng) for _ in range(kinds)]
        targets = [int(len(b["target"])) for b in padded]
        row: Figures = {"real_target_tokens_per_update": round(sum(targets) / kinds)}
        for path, how in PATHS.items():
            if how.get("compile") and not CUDA:
                continue  # minutes of compiling on a CPU; tests/unit/test_compiled_training.py checks it
            batches = [pinned(packed(b) if how.get("packed") else b) for b in padded]
            model = model_of(cfg)
            optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), fused=True)
            half = HalfWeights(model) if how.get("half") else None
            net = half.copy if half else model
            net = compiled(net) if how.get("compile") else net

            try:
                seconds = timed(
                    functools.partial(run_updates, net, model, optimizer, half, batches, targets), repeats
                )
                row[path] = round(sum(targets) / seconds)
            except Exception as exc:  # one path failing still reports the others
                row[path] = f"{type(exc).__name__}: {str(exc)[:200]}"
            del model, optimizer, half, net
            if CUDA:
                torch.cuda.empty_cache()
        base = row["autocast"]
        for path in row.keys() & PATHS.keys():
            if isinstance(row[path], int) and isinstance(base, int) and path != "autocast":
                row[f"{path}_over_autocast"] = round(row[path] / base, 3)
        out[name] = row
    failed = [
        f"{m}.{p}" for m, row in out.items() for p in row.keys() & PATHS.keys() if not isinstance(row[p], int)
    ]
    return {**out, "ok": not failed, **({"error": "failed: " + ", ".join(failed)} if failed else {})}


def batch_fit() -> Figures:
    """train.fit_batch for the WMT14 recipes (update_tokens 25,000, max_tokens 3,125) on this
    GPU, base and big, at the 251-piece pairs prepare keeps at most; on CPU, the search alone."""
    recipe = TrainConfig(
        max_tokens=3125, update_freq=8, update_tokens=25000, fit_batch=True, precision="bf16"
    )
    out: Figures = {}
    for name, cfg in ({"base": BASE, "big": BIG} if CUDA else {"tiny": TINY}).items():
        if CUDA:
            model = model_of(cfg)
            start = time.perf_counter()
            found = fit.fitted(recipe, 1, fit.fits_on_gpu(model, recipe, DEVICE, 251, 1))
            seconds = time.perf_counter() - start
            del model
            torch.cuda.empty_cache()
        else:
            start = time.perf_counter()
            found = fit.fitted(recipe, 1, lambda tokens: tokens <= 13000)
            seconds = time.perf_counter() - start
        out[name] = {
            "max_tokens": found.max_tokens,
            "update_freq": found.update_freq,
            "seconds": round(seconds, 2),
        }
    return out
