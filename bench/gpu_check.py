"""`make gpu-check`: measure nmt_cli's CUDA paths once and report the figures, as JSON.

Steps: which SDPA kernels run for training and decoding shapes; training and decoding throughput
of the paper's base and big models (MFU); training through torch.compile against the eager model
(`--compile-modes`, e.g. default,reduce-overhead for CUDA graphs); bf16 against fp32 decoding
with and without cuDNN attention; the throughput of packed batches, the bf16 copy and
torch.compile against the padded autocast update, and train.fit_batch's batch for the WMT14
recipes (bench/gpu_paths.py); fairseq beside nmt, training and decoding the same data in the
same run (bench/side_by_side.py; skipped where fairseq is not importable). Each step is {"name",
"ok", figures..., "error" when it failed}; a failing step does not stop the others, and the exit
status is 1 when any failed. Whether those paths compute the right thing (fp16 overflow, host
syncs, resume across precisions, torchrun, the attention masks, constraints and alignment
against the CPU, the training paths' gradients) is tests/gpu, marked `gpu`, which `make
gpu-check` runs first; this script imports its helpers (tests/gpu/gpu_helpers.py).

On a machine without CUDA the same steps run on CPU with a tiny model and the report says
"device": "cpu", "dry_run": true: CI runs that to keep the script working. Run: `make
gpu-check` or `.venv/bin/python bench/gpu_check.py [--only STEP,...] [--data MULTI30K]
[--seconds S]`; each step's JSON goes to stderr as it ends, the report to stdout and
bench/results/gpu_check.json.
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import math
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
from gpu_paths import batch_fit, path_throughput
from side_by_side import side_by_side  # bench/, beside this file
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from nmt_cli.config import DecodeConfig, ModelConfig
from nmt_cli.decoding.batches import translate_sentences
from nmt_cli.decoding.ensemble import Ensemble
from nmt_cli.decoding.settings import DecodeSettings
from nmt_cli.device import configure_cuda
from nmt_cli.model import Transformer
from nmt_cli.training.update import Pending, accumulate_gradients, apply_update

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "gpu"))  # the GPU tests' helpers, shared with them
from gpu_helpers import BASE, BIG, CUDA, DEVICE, TINY, Figures, checks, pinned, sync, train_model, wmt_batch  # noqa: E402

RESULT = ROOT / "bench" / "results" / "gpu_check.json"
T = TypeVar("T")
BACKENDS = (
    SDPBackend.FLASH_ATTENTION,
    SDPBackend.EFFICIENT_ATTENTION,
    SDPBackend.CUDNN_ATTENTION,
    SDPBackend.MATH,
)


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


# --- attention ------------------------------------------------------------------------------------


def sdpa() -> Figures:
    """Which SDPA kernels run for a training-shaped and a decoding-shaped call, and the one torch
    picks (the masks' invariants under them are tests/gpu's test of sdpa_masks)."""
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
    return {"dtype": str(dtype), "kernels": kernels}


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
            "sdpa": sdpa,
            "throughput": throughput,
            "compiled": lambda: compiled([m for m in args.compile_modes.split(",") if m]),
            "decode_attention": decode_attention,
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
