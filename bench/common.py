"""Shared pieces of the benchmarks: the Multi30k data, the benchmark model, running `nmt`.

The benchmark model is `recipes/multi30k/small.toml` on Multi30k En-De with a joint
sentencepiece BPE of 8,000: 3+3 layers, d_model 256, d_ff 1024, 4 heads, tied embeddings,
dropout 0.1, label smoothing 0.1. Training throughput is measured in the configuration fairseq
was measured with, batches of about 4,096 tokens (`FAIRSEQ_BATCH_TOKENS`; the recipe itself
takes smaller batches, tuned for 15 minutes). Everything generated goes to bench/work/
(git-ignored).
"""

from __future__ import annotations

import compileall
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "bench" / "work"
RECIPE = ROOT / "recipes" / "multi30k" / "small.toml"
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "multi30k"
THREADS = 2
FAIRSEQ_BATCH_TOKENS = 4096  # train_speed.py's batches, as fairseq's comparison run had them


def byte_compile() -> None:
    """nmt's modules byte-compiled, as `pip install` leaves a package: a process timed from its
    start would otherwise compile them from source where PYTHONDONTWRITEBYTECODE is set (23 ms
    of every start on the benchmark machine)."""
    compileall.compile_dir(ROOT / "nmt_cli", quiet=1)


def nmt(*args: str, quiet: bool = True) -> tuple[float, float]:
    """Run `python -m nmt_cli ARGS`; returns (seconds, peak RSS in MB) of that process alone."""
    command = [sys.executable, "-m", "nmt_cli", *(["-q"] if quiet else []), *args]
    start = time.monotonic()
    process = subprocess.Popen(command, cwd=ROOT)
    _, status, usage = os.wait4(process.pid, 0)
    seconds = time.monotonic() - start
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise SystemExit(f"bench: `{' '.join(command)}` failed with exit code {code}")
    return seconds, usage.ru_maxrss / 1024


def prepared(data: Path, tgt: str = "de", vocab: int = 8000) -> Path:
    """The Multi30k corpus prepared with a joint BPE of `vocab` pieces, 8,000 unless asked
    (prepare reuses finished work)."""
    out = WORK / (f"m30k_en_{tgt}" if vocab == 8000 else f"m30k_en_{tgt}_{vocab}")
    nmt(
        "prepare",
        "--train",
        str(data / "train"),
        "--valid",
        str(data / "val"),
        "--test",
        str(data / "test_2016_flickr"),
        "--src",
        "en",
        "--tgt",
        tgt,
        "--out",
        str(out),
        "--vocab-size",
        str(vocab),
        "--workers",
        "2",
    )
    return out


def train_records(run_dir: Path, kind: str = "train") -> list[dict]:
    lines = (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    return [r for r in map(json.loads, lines) if r.get("type") == kind]


def bleu(hyp: Path, ref: Path) -> tuple[float, float]:
    """sacreBLEU of a hypothesis file and its output/reference length ratio."""
    import sacrebleu

    hyps = hyp.read_text(encoding="utf-8").splitlines()
    refs = ref.read_text(encoding="utf-8").splitlines()
    score = sacrebleu.corpus_bleu(hyps, [refs])
    return score.score, score.sys_len / score.ref_len


def repeated_test(data: Path, lines: int, work: Path) -> tuple[Path, list[str]]:
    """test_2016_flickr.en repeated to `lines` lines (written to `work`), and its references: the
    decoding benchmarks' input, whose BLEU is the test set's."""
    src = (data / "test_2016_flickr.en").read_text(encoding="utf-8").splitlines()
    ref = (data / "test_2016_flickr.de").read_text(encoding="utf-8").splitlines()
    copies = -(-lines // len(src))
    source = work / f"input_{lines}.en"
    source.write_text("".join(line + "\n" for line in (src * copies)[:lines]), encoding="utf-8")
    return source, (ref * copies)[:lines]


def emit(result: dict) -> None:
    print(json.dumps(result), flush=True)
