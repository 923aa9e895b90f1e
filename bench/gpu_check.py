"""`make gpu-check`: run every CUDA path of nmt_cli once and report what happened, as JSON.

Steps: training updates in fp32, bf16 and fp16; an fp16 overflow skipped by the loss scaler; the
host synchronisations of an update; `nmt train` resumed across precisions; torchrun against one
process; the SDPA backends and the attention-mask invariants; training and decoding throughput of
the paper's base and big models; training through torch.compile against the eager model
(`--compile-modes`, e.g. default,reduce-overhead for CUDA graphs); bf16 against fp32 decoding
with and without cuDNN attention; constrained decoding with word alignment read during the
search, against the CPU's; packed batches, the bf16 copy and torch.compile against the padded
autocast update, and train.fit_batch's batch for the WMT14 recipes (bench/gpu_paths.py);
fairseq beside nmt, training and decoding the same data in the same run
(bench/side_by_side.py; skipped where fairseq is not importable). Each step is {"name",
"ok", figures..., "error" when it failed}; a failing step does not stop the others, and the exit
status is 1 when any failed.

On a machine without CUDA the same steps run on CPU with a tiny model and the report says
"device": "cpu", "dry_run": true (fp16 and NCCL are skipped): CI runs that to keep the script
working. Run: `make gpu-check` or `.venv/bin/python bench/gpu_check.py [--only STEP,...]
[--data MULTI30K] [--seconds S]`; each step's JSON goes to stderr as it ends, the report to stdout
and bench/results/gpu_check.json.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import functools
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, cast

import numpy as np
import torch
import torch.nn.functional as F
from gpu_measure import count_aten_ops, real_lengths, real_share, time_shares, training_flops
from gpu_paths import batch_fit, path_equivalence, path_throughput
from side_by_side import side_by_side  # bench/, beside this file
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from nmt_cli import checkpoint
from nmt_cli.config import DecodeConfig, ModelConfig
from nmt_cli.data.batching import collate
from nmt_cli.decoding.alignment import attended_pieces, default_layer
from nmt_cli.decoding.batches import translate_sentences
from nmt_cli.decoding.ensemble import Ensemble
from nmt_cli.decoding.settings import DecodeSettings
from nmt_cli.device import configure_cuda
from nmt_cli.model import Transformer
from nmt_cli.training.precision import autocast
from nmt_cli.training.update import Pending, accumulate_gradients, apply_update, with_real_rows

ROOT = Path(__file__).resolve().parents[1]
RESULT = ROOT / "bench" / "results" / "gpu_check.json"
CUDA = torch.cuda.is_available()
DEVICE = torch.device("cuda" if CUDA else "cpu")
Figures = dict[str, Any]
T = TypeVar("T")
BACKENDS = (
    SDPBackend.FLASH_ATTENTION,
    SDPBackend.EFFICIENT_ATTENTION,
    SDPBackend.CUDNN_ATTENTION,
    SDPBackend.MATH,
)


def config(layers: int, d: int, d_ff: int, heads: int, vocab: int, dropout: float = 0.0) -> ModelConfig:
    return ModelConfig(
        encoder_layers=layers, decoder_layers=layers, d_model=d, d_ff=d_ff, heads=heads,
        d_k=d // heads, d_v=d // heads, dropout=dropout, src_vocab_size=vocab, tgt_vocab_size=vocab,
    )  # fmt: skip


TINY = config(2, 64, 128, 4, 1000)
BASE = config(6, 512, 2048, 8, 37000, dropout=0.1)
BIG = config(6, 1024, 4096, 16, 37000, dropout=0.1)
SMALL = BASE if CUDA else TINY  # the model of the correctness steps


def checks(**conditions: bool) -> Figures:
    """{"ok": all conditions hold}, with an "error" naming those that do not."""
    failed = [name for name, ok in conditions.items() if not ok]
    return {"ok": not failed, **({"error": "failed: " + ", ".join(failed)} if failed else {})}


def combine(key: str, parts: Figures) -> Figures:
    """The figures of several sub-checks under `key`, ok when every one is."""
    return {key: parts, **checks(**{name: part.get("ok", True) for name, part in parts.items()})}


def wmt_batch(
    tokens: int, vocab: int, rng: np.random.Generator, multiple: int = 1
) -> dict[str, torch.Tensor]:
    """Random ids in a batch shaped like WMT training: sentences of one length bucket (newstest
    averages ~27 pieces, log-normal spread), as many rows as fit in `tokens` padded tokens, the
    lengths padded to a `multiple` (`nmt train` pads to 8 for a compiled model on a GPU only)."""
    length = int(np.clip(rng.lognormal(3.15, 0.55), 3, 200))
    rows = max(1, tokens // (length + 4))
    sides = [
        [rng.integers(4, vocab, max(1, length + int(rng.integers(-3, 4)))) for _ in range(rows)] for _ in "st"
    ]
    # Its real rows found on the host, as the training loop's prefetch thread does.
    return with_real_rows(collate(sides[0], sides[1], multiple=multiple))


def pinned(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The batch in pinned memory on a GPU machine, as `nmt train` hands batches over."""
    return {k: v.pin_memory() for k, v in batch.items()} if CUDA else batch


def sync() -> None:
    if CUDA:
        torch.cuda.synchronize()


def timed(work: Callable[[], T]) -> tuple[float, T]:
    """Seconds `work` takes, host and device, and what it returns: between CUDA events on a GPU
    (recorded on the idle stream before and after it, so the host's launching counts too), by
    the host's clock on CPU."""
    sync()
    if not CUDA:
        start = time.perf_counter()
        value = work()
        return time.perf_counter() - start, value
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    value = work()
    end.record()
    end.synchronize()
    return begin.elapsed_time(end) / 1000, value


def train_model(cfg: ModelConfig, seed: int = 0) -> tuple[Transformer, torch.optim.Adam]:
    torch.manual_seed(seed)
    model = Transformer(cfg).to(DEVICE).train()
    return model, torch.optim.Adam(model.parameters(), lr=5e-4, betas=(0.9, 0.98), fused=True)


def update(
    model: Transformer, opt: torch.optim.Adam, scaler: torch.amp.GradScaler, batch: dict, precision: str
) -> tuple[bool, float]:
    """One update on one batch, as the training loop does it; returns (stepped, loss per token)."""
    loss = accumulate_gradients(model, [batch], 0.1, precision, scaler, DEVICE)
    _, skipped = apply_update(model, opt, scaler, 5e-4, 1.0, loss.sums[0]).tolist()
    return skipped == 0.0, float(loss.sums[0]) / loss.tokens


def train_steps() -> Figures:
    """~5 updates on one fixed batch per precision: the loss must stay finite and go down."""
    out: Figures = {}
    batch = wmt_batch(4000 if CUDA else 1000, SMALL.tgt_vocab_size, np.random.default_rng(0))
    for precision in ("fp32", "bf16", "fp16"):
        if precision == "fp16" and not CUDA:
            out[precision] = {"skipped": "fp16 with loss scaling is CUDA-only (nmt train refuses it on CPU)"}
            continue
        model, opt = train_model(SMALL)
        scaler = torch.amp.GradScaler(DEVICE.type, enabled=precision == "fp16")
        results = [update(model, opt, scaler, batch, precision) for _ in range(6)]
        losses = [round(loss, 4) for _, loss in results]
        out[precision] = {
            "losses": losses,
            "skipped_updates": sum(not stepped for stepped, _ in results),
            **checks(finite=all(map(math.isfinite, losses)), decreasing=losses[-1] < losses[0]),
        }
    return combine("precisions", out)


def fp16_overflow() -> Figures:
    """A non-finite gradient must skip the step, halve the loss scale and leave the weights alone.
    On CPU the scaler is the same code (torch >= 2.3 has a CPU GradScaler) under fp32."""
    model, opt = train_model(TINY)
    scaler = torch.amp.GradScaler(DEVICE.type, enabled=True)
    precision = "fp16" if CUDA else "fp32"
    batch = wmt_batch(1000, TINY.tgt_vocab_size, np.random.default_rng(1))
    loss = accumulate_gradients(model, [batch], 0.1, precision, scaler, DEVICE)
    param = next(model.parameters())
    assert param.grad is not None
    param.grad.view(-1)[0] = math.inf  # what an fp16 overflow in backward leaves behind
    before, scale = [p.detach().clone() for p in model.parameters()], scaler.get_scale()
    grad_norm, skipped = apply_update(model, opt, scaler, 5e-4, 1.0, loss.sums[0]).tolist()
    stepped = skipped == 0.0
    unchanged = all(torch.equal(a, p) for a, p in zip(before, model.parameters(), strict=True))
    # Adam's first step did nothing: zero moments, a step count of 0.
    untouched = all(
        float(state["step"]) == 0 and not state["exp_avg"].any() and not state["exp_avg_sq"].any()
        for state in opt.state.values()
    )
    recovered, _ = update(model, opt, scaler, batch, precision)  # the next finite update steps
    return {
        "precision": precision, "scale_before": scale, "scale_after": scaler.get_scale(),
        "grad_norm": grad_norm,
        **checks(skipped=not stepped, scale_halved=scaler.get_scale() == scale / 2,
                 weights_unchanged=unchanged, adam_state_untouched=untouched, next_update_steps=recovered),
    }  # fmt: skip


def update_syncs() -> Figures:
    """Host synchronisations in 6 updates of 2 accumulated batches, queued as the training loop
    queues them, then read once as the loop reads them at a log record. On CUDA every
    synchronisation is counted (torch's sync debug mode); on CPU the profiler's item, nonzero,
    is_nonzero and equal outside fused Adam (whose CPU kernel reads its step counts)."""
    model, opt = train_model(SMALL)
    scaler = torch.amp.GradScaler(DEVICE.type, enabled=CUDA)
    rng = np.random.default_rng(2)
    batches = [
        # with_real_rows: the loop's prefetch thread finds each batch's real rows on the host
        [
            pinned(with_real_rows(wmt_batch(4000 if CUDA else 500, SMALL.tgt_vocab_size, rng)))
            for _ in range(2)
        ]
        for _ in range(6)
    ]
    precision = "fp16" if CUDA else "bf16"
    pending = Pending()

    # The loop knows each update's target tokens from the corpus's lengths, before any tensor.
    tokens = [sum(int((b["tgt_out"] != 0).sum()) for b in pair) for pair in batches]

    def updates() -> None:
        for pair, ntokens in zip(batches, tokens, strict=True):
            loss = accumulate_gradients(model, pair, 0.1, precision, scaler, DEVICE, ntokens)
            pending.add(loss, apply_update(model, opt, scaler, 5e-4, 1.0, loss.sums[0]))

    updates()  # the first updates set Adam's state up
    pending.settle()
    sync()
    if CUDA:
        import warnings

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                updates()
                in_updates = len(caught)
                pending.settle()
            finally:
                torch.cuda.set_sync_debug_mode("default")
        # torch warns "called a synchronizing CUDA operation" at each; other warnings are no syncs
        is_sync = ["called a synchronizing CUDA operation" in str(w.message) for w in caught]
        count, at_log = sum(is_sync[:in_updates]), sum(is_sync[in_updates:])
        marked = list(zip(caught, is_sync, strict=True))
        others = sorted({f"{w.category.__name__}: {str(w.message)[:160]}" for w, s in marked if not s})
        sites = sorted({f"{Path(w.filename).name}:{w.lineno}" for w, s in marked if s})
    else:
        from torch.profiler import ProfilerActivity, profile

        names = ("aten::item", "aten::nonzero", "aten::is_nonzero", "aten::equal")
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            updates()
        count = sum(e.name in names and not _in_fused_adam(e) for e in prof.events())
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            pending.settle()
        at_log = sum(e.name in names for e in prof.events())
        others, sites = [], []
    per_update = count / len(batches)
    return {"precision": precision, "syncs_per_update": per_update, "syncs_at_log": at_log,
            "sync_sites": sites, "other_warnings": others,
            **checks(none_in_updates=per_update == 0)}  # fmt: skip


def _in_fused_adam(event: Any) -> bool:
    parent = event.cpu_parent
    while parent is not None:
        if parent.name == "aten::_fused_adam_":
            return True
        parent = parent.cpu_parent
    return False


# --- the real CLI, in child processes ------------------------------------------------------------

WORDS = "apple river stone cloud green music paper tiger silver window orange garden yellow friend".split()
TINY_RUN = [  # tests/conftest.py's tiny copy-task model; no dropout so that runs compare exactly
    "model.encoder_layers=1", "model.decoder_layers=1", "model.d_model=32", "model.d_ff=64",
    "model.heads=2", "model.d_k=16", "model.d_v=16", "model.max_positions=64", "model.dropout=0.0",
    'train.lr_schedule="inverse_sqrt"', "train.lr=1e-3", "train.warmup=10", "train.max_tokens=600",
    "train.label_smoothing=0.0", "train.save_every_minutes=0", "train.valid_bleu=false",
    "train.valid_every_updates=0", "train.log_every_updates=1",
    "train.adam_eps=1e-2",  # as tests/unit/test_distributed.py: a wrong gradient scale would show
]  # fmt: skip


def nmt(args: list[str], launcher: list[str] | None = None) -> None:
    """Run `python -m nmt_cli ARGS` (or under `launcher`); raise with its stderr if it fails."""
    command = [*(launcher or [sys.executable, "-m", "nmt_cli"]), "-q", *args]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, cwd=ROOT)
    if proc.returncode != 0:
        raise RuntimeError(f"`nmt {' '.join(args[:1])}` exited {proc.returncode}: {proc.stderr[-1500:]}")


def copy_corpus(root: Path) -> Path:
    """A copy task over 14 words, prepared by `nmt prepare` (the tests' corpus, smaller)."""
    data = root / "data"
    if not (data / "meta.json").exists():
        rng = random.Random(0)
        for split, n in (("train", 1000), ("valid", 20)):
            lines = "".join(" ".join(rng.choices(WORDS, k=rng.randint(1, 6))) + "\n" for _ in range(n))
            for side in ("src", "tgt"):
                (root / f"{split}.{side}").write_text(lines, encoding="utf-8")
        nmt(["prepare", "--train", str(root / "train"), "--valid", str(root / "valid"), "--src", "src",
             "--tgt", "tgt", "--out", str(data), "--vocab-size", "100", "--no-byte-fallback"])  # fmt: skip
    return data


def train_args(data: Path, out: Path, *overrides: str) -> list[str]:
    device = ["--device", "cuda"] if CUDA else ["--device", "cpu", "--threads", "1"]
    return ["train", "--data", str(data), "--out", str(out), *device,
            *(x for item in (*TINY_RUN, *overrides) for x in ("--set", item))]  # fmt: skip


def resume_across_precisions(tmp: Path) -> Figures:
    """Train 3 updates in bf16, resume to 6 in fp16 (fp32 on CPU), then to 9 in bf16."""
    data, run = copy_corpus(tmp), tmp / "resume"
    plan = [("bf16", 3), ("fp16" if CUDA else "fp32", 6), ("bf16", 9)]
    updates = []
    for precision, upto in plan:
        nmt([*train_args(data, run, f"train.max_updates={upto}"), "--precision", precision])
        updates.append(checkpoint.load(run / "checkpoints" / "checkpoint_last.pt").update)
    return {"plan": plan, "checkpoint_updates": updates, **checks(updates=updates == [3, 6, 9])}


def torchrun(tmp: Path) -> Figures:
    """torchrun with one process per GPU (NCCL) against one process accumulating as many batches:
    the same updates, so the same weights. On CPU: two gloo processes, as the unit test does."""
    data = copy_corpus(tmp)
    procs = torch.cuda.device_count() if CUDA else 2
    sets = ["train.max_updates=4", "train.save_every_updates=0"]
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone"]  # = torchrun
    launcher += [f"--nproc_per_node={procs}", "-m", "nmt_cli"]
    nmt([*train_args(data, tmp / "ddp", *sets), "--precision", "fp32"], launcher)
    nmt([*train_args(data, tmp / "one", *sets, f"train.update_freq={procs}"), "--precision", "fp32"])
    a, b = (checkpoint.load(tmp / run / "checkpoints" / "checkpoint_last.pt") for run in ("ddp", "one"))
    diff = max(float((a.model[k].float() - b.model[k].float()).abs().max()) for k in b.model)
    bitwise = all(torch.equal(a.model[k], b.model[k]) for k in b.model)
    return {
        "processes": procs, "backend": "nccl" if CUDA else "gloo", "distributed": procs > 1,
        "updates": [a.update, b.update], "bitwise_equal": bitwise, "max_abs_diff": diff,
        **({"note": "one GPU: torchrun runs a single process, no NCCL collective"} if procs == 1 else {}),
        **checks(same_updates=a.update == b.update == 4, same_weights=diff <= 1e-5),
    }  # fmt: skip


# --- attention ------------------------------------------------------------------------------------


def sdpa() -> Figures:
    """Which SDPA kernels run for a training-shaped and a decoding-shaped call, the one torch picks,
    and the masks: padding a source and changing a later target token change nothing they shouldn't."""
    dtype = torch.bfloat16 if CUDA else torch.float32  # bf16 on CPU bypasses SDPA (attention._explicit)
    q = torch.randn(64, 8, 30, 64, device=DEVICE, dtype=dtype, requires_grad=True)
    lengths = torch.randint(10, 31, (64, 1, 1, 1), device=DEVICE)
    pad_mask = torch.arange(30, device=DEVICE) < lengths  # (B, 1, 1, S), as Transformer.encode
    step_q = torch.randn(256, 8, 1, 64, device=DEVICE, dtype=dtype)  # 64 sentences x beam 4, 1 query
    step_kv = torch.randn(256, 8, 40, 64, device=DEVICE, dtype=dtype)
    calls = {
        "train_encoder_padding_mask": (q, q, pad_mask, False),
        "train_decoder_causal": (q, q, None, True),
        "decode_step_cached": (step_q, step_kv, None, False),
    }
    kernels: Figures = {}
    for name, (query, kv, mask, causal) in calls.items():
        runs = []
        for backend in BACKENDS:
            try:
                with sdpa_kernel([backend]):
                    F.scaled_dot_product_attention(query, kv, kv, attn_mask=mask, is_causal=causal)
                runs.append(backend.name)
            except (RuntimeError, NotImplementedError):
                pass  # this kernel does not take these inputs on this device
        try:  # torch's own pick (a private function: it may go away)
            chosen = SDPBackend(torch._fused_sdp_choice(query, kv, kv, mask, 0.0, causal)).name
        except (AttributeError, RuntimeError, ValueError):
            chosen = "unknown"
        kernels[name] = {"default": chosen, "available": runs}
    model = Transformer(config(2, 64, 128, 4, 1000)).to(DEVICE).eval()
    gen = torch.Generator().manual_seed(0)
    a, b = (torch.randint(4, 1000, (n,), generator=gen).numpy() for n in (12, 20))
    tgt = torch.randint(4, 1000, (1, 10), generator=gen).to(DEVICE)
    later = tgt.clone()
    later[0, 6] = 4 if int(tgt[0, 6]) != 4 else 5
    masks: Figures = {}
    with torch.inference_mode():
        for precision, tol in (("fp32", 1e-4), ("bf16", 5e-2)):  # relative to the largest logit
            with autocast(DEVICE, precision):
                # `a` alone, then `a` padded to the length of `b` in one batch with it.
                alone = model(collate([a])["src"].to(DEVICE), tgt).float()
                padded = model(collate([a, b])["src"].to(DEVICE), tgt.expand(2, -1)).float()[:1]
                changed = model(collate([a])["src"].to(DEVICE), later).float()
            scale = float(alone.abs().max())
            pad_diff = float((alone - padded).abs().max()) / scale
            causal_diff = float((alone[:, :6] - changed[:, :6]).abs().max()) / scale
            masks[precision] = {"padding_rel_diff": pad_diff, "causal_rel_diff": causal_diff,
                                "later_changed": bool((alone[:, 6:] != changed[:, 6:]).any()),
                                **checks(padding=pad_diff <= tol, causal=causal_diff <= tol)}  # fmt: skip
    return {"dtype": str(dtype), "kernels": kernels, **combine("masks", masks)}


# --- throughput ---------------------------------------------------------------------------------


def matmul_peak() -> float:
    """Measured bf16 matmul FLOP/s: the denominator of model FLOPs utilisation."""
    n, reps = (8192, 20) if CUDA else (1024, 3)
    x = torch.randn(n, n, device=DEVICE, dtype=torch.bfloat16)

    def products() -> None:
        for _ in range(reps):
            torch.matmul(x, x)

    torch.matmul(x, x)
    seconds, _ = timed(products)
    return 2 * n**3 * reps / seconds


PAPER_UPDATES = {"base": 100_000, "big": 300_000}


def queued_updates(
    model: torch.nn.Module, opt: torch.optim.Adam, batches: list[dict[str, torch.Tensor]], targets: list[int]
) -> None:
    """bf16 updates queued as the training loop queues them; their figures read once at the end."""
    scaler = torch.amp.GradScaler(DEVICE.type, enabled=False)
    pending = Pending()
    for batch, ntokens in zip(batches, targets, strict=True):
        loss = accumulate_gradients(model, [batch], 0.1, "bf16", scaler, DEVICE, ntokens)
        pending.add(loss, apply_update(model, opt, scaler, 5e-4, 1.0, loss.sums[0]))
    pending.settle()


def gpu_time(work: Callable[[], None], updates: int) -> Figures:
    """Where the wall time of `work` (`updates` updates) goes, by torch's profiler: the shares of
    matmul, attention, elementwise, loss, optimizer and other kernels and of idle time
    (gpu_measure.time_shares; the profiler's own cost counts as idle), and CUDA kernels per
    update, memory copies and sets left out. On CPU the same accounting runs over the outermost
    aten operators: a check of the path, not a measurement."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if CUDA else [])]
    sync()
    with profile(activities=activities) as prof:
        start = time.perf_counter()
        work()
        sync()
        wall_us = (time.perf_counter() - start) * 1e6
    if CUDA:
        events = [e for e in prof.events() if e.device_type == DeviceType.CUDA]
    else:
        # The outermost aten operators: they cover the time of those they call, without overlap.
        events = [e for e in prof.events() if _aten(e) and not (e.cpu_parent and _aten(e.cpu_parent))]
    spans = [(e.name, e.time_range.start, e.time_range.end) for e in events]
    shares = time_shares(spans, wall_us)
    kernels = sum(not name.startswith(("Memcpy", "Memset")) for name, _, _ in spans)
    return {
        "busy": round(1.0 - shares["idle"], 3),
        "shares": {name: round(share, 3) for name, share in shares.items()},
        "kernels_per_update": round(kernels / updates, 1) if CUDA else None,
    }


def _aten(event: Any) -> bool:
    return event.name.startswith("aten::")


def train_throughput(cfg: ModelConfig, peak: float) -> tuple[Figures, Transformer]:
    """bf16 training of `cfg` on WMT-shaped random batches queued as the loop queues them: target
    tokens/s; MFU of the FLOPs run (FlopCounterMode: padding counts) and of the real tokens'
    (gpu_measure.training_flops); real over padded tokens; where the GPU's time goes and its
    kernels per update (on CPU: aten operators of one update, as tests/unit/test_op_count.py
    counts them); peak memory. Returns the trained model too, for decoding."""
    tokens, updates = (25000, 8) if CUDA else (2000, 3)
    rng = np.random.default_rng(0)
    model, opt = train_model(cfg)
    scaler = torch.amp.GradScaler(DEVICE.type, enabled=False)
    batches = [pinned(wmt_batch(tokens, cfg.tgt_vocab_size, rng)) for _ in range(updates)]
    flops = 0.0
    for batch in batches:  # counting the FLOPs of each batch warms up too
        with FlopCounterMode(display=False) as counter:
            accumulate_gradients(model, [batch], 0.1, "bf16", scaler, DEVICE)
        opt.zero_grad(set_to_none=True)
        flops += counter.get_total_flops()
    real = sum(training_flops(cfg, *real_lengths(batch)) for batch in batches)
    targets = [int((b["tgt_out"] != 0).sum()) for b in batches]  # known on the host, as in the loop
    if CUDA:
        torch.cuda.reset_peak_memory_stats()
    seconds, _ = timed(functools.partial(queued_updates, model, opt, batches, targets))
    profiled = gpu_time(functools.partial(queued_updates, model, opt, batches[:3], targets[:3]), 3)
    if not CUDA:  # no torch.compile'd loss on CPU, so the dispatch mode counts every operator
        one = functools.partial(queued_updates, model, opt, batches[:1], targets[:1])
        profiled["kernels_per_update"] = count_aten_ops(one)
    figures: Figures = {
        "tokens_per_update": round(sum(targets) / updates),
        "target_tokens_per_s": round(sum(targets) / seconds),
        "mfu": round(flops / seconds / peak, 4), "mfu_real": round(real / seconds / peak, 4),
        "real_share": round(real_share(batches), 3),
        "gpu_busy_share": profiled["busy"], "time_shares": profiled["shares"],
        "kernels_per_update": profiled["kernels_per_update"],
        "kernels_counted": "CUDA kernels (profiler)" if CUDA else "aten operators (dispatch, CPU)",
        "peak_memory_gb": round(torch.cuda.max_memory_allocated() / 2**30, 2) if CUDA else None,
    }  # fmt: skip
    return figures, model


def decode_throughput(model: Transformer, cfg: ModelConfig) -> Figures:
    """Beam-4 and greedy decoding of WMT-shaped random sentences: sentences/s and tokens/s."""
    decoder = copy.deepcopy(model).eval()
    if CUDA:
        decoder = decoder.to(torch.bfloat16)  # as `nmt translate --precision bf16` does
    rng = np.random.default_rng(1)
    sentences = 500 if CUDA else 16
    lengths = np.clip(rng.lognormal(3.15, 0.55, sentences), 3, 200).astype(int)
    src = [rng.integers(4, cfg.src_vocab_size, n) for n in lengths]
    figures: Figures = {}
    for beam in (4, 1):
        settings = DecodeSettings(DecodeConfig(beam=beam), batch_tokens=8192)
        seconds, hyps = timed(
            functools.partial(translate_sentences, Ensemble([decoder]), src, settings, DEVICE)
        )
        produced = sum(len(h[0].tokens) + 1 for h in hyps)  # + EOS
        figures[f"beam{beam}"] = {
            "sentences_per_s": round(sentences / seconds, 1),
            "tokens_per_s": round(produced / seconds),
        }
    return figures


def throughput(models: dict[str, ModelConfig] | None = None, decode: bool = True) -> Figures:
    """bf16 training figures (train_throughput) of the paper's base and big models, or of
    `models`, and the hours of the paper's schedule at this speed; beam-4 and greedy decoding
    speed unless not `decode`."""
    peak = matmul_peak()
    out: Figures = {"matmul_peak_tflops": round(peak / 1e12, 3)}
    for name, cfg in (models or ({"base": BASE, "big": BIG} if CUDA else {"tiny": TINY})).items():
        figures, model = train_throughput(cfg, peak)
        if name in PAPER_UPDATES:  # the paper's schedule at ~25k target tokens an update (§5.1, §5.3)
            hours = PAPER_UPDATES[name] * 25000 / figures["target_tokens_per_s"] / 3600
            figures["paper_schedule_hours"] = round(hours, 2)
        if decode:
            figures.update(decode_throughput(model, cfg))
        out[name] = figures
        del model
        if CUDA:
            torch.cuda.empty_cache()
    if decode:
        out["note"] = "untrained models: greedy outputs mostly run to the length limit (source + 50)"
    return out


def compiled(modes: list[str]) -> Figures:
    """bf16 training through torch.compile of the model, as `train.compile` trains, against the
    eager model: the same updates over a few batch shapes (the bounded set that padding to
    multiples of 8 and length buckets give), timed once every shape has been compiled. Per mode:
    target tokens/s, MFU (padded, and of the real tokens), the ratio to eager, the first pass's
    seconds (compilation included) and the first update's loss (the same model: equal but for
    dropout's draws and bf16 rounding)."""
    cfg = BASE if CUDA else TINY
    tokens, shapes, updates = (25000, 4, 12) if CUDA else (2000, 2, 4)
    rng = np.random.default_rng(1)
    kinds = [pinned(wmt_batch(tokens, cfg.tgt_vocab_size, rng, 8 if CUDA else 1)) for _ in range(shapes)]
    batches = [kinds[i % shapes] for i in range(updates)]
    targets = [int((b["tgt_out"] != 0).sum()) for b in batches]
    scaler = torch.amp.GradScaler(DEVICE.type, enabled=False)
    peak, flops = matmul_peak(), 0.0
    model, _ = train_model(cfg)
    for batch in kinds:
        with FlopCounterMode(display=False) as counter:
            accumulate_gradients(model, [batch], 0.1, "bf16", scaler, DEVICE)
        flops += counter.get_total_flops() * (updates // shapes)
    del model
    real = sum(training_flops(cfg, *real_lengths(batch)) for batch in batches)
    out: Figures = {"model": "base" if CUDA else "tiny", "shapes": shapes, "updates": updates,
                    "real_share": round(real_share(batches), 3)}  # fmt: skip
    for mode in ["eager", *modes]:
        torch._dynamo.reset()  # each mode compiles from nothing, as a new run would
        model, opt = train_model(cfg)
        net = model if mode == "eager" else cast(torch.nn.Module, torch.compile(model, mode=mode))
        first = accumulate_gradients(net, [batches[0]], 0.1, "bf16", scaler, DEVICE)
        opt.zero_grad(set_to_none=True)
        # The first pass compiles every shape.
        first_pass, _ = timed(functools.partial(queued_updates, net, opt, batches, targets))
        seconds, _ = timed(functools.partial(queued_updates, net, opt, batches, targets))
        out[mode] = {
            "first_loss": round(float(first.sums[0]) / first.tokens, 4),
            "first_pass_s": round(first_pass, 2),
            "target_tokens_per_s": round(sum(targets) / seconds),
            "mfu": round(flops / seconds / peak, 4),
            "mfu_real": round(real / seconds / peak, 4),
        }
        del model, opt, net
        if CUDA:
            torch.cuda.empty_cache()
    eager = out["eager"]
    for mode in modes:
        out[mode]["over_eager"] = round(out[mode]["target_tokens_per_s"] / eager["target_tokens_per_s"], 3)
    same = {
        mode: abs(out[mode]["first_loss"] - eager["first_loss"]) <= 0.01 * eager["first_loss"]
        for mode in modes
    }
    return {**out, **checks(**{f"{mode}_loss_as_eager": ok for mode, ok in same.items()})}


def decode_attention() -> Figures:
    """Beam-4 decoding of the same sentences in fp32 and bf16, with the attention kernels nmt
    chooses on a GPU (no cuDNN attention, device.configure_cuda) and with torch's default choice:
    seconds each and bf16 / fp32. On CPU the cuDNN switch does nothing; the run checks the step."""
    cfg = BASE if CUDA else TINY
    torch.manual_seed(0)
    fp32 = Transformer(cfg).to(DEVICE).eval()
    models = {"fp32": fp32, "bf16": copy.deepcopy(fp32).to(torch.bfloat16)}
    rng = np.random.default_rng(3)
    n = 500 if CUDA else 16
    src = [rng.integers(4, cfg.src_vocab_size, int(k)) for k in np.clip(rng.lognormal(3.15, 0.55, n), 3, 120)]
    # Untrained: a fixed length limit.
    decode = DecodeSettings(DecodeConfig(beam=4, max_len_a=0.0, max_len_b=60), batch_tokens=8192)
    out: Figures = {}
    for kernels, cudnn in (("nmt", False), ("torch_default", True)):
        if CUDA:
            torch.backends.cuda.enable_cudnn_sdp(cudnn)
        row: Figures = {}
        for precision, model in models.items():
            translate_sentences(Ensemble([model]), src[:8], decode, DEVICE)  # warm-up
            sync()
            start = time.perf_counter()
            translate_sentences(Ensemble([model]), src, decode, DEVICE)
            sync()
            row[f"{precision}_s"] = round(time.perf_counter() - start, 3)
        row["bf16_over_fp32"] = round(row["bf16_s"] / row["fp32_s"], 3)
        out[kernels] = row
    if CUDA:
        configure_cuda()
    return {
        "sentences": n,
        "beam": 4,
        **out,
        **checks(bf16_not_slower=out["nmt"]["bf16_over_fp32"] <= 1.0 or not CUDA),
    }


def constraints_and_alignment() -> Figures:
    """Beam-4 decoding with two phrases a sentence and word alignment read during the search, on
    the device: every phrase met, the links those of a teacher-forced pass, the output the CPU's
    for the same model (fp32), and the seconds against the same decoding unconstrained."""
    cfg = TINY
    torch.manual_seed(0)
    model = Transformer(cfg).eval()
    with torch.no_grad():  # sharp distributions, so that the phrases go against the model
        model.tgt_embed.tokens.weight.mul_(8.0)
    rng = np.random.default_rng(5)
    n = 256 if CUDA else 16
    src = [rng.integers(4, cfg.src_vocab_size, int(k)) for k in rng.integers(5, 30, n)]
    phrases = [[rng.integers(4, cfg.tgt_vocab_size, int(k)).tolist() for k in (1, 2)] for _ in range(n)]
    decode = DecodeSettings(DecodeConfig(beam=4, max_len_a=1.0, max_len_b=10), batch_tokens=8192)
    found: dict[str, Any] = {}
    seconds: dict[str, float] = {}
    for device in [torch.device("cpu"), DEVICE] if CUDA else [DEVICE]:
        ensemble = Ensemble([model.to(device)])
        for name, given in (("plain", None), ("constrained", phrases)):
            translate_sentences(ensemble, src[:4], decode, device, constraints=given and given[:4])
            sync()
            start = time.perf_counter()
            found[f"{device.type}_{name}"] = translate_sentences(
                ensemble, src, dataclasses.replace(decode, alignments=True), device, constraints=given
            )
            sync()
            seconds[f"{device.type}_{name}_s"] = round(time.perf_counter() - start, 3)
    hyps = [h[0] for h in found[f"{DEVICE.type}_constrained"]]
    met = all(
        any(h.tokens[i : i + len(p)] == p for i in range(len(h.tokens)))
        for h, sentence in zip(hyps, phrases, strict=True)
        for p in sentence
    )
    reference = [h[0] for h in found["cpu_constrained"]]
    same = sum(a.tokens == b.tokens for a, b in zip(hyps, reference, strict=True)) / n
    forced = attended_pieces(model.to(DEVICE), src[:16], [h.tokens for h in hyps[:16]], default_layer(model))
    links = all(h.links == f.tolist() for h, f in zip(hyps[:16], forced, strict=True))
    ratio = seconds[f"{DEVICE.type}_plain_s"] / seconds[f"{DEVICE.type}_constrained_s"]
    return {
        "sentences": n,
        **seconds,
        "speed_ratio": round(ratio, 3),
        "same_as_cpu": round(same, 3),
        **checks(phrases_met=met, links_teacher_forced=links, like_cpu=same >= 0.95),
    }


# --- driver ---------------------------------------------------------------------------------------


def run(name: str, step: Callable[[], Figures]) -> Figures:
    start = time.monotonic()
    try:
        figures = step()
        result = {"name": name, "ok": bool(figures.pop("ok", True)), **figures}
    except Exception as exc:  # a failing step is reported; the others still run
        tail = traceback.format_exc().strip().splitlines()[-4:]
        result = {"name": name, "ok": False, "error": f"{type(exc).__name__}: {exc}", "traceback": tail}
    result["seconds"] = round(time.monotonic() - start, 1)
    return result


def clean(value: Any) -> Any:
    """Non-finite floats as strings: the report stays strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clean(v) for v in value]
    return value


def arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Run every CUDA path of nmt_cli once; print JSON.")
    shared = ROOT.parent / "shared" / "data" / "multi30k"
    parser.add_argument(
        "--data",
        type=Path,
        default=shared if shared.is_dir() else None,
        help="raw Multi30k for side_by_side (default: ../shared/data/multi30k)",
    )
    parser.add_argument(
        "--seconds",
        type=float,
        default=45.0 if CUDA else 20.0,
        help="training seconds of each toolkit in side_by_side",
    )
    parser.add_argument(
        "--compile-modes",
        default="default",
        help="torch.compile modes the compiled step measures against eager (e.g. default,reduce-overhead)",
    )
    parser.add_argument("--only", default="", help="comma-separated step names to run, in this order")
    return parser.parse_args(argv)  # fmt: skip


def main(argv: list[str]) -> int:
    args = arguments(argv)
    if CUDA:
        configure_cuda()  # the attention kernels nmt's commands use
    else:
        torch.set_num_threads(min(2, torch.get_num_threads()))  # more threads than cores spin
    report: Figures = {
        "device": DEVICE.type, "dry_run": not CUDA, "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name() if CUDA else None, "gpus": torch.cuda.device_count(),
    }  # fmt: skip
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="gpu_check_") as tmp:
        root = Path(tmp)
        steps: dict[str, Callable[[], Figures]] = {
            "train_steps": train_steps,
            "fp16_overflow": fp16_overflow,
            "update_syncs": update_syncs,
            "resume_across_precisions": lambda: resume_across_precisions(root),
            "torchrun": lambda: torchrun(root),
            "sdpa": sdpa,
            "throughput": throughput,
            "compiled": lambda: compiled([m for m in args.compile_modes.split(",") if m]),
            "decode_attention": decode_attention,
            "constraints_and_alignment": constraints_and_alignment,
            "path_equivalence": path_equivalence,
            "path_throughput": path_throughput,
            "batch_fit": batch_fit,
            "side_by_side": lambda: side_by_side(args.data, root / "side_by_side", args.seconds),
        }
        names = [name for name in args.only.split(",") if name] or list(steps)
        unknown = [name for name in names if name not in steps]
        if unknown:
            print(f"gpu_check: no step {', '.join(unknown)}; steps: {', '.join(steps)}", file=sys.stderr)
            return 2
        report["steps"] = []
        for name in names:
            report["steps"].append(run(name, steps[name]))
            print(json.dumps(clean(report["steps"][-1])), file=sys.stderr, flush=True)  # seen as it goes
    report["ok"] = all(step["ok"] for step in report["steps"])
    report["seconds"] = round(time.monotonic() - start, 1)
    text = json.dumps(clean(report), indent=2)
    print(text)
    RESULT.parent.mkdir(parents=True, exist_ok=True)
    RESULT.write_text(text + "\n", encoding="utf-8")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
