"""Training throughput of the benchmark model (see common.py) in fp32 and bf16.

Runs `nmt train` for warm-up + timed updates (no validation, no checkpoints) and reports
target tokens/s and updates/s over the timed updates, the process's peak RSS, and the
model-FLOPs utilisation against bench/peak.py's matmul peak. Each precision runs --repeats
times (alternating, so a slow spell of the machine hits both); speeds are the medians, the
peak RSS the largest seen.
    .venv/bin/python bench/train_speed.py [--data ../shared/data/multi30k] [--updates 100] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
from pathlib import Path

import peak
from common import (
    DEFAULT_DATA,
    FAIRSEQ_BATCH_TOKENS,
    RECIPE,
    THREADS,
    WORK,
    emit,
    nmt,
    prepared,
    train_records,
)

from nmt_cli.recipe import load_recipe

LOG_EVERY = 10


def flops_per_target_token(data_meta: dict) -> float:
    """6 x (matmul weights each token passes through) per token, forward + backward; the encoder's
    share scaled by the source/target token ratio. Attention scores are left out (short sentences)."""
    m = load_recipe(RECIPE).model
    d, ff, h, dk, dv = m.d_model, m.d_ff, m.heads, m.d_k, m.d_v
    attn = d * h * (2 * dk + dv) + h * dv * d
    enc = m.encoder_layers * (attn + 2 * d * ff)
    dec = m.decoder_layers * (2 * attn + 2 * d * ff) + d * data_meta["vocab_size"]["tgt"]
    train = data_meta["splits"]["train"]
    return 6.0 * (enc * train["src_tokens"] / train["tgt_tokens"] + dec)


def measure(data_dir: Path, precision: str, warmup: int, updates: int) -> dict:
    run = WORK / f"train_speed_{precision}"
    shutil.rmtree(run, ignore_errors=True)
    _, rss = nmt(
        "train",
        "--data",
        str(data_dir),
        "--recipe",
        str(RECIPE),
        "--out",
        str(run),
        "--device",
        "cpu",
        "--threads",
        str(THREADS),
        "--precision",
        precision,
        "--set",
        f"train.max_updates={warmup + updates}",
        "--set",
        "train.max_minutes=0",
        "--set",
        "train.valid_every_updates=0",
        "--set",
        "train.save_every_updates=0",
        "--set",
        "train.save_every_minutes=0",
        "--set",
        f"train.log_every_updates={LOG_EVERY}",
        "--set",
        f"train.max_tokens={FAIRSEQ_BATCH_TOKENS}",
    )
    timed = [r for r in train_records(run) if r["update"] > warmup]
    seconds = sum(LOG_EVERY / r["updates_per_s"] for r in timed)
    tokens = sum(r["tokens_per_s"] * LOG_EVERY / r["updates_per_s"] for r in timed)
    shutil.rmtree(run, ignore_errors=True)
    return {"tok_s": tokens / seconds, "upd_s": len(timed) * LOG_EVERY / seconds, "rss_mb": rss}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--updates", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    data_dir = prepared(args.data)
    meta = json.loads((data_dir / "meta.json").read_text())
    per_token = flops_per_target_token(meta)
    peaks = peak.measure()  # not peak.main(), which prints: this script prints one JSON object
    result = dict(peaks)
    runs: dict[str, list[dict]] = {"fp32": [], "bf16": []}
    for _ in range(args.repeats):
        for precision, done in runs.items():
            done.append(measure(data_dir, precision, args.warmup, args.updates))
    for precision, done in runs.items():
        tok_s = statistics.median(m["tok_s"] for m in done)
        result[f"train_tok_s_{precision}"] = round(tok_s)
        result[f"train_tok_s_{precision}_runs"] = [round(m["tok_s"]) for m in done]
        result[f"train_upd_s_{precision}"] = round(statistics.median(m["upd_s"] for m in done), 3)
        result[f"train_peak_rss_mb_{precision}"] = round(max(m["rss_mb"] for m in done))
        gflops = tok_s * per_token / 1e9
        result[f"train_mfu_{precision}"] = round(gflops / peaks[f"peak_gflops_{precision}"], 3)
    result["train_peak_rss_mb"] = max(result["train_peak_rss_mb_fp32"], result["train_peak_rss_mb_bf16"])
    emit(result)
    return result


if __name__ == "__main__":
    main()
