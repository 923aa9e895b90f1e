"""The correctness checks of nmt's CUDA paths, each on a given device: training updates in fp32,
bf16 and fp16; an fp16 overflow skipped by the loss scaler; no host synchronisation inside an
update; `nmt train` resumed across precisions; torchrun against one process; the attention masks
under SDPA; constrained decoding with alignments against the CPU's; the packed and bf16-copy
training paths against the padded update. Each returns its figures with "ok" (gpu_helpers.checks),
so that a failing test shows what was measured; test_gpu_correctness.py runs them, and
bench/gpu_run.py reports path_equivalence beside the paths' throughput. No pytest here."""

from __future__ import annotations

import math
import os
import random
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch
from gpu_helpers import (
    BASE,
    TINY,
    Figures,
    checks,
    combine,
    in_fused_adam,
    model_of,
    pinned,
    sync,
    train_model,
    wmt_batch,
)

from nmt_cli import checkpoint
from nmt_cli.config import DecodeConfig, ModelConfig
from nmt_cli.data.batching import collate
from nmt_cli.decoding.alignment import attended_pieces, default_layer
from nmt_cli.decoding.batches import translate_sentences
from nmt_cli.decoding.ensemble import Ensemble
from nmt_cli.decoding.settings import DecodeSettings
from nmt_cli.model import Transformer
from nmt_cli.training.precision import HalfWeights, autocast
from nmt_cli.training.update import Pending, accumulate_gradients, apply_update, packed

ROOT = Path(__file__).resolve().parents[2]


def small(device: torch.device) -> ModelConfig:
    """The model of the training checks: the paper's base on a GPU, a tiny one on CPU."""
    return BASE if device.type == "cuda" else TINY


def update(
    model: Transformer,
    opt: torch.optim.Adam,
    scaler: torch.amp.GradScaler,
    batch: dict,
    precision: str,
    device: torch.device,
) -> tuple[bool, float]:
    """One update on one batch, as the training loop does it; returns (stepped, loss per token)."""
    loss = accumulate_gradients(model, [batch], 0.1, precision, scaler, device)
    _, skipped = apply_update(model, opt, scaler, 5e-4, 1.0, loss.sums[0]).tolist()
    return skipped == 0.0, float(loss.sums[0]) / loss.tokens


def train_steps(device: torch.device) -> Figures:
    """~5 updates on one fixed batch per precision: the loss must stay finite and go down.
    fp16 with loss scaling is CUDA-only (nmt train refuses it on CPU)."""
    cuda, cfg = device.type == "cuda", small(device)
    out: Figures = {}
    batch = wmt_batch(4000 if cuda else 1000, cfg.tgt_vocab_size, np.random.default_rng(0))
    for precision in ("fp32", "bf16", *(["fp16"] if cuda else [])):
        model, opt = train_model(cfg, device=device)
        scaler = torch.amp.GradScaler(device.type, enabled=precision == "fp16")
        results = [update(model, opt, scaler, batch, precision, device) for _ in range(6)]
        losses = [round(loss, 4) for _, loss in results]
        out[precision] = {
            "losses": losses,
            "skipped_updates": sum(not stepped for stepped, _ in results),
            **checks(finite=all(map(math.isfinite, losses)), decreasing=losses[-1] < losses[0]),
        }
    return combine("precisions", out)


def fp16_overflow(device: torch.device) -> Figures:
    """A non-finite gradient must skip the step, halve the loss scale and leave the weights alone.
    On CPU the scaler is the same code (torch >= 2.3 has a CPU GradScaler) under fp32."""
    model, opt = train_model(TINY, device=device)
    scaler = torch.amp.GradScaler(device.type, enabled=True)
    precision = "fp16" if device.type == "cuda" else "fp32"
    batch = wmt_batch(1000, TINY.tgt_vocab_size, np.random.default_rng(1))
    loss = accumulate_gradients(model, [batch], 0.1, precision, scaler, device)
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
    recovered, _ = update(model, opt, scaler, batch, precision, device)  # the next finite update steps
    return {
        "precision": precision, "scale_before": scale, "scale_after": scaler.get_scale(),
        "grad_norm": grad_norm,
        **checks(skipped=not stepped, scale_halved=scaler.get_scale() == scale / 2,
                 weights_unchanged=unchanged, adam_state_untouched=untouched, next_update_steps=recovered),
    }  # fmt: skip


def update_syncs(device: torch.device) -> Figures:
    """Host synchronisations in 6 updates of 2 accumulated batches, queued as the training loop
    queues them, then read once as the loop reads them at a log record. On CUDA every
    synchronisation is counted (torch's sync debug mode); on CPU the profiler's item, nonzero,
    is_nonzero and equal outside fused Adam (whose CPU kernel reads its step counts)."""
    cuda, cfg = device.type == "cuda", small(device)
    model, opt = train_model(cfg, device=device)
    scaler = torch.amp.GradScaler(device.type, enabled=cuda)
    rng = np.random.default_rng(2)
    # wmt_batch finds each batch's real rows on the host, as the loop's prefetch thread does.
    size = 4000 if cuda else 500
    batches = [[pinned(wmt_batch(size, cfg.tgt_vocab_size, rng), device) for _ in range(2)] for _ in range(6)]
    precision = "fp16" if cuda else "bf16"
    pending = Pending()

    # The loop knows each update's target tokens from the corpus's lengths, before any tensor.
    tokens = [sum(int((b["tgt_out"] != 0).sum()) for b in pair) for pair in batches]

    def updates() -> None:
        for pair, ntokens in zip(batches, tokens, strict=True):
            loss = accumulate_gradients(model, pair, 0.1, precision, scaler, device, ntokens)
            pending.add(loss, apply_update(model, opt, scaler, 5e-4, 1.0, loss.sums[0]))

    updates()  # the first updates set Adam's state up
    pending.settle()
    sync(device)
    counted = _cuda_syncs(updates, pending) if cuda else _cpu_syncs(updates, pending)
    per_update = counted["in_updates"] / len(batches)
    return {"precision": precision, "syncs_per_update": per_update, "syncs_at_log": counted["at_log"],
            "sync_sites": counted["sites"], "other_warnings": counted["others"],
            **checks(none_in_updates=per_update == 0)}  # fmt: skip


def _cuda_syncs(updates: Any, pending: Pending) -> Figures:
    """The synchronisations torch's sync debug mode warns of in `updates()` and at the read."""
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
    marked = list(zip(caught, is_sync, strict=True))
    return {
        "in_updates": sum(is_sync[:in_updates]),
        "at_log": sum(is_sync[in_updates:]),
        "others": sorted({f"{w.category.__name__}: {str(w.message)[:160]}" for w, s in marked if not s}),
        "sites": sorted({f"{Path(w.filename).name}:{w.lineno}" for w, s in marked if s}),
    }


def _cpu_syncs(updates: Any, pending: Pending) -> Figures:
    """The profiler's reads back to the host in `updates()` (fused Adam's own left out) and at
    the read."""
    from torch.profiler import ProfilerActivity, profile

    names = ("aten::item", "aten::nonzero", "aten::is_nonzero", "aten::equal")
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        updates()
    count = sum(e.name in names and not in_fused_adam(e) for e in prof.events())
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        pending.settle()
    at_log = sum(e.name in names for e in prof.events())
    return {"in_updates": count, "at_log": at_log, "others": [], "sites": []}


# --- the real CLI, in child processes ------------------------------------------------------------

WORDS = "apple river stone cloud green music paper tiger silver window orange garden yellow friend".split()
TINY_RUN = [  # tests/helpers.py's tiny copy-task model; no dropout so that runs compare exactly
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


def train_args(data: Path, out: Path, device: torch.device, *overrides: str) -> list[str]:
    on = ["--device", "cuda"] if device.type == "cuda" else ["--device", "cpu", "--threads", "1"]
    return ["train", "--data", str(data), "--out", str(out), *on,
            *(x for item in (*TINY_RUN, *overrides) for x in ("--set", item))]  # fmt: skip


def resume_across_precisions(tmp: Path, device: torch.device) -> Figures:
    """Train 3 updates in bf16, resume to 6 in fp16 (fp32 on CPU), then to 9 in bf16."""
    data, run = copy_corpus(tmp), tmp / "resume"
    plan = [("bf16", 3), ("fp16" if device.type == "cuda" else "fp32", 6), ("bf16", 9)]
    updates = []
    for precision, upto in plan:
        nmt([*train_args(data, run, device, f"train.max_updates={upto}"), "--precision", precision])
        updates.append(checkpoint.load(run / "checkpoints" / "checkpoint_last.pt").update)
    return {"plan": plan, "checkpoint_updates": updates, **checks(updates=updates == [3, 6, 9])}


def torchrun(tmp: Path, device: torch.device) -> Figures:
    """torchrun with one process per GPU (NCCL) against one process accumulating as many batches:
    the same updates, so the same weights. On CPU: two gloo processes, as the unit test does."""
    cuda = device.type == "cuda"
    data = copy_corpus(tmp)
    procs = torch.cuda.device_count() if cuda else 2
    sets = ["train.max_updates=4", "train.save_every_updates=0"]
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone"]  # = torchrun
    launcher += [f"--nproc_per_node={procs}", "-m", "nmt_cli"]
    nmt([*train_args(data, tmp / "ddp", device, *sets), "--precision", "fp32"], launcher)
    nmt([*train_args(data, tmp / "one", device, *sets, f"train.update_freq={procs}"), "--precision", "fp32"])
    a, b = (checkpoint.load(tmp / run / "checkpoints" / "checkpoint_last.pt") for run in ("ddp", "one"))
    diff = max(float((a.model[k].float() - b.model[k].float()).abs().max()) for k in b.model)
    bitwise = all(torch.equal(a.model[k], b.model[k]) for k in b.model)
    return {
        "processes": procs, "backend": "nccl" if cuda else "gloo", "distributed": procs > 1,
        "updates": [a.update, b.update], "bitwise_equal": bitwise, "max_abs_diff": diff,
        **({"note": "one GPU: torchrun runs a single process, no NCCL collective"} if procs == 1 else {}),
        **checks(same_updates=a.update == b.update == 4, same_weights=diff <= 1e-5),
    }  # fmt: skip


# --- attention, decoding, training paths ---------------------------------------------------------


def sdpa_masks(device: torch.device) -> Figures:
    """The masks under the device's attention kernels, in fp32 and bf16: padding a source (in one
    batch with a longer one) and changing a later target token change nothing they shouldn't,
    within a tolerance relative to the largest logit."""
    model = model_of(TINY, device=device).eval()
    gen = torch.Generator().manual_seed(0)
    a, b = (torch.randint(4, 1000, (n,), generator=gen).numpy() for n in (12, 20))
    tgt = torch.randint(4, 1000, (1, 10), generator=gen).to(device)
    later = tgt.clone()
    later[0, 6] = 4 if int(tgt[0, 6]) != 4 else 5
    masks: Figures = {}
    with torch.inference_mode():
        for precision, tol in (("fp32", 1e-4), ("bf16", 5e-2)):
            with autocast(device, precision):
                # `a` alone, then `a` padded to the length of `b` in one batch with it.
                alone = model(collate([a])["src"].to(device), tgt).float()
                padded = model(collate([a, b])["src"].to(device), tgt.expand(2, -1)).float()[:1]
                changed = model(collate([a])["src"].to(device), later).float()
            scale = float(alone.abs().max())
            pad_diff = float((alone - padded).abs().max()) / scale
            causal_diff = float((alone[:, :6] - changed[:, :6]).abs().max()) / scale
            later_changed = bool((alone[:, 6:] != changed[:, 6:]).any())
            masks[precision] = {"padding_rel_diff": pad_diff, "causal_rel_diff": causal_diff,
                                "later_changed": later_changed,
                                **checks(padding=pad_diff <= tol, causal=causal_diff <= tol)}  # fmt: skip
    return combine("masks", masks)


def constraints_and_alignment(device: torch.device) -> Figures:
    """Beam-4 decoding with two phrases a sentence and word alignment read during the search, on
    `device`: every phrase met, the links those of a teacher-forced pass, and (on a GPU) the
    output the CPU's for the same model in fp32, for at least 95% of the sentences."""
    torch.manual_seed(0)
    model = Transformer(TINY).eval()
    with torch.no_grad():  # sharp distributions, so that the phrases go against the model
        model.tgt_embed.tokens.weight.mul_(8.0)
    rng = np.random.default_rng(5)
    n = 256 if device.type == "cuda" else 16
    src = [rng.integers(4, TINY.src_vocab_size, int(k)) for k in rng.integers(5, 30, n)]
    phrases = [[rng.integers(4, TINY.tgt_vocab_size, int(k)).tolist() for k in (1, 2)] for _ in range(n)]
    decode = DecodeSettings(
        DecodeConfig(beam=4, max_len_a=1.0, max_len_b=10), batch_tokens=8192, alignments=True
    )
    found = {}
    for on in dict.fromkeys([torch.device("cpu"), device]):  # the CPU's output, then the device's
        hyps = translate_sentences(Ensemble([model.to(on)]), src, decode, on, constraints=phrases)
        found[on.type] = [h[0] for h in hyps]
    hyps = found[device.type]
    met = all(
        any(h.tokens[i : i + len(p)] == p for i in range(len(h.tokens)))
        for h, sentence in zip(hyps, phrases, strict=True)
        for p in sentence
    )
    same = sum(a.tokens == b.tokens for a, b in zip(hyps, found["cpu"], strict=True)) / n
    forced = attended_pieces(model.to(device), src[:16], [h.tokens for h in hyps[:16]], default_layer(model))
    links = all(h.links == f.tolist() for h, f in zip(hyps[:16], forced, strict=True))
    return {
        "sentences": n,
        "same_as_cpu": round(same, 3),
        **checks(phrases_met=met, links_teacher_forced=links, like_cpu=same >= 0.95),
    }


def gradients(
    model: Transformer, batch: dict, precision: str, device: torch.device, half: bool = False
) -> tuple[float, dict]:
    """(loss per token, fp32 gradients) of one update on `batch`, through a bf16 copy if `half`."""
    scaler = torch.amp.GradScaler(device.type, enabled=False)
    if half:
        copy = HalfWeights(model)
        loss = accumulate_gradients(copy.copy, [batch], 0.1, "fp32", scaler, device)
        copy.to_master()
    else:
        loss = accumulate_gradients(model, [batch], 0.1, precision, scaler, device)
    grads = {
        name: p.grad.detach().float().clone() for name, p in model.named_parameters() if p.grad is not None
    }
    model.zero_grad(set_to_none=True)
    return float(loss.sums[0]) / loss.tokens, grads


def gradient_gap(got: dict, expected: dict) -> float:
    """The norm of the gradient difference over the norm of the expected gradient, all tensors."""
    diff = sum(float((got[k] - v).norm()) ** 2 for k, v in expected.items()) ** 0.5
    return diff / max(1e-30, sum(float(v.norm()) ** 2 for v in expected.values()) ** 0.5)


def path_equivalence(device: torch.device) -> Figures:
    """bf16 updates without dropout on the same batch: padded eager (the reference), packed,
    the bf16 copy, and fp32 padded (how far bf16 itself is from exact). Each gap is the
    relative difference of the loss and of the whole gradient from the reference's; on a GPU
    packed batches run variable-length flash attention, which CPU tests cannot reach."""
    cuda = device.type == "cuda"
    cfg = small(device)
    batch = wmt_batch(8000 if cuda else 600, cfg.tgt_vocab_size, np.random.default_rng(7))
    model = model_of(cfg, device=device).eval()  # eval: no dropout, for comparisons
    reference_loss, reference = gradients(model, pinned(batch, device), "bf16", device)
    out: Figures = {"model": "base" if cuda else "tiny"}
    runs = {
        "fp32": (batch, "fp32", False),
        "packed": (packed(batch), "bf16", False),
        "half_weights": (batch, "bf16", True),
        "packed_half_weights": (packed(batch), "bf16", True),
    }
    for name, (given, precision, half) in runs.items():
        loss, grads = gradients(model, pinned(given, device), precision, device, half)
        out[name] = {
            "loss_gap": round(abs(loss - reference_loss) / reference_loss, 5),
            "gradient_gap": round(gradient_gap(grads, reference), 5),
        }
    bound = 2 * out["fp32"]["gradient_gap"] + 0.01  # bf16 paths differ from each other as from fp32
    return {
        **out,
        **checks(**{f"{name}_close": out[name]["gradient_gap"] <= bound and out[name]["loss_gap"] <= 0.01
                    for name in runs}),
    }  # fmt: skip
