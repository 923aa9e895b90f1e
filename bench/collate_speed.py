"""What batching costs the host and the GPU: how long `collate` takes to pad a training batch, and
what share of the padded tokens are real at each padding multiple.

Lengths are synthetic: WMT-like (200,000 pairs, log-normal source lengths of mean ~27 pieces as
newstest's, targets ~1.1 times as long with noise, capped at 250) and Multi30k-like (29,000
pairs, source mean ~13 pieces, target ~14); with --data, also Multi30k's own train.en/train.de,
at whitespace tokens x 1.3 pieces. collate is timed on the first --calls batches `make_batches`
cuts at each budget (random ids, uint16 as a corpus stores them), once each after a warm-up;
the median is printed. Prints JSON.
    .venv/bin/python bench/collate_speed.py [--data ../shared/data/multi30k] [--calls 50]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np
from common import DEFAULT_DATA, emit

from nmt_cli.data.batching import collate, make_batches, real_share

BUDGETS = (25_000, 3_125)  # the paper's tokens per update, and per batch on each of its 8 GPUs


def wmt_like(pairs: int = 200_000) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    src = np.clip(np.rint(rng.lognormal(3.15, 0.55, pairs)), 1, 250)
    tgt = np.clip(np.rint(src * 1.1 * rng.lognormal(0.0, 0.15, pairs)), 1, 250)
    return src.astype(np.uint16), tgt.astype(np.uint16)


def multi30k_like(pairs: int = 29_000) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    src = np.clip(np.rint(rng.gamma(6.0, 13 / 6, pairs)), 1, 80)
    tgt = np.clip(np.rint(src * 14 / 13 * rng.lognormal(0.0, 0.15, pairs)), 1, 80)
    return src.astype(np.uint16), tgt.astype(np.uint16)


def multi30k(data: Path) -> tuple[np.ndarray, np.ndarray]:
    """Multi30k's training lengths in pieces, estimated as whitespace tokens x 1.3."""

    def pieces(path: Path) -> np.ndarray:
        lines = path.read_text(encoding="utf-8").splitlines()
        return np.array([max(1, round(len(line.split()) * 1.3)) for line in lines], dtype=np.uint16)

    return pieces(data / "train.en"), pieces(data / "train.de")


def collate_ms(src_lengths: np.ndarray, tgt_lengths: np.ndarray, max_tokens: int, calls: int) -> float:
    """Median milliseconds of one collate call over the first `calls` batches at `max_tokens`."""
    rng = np.random.default_rng(1)
    times = []
    for idx in make_batches(src_lengths, tgt_lengths, max_tokens, seed=1, epoch=1)[: calls + 1]:
        src = [rng.integers(4, 32_000, src_lengths[i], dtype=np.uint16) for i in idx]
        tgt = [rng.integers(4, 32_000, tgt_lengths[i], dtype=np.uint16) for i in idx]
        start = time.perf_counter()
        collate(src, tgt)
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times[1:])  # the first call warms up


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--calls", type=int, default=50)
    args = parser.parse_args(argv)
    corpora = {"wmt_like": wmt_like(), "multi30k_like": multi30k_like()}
    if (args.data / "train.en").exists():
        corpora["multi30k"] = multi30k(args.data)
    result: dict = {}
    for max_tokens in BUDGETS:
        result[f"collate_ms_wmt_like_{max_tokens}"] = round(
            collate_ms(*corpora["wmt_like"], max_tokens, args.calls), 3
        )
    for name, (src, tgt) in corpora.items():
        for max_tokens in BUDGETS:
            for multiple in (1, 8):
                batches = make_batches(src, tgt, max_tokens, seed=1, epoch=1, multiple=multiple)
                share = real_share(batches, src, tgt, multiple)
                result[f"real_share_{name}_{max_tokens}_x{multiple}"] = round(share, 4)
    emit(result)
    return result


if __name__ == "__main__":
    main()
