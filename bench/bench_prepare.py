"""Benchmark `nmt prepare` on a large corpus made by repeating Multi30k's train set.

Prints one JSON object: pairs, seconds, pairs/s and lines/s (both sides), and the peak
resident memory of the whole process tree (prepare and its worker processes, sampled
from /proc and summed, so shared pages count once per process: an upper bound) next to
the largest single process (getrusage RUSAGE_CHILDREN). The generated corpus and the
output live under bench/work/ (git-ignored). Imports only the standard library.

    .venv/bin/python bench/bench_prepare.py --pairs 1000000
    .venv/bin/python bench/bench_prepare.py --pairs 4000000 --workers 2
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "bench" / "work"


def make_corpus(data: Path, pairs: int) -> Path:
    """bench/work/corpus-N/{train,valid,test}.{en,de}; train repeats Multi30k's 29k pairs."""
    directory = WORK / f"corpus-{pairs}"
    if (directory / "done").exists():
        return directory
    directory.mkdir(parents=True, exist_ok=True)
    for lang in ("en", "de"):
        lines = (data / f"train.{lang}").read_bytes().splitlines(keepends=True)
        with (directory / f"train.{lang}").open("wb") as out:
            for start in range(0, pairs, len(lines)):
                out.writelines(lines[: min(len(lines), pairs - start)])
        shutil.copyfile(data / f"val.{lang}", directory / f"valid.{lang}")
        shutil.copyfile(data / f"test_2016_flickr.{lang}", directory / f"test.{lang}")
    (directory / "done").touch()
    return directory


def tree_rss(pid: int) -> int:
    """Resident bytes of `pid` and all its descendants, read from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry))
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        todo.extend(children.get(current, []))
        try:
            pages = int(Path(f"/proc/{current}/statm").read_text().split()[1])
        except OSError:
            continue
        total += pages * os.sysconf("SC_PAGE_SIZE")
    return total


def run_prepare(command: list[str]) -> tuple[float, int]:
    """Run `command` (nmt prepare here, any command for bench/scale.py), sampling its process
    tree's memory; returns (seconds, peak bytes)."""
    peak = [0]
    started = time.monotonic()
    process = subprocess.Popen(command, cwd=ROOT)
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.1):
            peak[0] = max(peak[0], tree_rss(process.pid))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    code = process.wait()
    seconds = time.monotonic() - started
    done.set()
    sampler.join()
    if code != 0:
        sys.exit(f"bench: `{' '.join(command)}` failed with exit code {code}")
    return seconds, peak[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--data",
        type=Path,
        default=ROOT / ".." / "shared" / "data" / "multi30k",
        help="Multi30k directory (train.en, train.de, val.*, test_2016_flickr.*)",
    )
    parser.add_argument("--pairs", type=int, default=1_000_000, help="training pairs to generate")
    parser.add_argument("--workers", type=int, default=2, help="nmt prepare --workers")
    parser.add_argument("--vocab-size", type=int, default=8000, help="nmt prepare --vocab-size")
    args = parser.parse_args()
    corpus = make_corpus(args.data.resolve(), args.pairs)
    out = WORK / f"prepared-{args.pairs}"
    shutil.rmtree(out, ignore_errors=True)  # measure a full run, not a reuse
    command = [
        sys.executable,
        "-m",
        "nmt_cli",
        "-q",
        "prepare",
        "--train",
        str(corpus / "train"),
        "--valid",
        str(corpus / "valid"),
        "--test",
        str(corpus / "test"),
        "--src",
        "en",
        "--tgt",
        "de",
        "--out",
        str(out),
        "--vocab-size",
        str(args.vocab_size),
        "--workers",
        str(args.workers),
    ]
    seconds, peak = run_prepare(command)
    single = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024  # KiB on Linux
    meta = json.loads((out / "meta.json").read_text())
    print(
        json.dumps(
            {
                "bench": "prepare",
                "pairs": args.pairs,
                "workers": args.workers,
                "vocab_size": args.vocab_size,
                "seconds": round(seconds, 1),
                "pairs_per_s": round(args.pairs / seconds),
                "lines_per_s": round(2 * args.pairs / seconds),
                "peak_rss_mb_tree": round(peak / 2**20),
                "peak_rss_mb_largest_process": round(single / 2**20),
                "train_pairs_kept": meta["splits"]["train"]["pairs"],
                "dropped": meta["dropped"],
            }
        )
    )


if __name__ == "__main__":
    main()
