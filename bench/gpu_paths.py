"""GPU steps for the training paths that CPU tests check against the padded autocast path:
packed batches (variable-length flash attention on CUDA), the fused loss, the bf16 copy
(train.half_weights), torch.compile, and train.fit_batch's batch size. `bench/gpu_check.py`
runs them as steps; on a machine without CUDA they run on CPU with a tiny model (a dry run).

- `path_equivalence`: on the device, packed and fused updates against the padded eager one
  (loss and gradients), where CPU tests cannot reach: varlen_attn and the Triton kernel.
- `path_throughput`: target tokens/s of each path on WMT-shaped batches of the base and big
  models, and each over the padded autocast path's, in one run.
- `batch_fit`: what train.fit_batch finds on this GPU for the WMT14 recipes (25,000 tokens an
  update, the corpus's longest pairs at 251 pieces).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from nmt_cli.config import ModelConfig, TrainConfig
from nmt_cli.data.batching import collate
from nmt_cli.model import Transformer
from nmt_cli.training import batch_fit as fit
from nmt_cli.training.loop import compiled
from nmt_cli.training.precision import HalfWeights
from nmt_cli.training.update import Pending, accumulate_gradients, apply_update, packed, with_real_rows

CUDA = torch.cuda.is_available()
DEVICE = torch.device("cuda" if CUDA else "cpu")
Figures = dict[str, Any]


def config(layers: int, d: int, d_ff: int, heads: int, vocab: int, dropout: float = 0.1) -> ModelConfig:
    return ModelConfig(
        encoder_layers=layers, decoder_layers=layers, d_model=d, d_ff=d_ff, heads=heads,
        d_k=d // heads, d_v=d // heads, dropout=dropout, src_vocab_size=vocab, tgt_vocab_size=vocab,
    )  # fmt: skip


TINY = config(2, 64, 128, 4, 1000)
BASE = config(6, 512, 2048, 8, 37000)
BIG = config(6, 1024, 4096, 16, 37000)


def sync() -> None:
    if CUDA:
        torch.cuda.synchronize()


def wmt_batch(tokens: int, vocab: int, rng: np.random.Generator) -> dict[str, torch.Tensor]:
    """Random ids shaped like a WMT batch of one length bucket, padded as eager `nmt train`
    pads (to the longest row only)."""
    length = int(np.clip(rng.lognormal(3.15, 0.55), 3, 200))
    rows = max(1, tokens // (length + 4))
    sides = [
        [rng.integers(4, vocab, max(1, length + int(rng.integers(-3, 4)))) for _ in range(rows)] for _ in "st"
    ]
    return collate(sides[0], sides[1])


def on_device(batch: dict[str, Any]) -> dict[str, Any]:
    """The batch in pinned memory on a GPU machine, as the training loop hands batches over."""
    if not CUDA:
        return batch
    return {
        k: (tuple(p.pin_memory() for p in v) if k == "packing" else v.pin_memory()) for k, v in batch.items()
    }


def model_of(cfg: ModelConfig, seed: int = 0, dropout: bool = True) -> Transformer:
    torch.manual_seed(seed)
    model = Transformer(cfg).to(DEVICE).train()
    return model if dropout else model.eval()  # eval: no dropout, for comparisons


def gradients(model: Transformer, batch: dict, precision: str, half: bool = False) -> tuple[float, dict]:
    """(loss per token, fp32 gradients) of one update on `batch`, through a bf16 copy if `half`."""
    scaler = torch.amp.GradScaler(DEVICE.type, enabled=False)
    if half:
        copy = HalfWeights(model)
        loss = accumulate_gradients(copy.copy, [batch], 0.1, "fp32", scaler, DEVICE)
        copy.to_master()
    else:
        loss = accumulate_gradients(model, [batch], 0.1, precision, scaler, DEVICE)
    grads = {
        name: p.grad.detach().float().clone() for name, p in model.named_parameters() if p.grad is not None
    }
    model.zero_grad(set_to_none=True)
    return float(loss.sums[0]) / loss.tokens, grads


def gradient_gap(got: dict, expected: dict) -> float:
    """The norm of the gradient difference over the norm of the expected gradient, all tensors."""
    diff = sum(float((got[k] - v).norm()) ** 2 for k, v in expected.items()) ** 0.5
    return diff / max(1e-30, sum(float(v.norm()) ** 2 for v in expected.values()) ** 0.5)


def path_equivalence() -> Figures:
    """bf16 updates without dropout on the same batch: padded eager (the reference), packed,
    the bf16 copy, and fp32 padded (how far bf16 itself is from exact). Each gap is the
    relative difference of the loss and of the whole gradient from the reference's."""
    cfg = BASE if CUDA else TINY
    batch = with_real_rows(wmt_batch(8000 if CUDA else 600, cfg.tgt_vocab_size, np.random.default_rng(7)))
    model = model_of(cfg, dropout=False)
    reference_loss, reference = gradients(model, on_device(batch), "bf16")
    out: Figures = {"model": "base" if CUDA else "tiny"}
    runs = {
        "fp32": (batch, "fp32", False),
        "packed": (packed(batch), "bf16", False),
        "half_weights": (batch, "bf16", True),
        "packed_half_weights": (packed(batch), "bf16", True),
    }
    for name, (given, precision, half) in runs.items():
        loss, grads = gradients(model, on_device(given), precision, half)
        out[name] = {
            "loss_gap": round(abs(loss - reference_loss) / reference_loss, 5),
            "gradient_gap": round(gradient_gap(grads, reference), 5),
        }
    bound = 2 * out["fp32"]["gradient_gap"] + 0.01  # bf16 paths differ from each other as from fp32
    ok = {
        f"{name}_close": out[name]["gradient_gap"] <= bound and out[name]["loss_gap"] <= 0.01 for name in runs
    }
    failed = [name for name, good in ok.items() if not good]
    return {**out, "ok": not failed, **({"error": "failed: " + ", ".join(failed)} if failed else {})}


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
        padded = [with_real_rows(wmt_batch(tokens, cfg.tgt_vocab_size, rng)) for _ in range(kinds)]
        targets = [int(len(b["target"])) for b in padded]
        row: Figures = {"real_target_tokens_per_update": round(sum(targets) / kinds)}
        for path, how in PATHS.items():
            if how.get("compile") and not CUDA:
                continue  # minutes of compiling on a CPU; tests/unit/test_compiled_training.py checks it
            batches = [on_device(packed(b) if how.get("packed") else b) for b in padded]
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
