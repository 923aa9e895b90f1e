"""`make bench`: every benchmark in turn, one summary table, and bench/results/summary.json.

Runs on two threads, one benchmark at a time (they would disturb each other). The slow part
is time_to_bleu (15 minutes of training in bf16 and again in fp32); its runs are cached in
bench/work/ and reused, so a second `make bench` takes minutes.
    .venv/bin/python bench/run_all.py [--data ../shared/data/multi30k] [--minutes 15]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import decode_speed
import decode_vs_ctranslate2
import serve_load
import time_to_bleu
import train_speed
from common import DEFAULT_DATA, ROOT

from nmt_cli.report import Reporter

# (key, target, what): the figures the project holds itself to on this benchmark.
TARGETS = [
    ("peak_gflops_fp32", None, "matmul peak, fp32"),
    ("peak_gflops_bf16", None, "matmul peak, bf16"),
    ("train_tok_s_fp32", ">= 2,500", "training target tok/s, fp32"),
    ("train_tok_s_bf16", ">= 6,800", "training target tok/s, bf16"),
    ("train_mfu_bf16", None, "model FLOPs utilisation, bf16"),
    ("train_peak_rss_mb", "<= 1,710", "peak RSS while training, MB"),
    ("bleu_15min_bf16", ">= 30", "sacreBLEU after 15 min, bf16"),
    ("bleu_15min_fp32", None, "sacreBLEU after 15 min, fp32"),
    ("equal_updates", None, "updates of the equal-update comparison"),
    ("bleu_equal_updates_fp32", None, "sacreBLEU at equal updates, fp32"),
    ("bleu_equal_updates_bf16", "within 0.3 of fp32", "sacreBLEU at equal updates, bf16"),
    ("decode_beam4_sent_s", ">= 160", "beam 4 sentences/s (score / |Y|)"),
    ("decode_greedy_sent_s", ">= 420", "greedy sentences/s"),
    ("decode_bleu_beam4", None, "sacreBLEU of the decode model, beam 4"),
    ("decode_len_ratio", "0.95 - 1.05", "output/reference length, beam 4"),
    ("beam4_whole_nmt_vs_ct2_int8", ">= 1.2", "beam 4 tok/s, nmt best / CTranslate2 int8"),
    ("greedy_whole_nmt_vs_ct2_int8", ">= 1.0", "greedy target tok/s, nmt best / CTranslate2 int8"),
    ("startup_load_s", "<= 1.0", "nmt translate start-up and model load, s"),
    ("startup_load_minus_import_torch_s", "<= 0.2", "the same, less a process that imports torch, s"),
    # serve_load.py's keys name the client; the thread client's (http.client) are the targets'.
    ("serve_threads_c16_sent_s", None, "nmt serve, 16 clients, sentences/s"),
    ("serve_threads_c16_vs_offline", ">= 0.70", "nmt serve, 16 clients / offline sentences/s"),
    ("serve_threads_lone_p50_vs_direct", "<= 1.5", "nmt serve, lone request p50 / direct call"),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--minutes", type=float, default=15.0)
    args = parser.parse_args()
    data = ["--data", str(args.data)]
    summary: dict = {}
    summary.update(train_speed.main(data))
    ttb = time_to_bleu.main([*data, "--minutes", f"{args.minutes:g}"])
    summary.update(ttb)
    for precision in ("bf16", "fp32"):  # the key names, whatever the minutes
        summary[f"bleu_15min_{precision}"] = ttb[f"bleu_{args.minutes:g}min_{precision}"]
    summary.update(decode_speed.main([*data, "--minutes", f"{args.minutes:g}"]))
    summary.update(decode_vs_ctranslate2.main([*data, "--minutes", f"{args.minutes:g}"]))
    summary.update(serve_load.main([*data, "--minutes", f"{args.minutes:g}"]))
    results = ROOT / "bench" / "results"
    results.mkdir(parents=True, exist_ok=True)
    (results / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    rows = [[what, summary.get(key, "-"), target or ""] for key, target, what in TARGETS]
    Reporter().table("nmt benchmarks (Multi30k En-De, 2 threads)", ["figure", "measured", "target"], rows)
    print(f"all figures: {results / 'summary.json'}")


if __name__ == "__main__":
    main()
