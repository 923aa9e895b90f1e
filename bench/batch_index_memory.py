"""Training start-up memory per sentence pair: what the batch index costs at WMT scale.

Makes two synthetic corpora (200,000 and 2,000,000 pairs of 20 words from a 2,000-word
vocabulary), prepares them with one sentencepiece model size, and runs 5 updates of a tiny model
on each. Every sentence has the same length, so every batch has the same shape and the two
`nmt train` processes differ in peak RSS only by what grows with the number of pairs (with
lengths drawn at random, the first batches' shapes moved the peak by more than the index).
Prints JSON: both peaks and the bytes per pair between them.
    .venv/bin/python bench/batch_index_memory.py [--small 200000] [--large 2000000]
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

from common import WORK, emit, nmt

TINY = [
    "model.encoder_layers=1",
    "model.decoder_layers=1",
    "model.d_model=64",
    "model.d_ff=128",
    "model.heads=2",
    "model.d_k=32",
    "model.d_v=32",
    "train.max_updates=5",
    "train.max_minutes=0",
    "train.save_every_updates=0",
    "train.save_every_minutes=0",
    "train.valid_every_updates=0",
    "train.valid_bleu=false",
]


def corpus(pairs: int, out: Path) -> Path:
    """PREFIX.src / PREFIX.tgt of `pairs` random sentences (the same seed: the small corpus is a
    prefix of the large one)."""
    out.mkdir(parents=True, exist_ok=True)
    prefix = out / "train"
    if Path(f"{prefix}.tgt").exists():
        return prefix
    rng = random.Random(0)
    words = [f"w{i}" for i in range(2000)]
    with open(f"{prefix}.src", "w") as src, open(f"{prefix}.tgt", "w") as tgt:
        for _ in range(pairs):
            line = " ".join(rng.choices(words, k=20))
            src.write(line + "\n")
            tgt.write(line + "\n")
    (out / "valid.src").write_text("w1 w2 w3\n")
    (out / "valid.tgt").write_text("w1 w2 w3\n")
    return prefix


def peak_rss(pairs: int) -> float:
    raw = corpus(pairs, WORK / f"pairs20_{pairs}")
    data = raw.parent / "prepared"
    nmt(
        "prepare",
        "--train",
        str(raw),
        "--valid",
        str(raw.parent / "valid"),
        "--src",
        "src",
        "--tgt",
        "tgt",
        "--out",
        str(data),
        "--vocab-size",
        "2000",
        "--spm-sample",
        "100000",
        "--workers",
        "2",
    )
    run = raw.parent / "run"
    if run.exists():
        import shutil

        shutil.rmtree(run)
    sets = [a for s in TINY for a in ("--set", s)]
    _, rss = nmt("train", "--data", str(data), "--out", str(run), "--device", "cpu", "--threads", "2", *sets)
    return rss


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=200_000)
    parser.add_argument("--large", type=int, default=2_000_000)
    args = parser.parse_args(argv)
    small, large = peak_rss(args.small), peak_rss(args.large)
    result = {
        "index_pairs": [args.small, args.large],
        "index_peak_rss_mb": [round(small), round(large)],
        "index_bytes_per_pair": round((large - small) * 2**20 / (args.large - args.small), 1),
    }
    emit(result)
    return result


if __name__ == "__main__":
    main()
