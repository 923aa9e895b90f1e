"""The WMT14 recipes' path at full size on this machine: time, memory and disk by corpus size.

For each size of WMT-shaped corpus (`bench/wmt_shaped.py`: 0.45M, 4.5M and 36M pairs, made once):
  prepare   `nmt prepare` with prepare.sh's options (37k joint BPE, --workers 2): wall time, peak
            RSS of the process tree, disk of the output, pairs kept;
  train     `nmt train` with recipes/wmt14_en_de/base.toml on CPU, one update of 1,000 tokens and
            a checkpoint, whole process (the start-up is what grows with the corpus), then the same
            resumed for one more update: time and peak RSS of each;
  plan      an epoch's batch plan (the base recipe's 3,125-token batches) built and walked through
            without reading the data: batches, seconds, peak RSS.
Then once, with the big recipe (on the smallest corpus: checkpoints do not depend on its size):
  checkpoints  one update and a save: the numbered checkpoint (weights only, in the training
            precision) and checkpoint_last.pt (fp32 weights and Adam's moments); the disk of a run
            keeping 20 numbered ones, against 20 that each held the training state;
  average   `nmt average --last 20` over 20 of them: time and peak RSS.
Prints one JSON row per size and one for the big checkpoints; bench/work/scale/ holds the rest.

    .venv/bin/python bench/scale.py [--sizes 450000,4500000,36000000] [--reuse]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from bench_prepare import run_prepare
from wmt_shaped import corpus

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "bench" / "work" / "scale"
GB = 1e9
ONE_UPDATE = [
    "train.max_tokens=1000",
    "train.update_freq=1",
    "train.update_tokens=0",
    "train.fit_batch=false",
    "train.valid_every_updates=0",
    "train.valid_bleu=false",
    "train.save_every_minutes=0",
    "train.save_every_updates=1",
    "train.log_every_updates=1",
]


def measured(*args: object) -> tuple[float, float]:
    """Run `python -m nmt_cli -q ARGS`: (seconds, peak RSS of its process tree in GB)."""
    seconds, peak = run_prepare([sys.executable, "-m", "nmt_cli", "-q", *(str(a) for a in args)])
    return round(seconds, 1), round(peak / GB, 2)


def disk(path: Path) -> float:
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    return round(sum(p.stat().st_size for p in files) / GB, 2)


def prepare(raw: Path, data: Path, reuse: bool) -> dict:
    if reuse and (data / "meta.json").exists():
        return {}
    shutil.rmtree(data, ignore_errors=True)
    seconds, peak = measured(
        *("prepare", "--train", raw / "train", "--valid", raw / "valid", "--test", raw / "test"),
        *("--src", "en", "--tgt", "de", "--out", data, "--vocab-size", 37000, "--workers", 2),
    )
    kept = json.loads((data / "meta.json").read_text())["splits"]["train"]["pairs"]
    return {"prepare_s": seconds, "prepare_peak_gb": peak, "data_gb": disk(data), "kept_pairs": kept}


def train(data: Path, run: Path, recipe: str, *extra: str) -> dict:
    shutil.rmtree(run, ignore_errors=True)
    sets = [part for item in (*ONE_UPDATE, *extra) for part in ("--set", item)]
    command = ["train", "--data", data, "--recipe", ROOT / "recipes" / "wmt14_en_de" / recipe, "--out", run]
    first = measured(*command, "--device", "cpu", *sets, "--set", "train.max_updates=1")
    resumed = measured(*command, "--device", "cpu", *sets, "--set", "train.max_updates=2")
    return {
        "train_1_update_s": first[0],
        "train_peak_gb": first[1],
        "resume_1_update_s": resumed[0],
        "resume_peak_gb": resumed[1],
    }


PLAN = """
import json, resource, sys, time
from pathlib import Path
from nmt_cli.data.batching import make_batches
from nmt_cli.data.corpus import load_split
start = time.monotonic()
split = load_split(Path(sys.argv[1]), "train")
src, tgt = split.src.lengths(), split.tgt.lengths()
batches = make_batches(src, tgt, 3125, seed=1, epoch=1)
pairs = sum(len(b) for b in batches)
seconds = round(time.monotonic() - start, 1)
peak = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6, 2)
row = {"plan_batches": len(batches), "plan_pairs": pairs, "plan_s": seconds, "plan_peak_gb": peak}
print(json.dumps(row))
"""


def plan(data: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", PLAN, str(data)], capture_output=True, text=True, env=env, check=True
    )
    return json.loads(done.stdout)


def big_checkpoints(data: Path) -> dict:
    run = WORK / "big"
    row = {"bench": "big_checkpoints", **train(data, run, "big.toml")}
    checkpoints = run / "checkpoints"
    numbered, last = checkpoints / "checkpoint_2.pt", checkpoints / "checkpoint_last.pt"
    for update in range(3, 22):  # 20 numbered checkpoints of one run, as `nmt average --last 20` reads them
        shutil.copyfile(numbered, checkpoints / f"checkpoint_{update}.pt")
    kept = sorted(checkpoints.glob("checkpoint_[0-9]*.pt"))[-20:]
    row.update(
        numbered_gb=disk(numbered),
        last_gb=disk(last),
        run_with_20_gb=round(20 * disk(numbered) + disk(last), 2),
        run_with_20_full_state_gb=round(20 * disk(last), 2),  # numbered checkpoints that held it
        kept=len(kept),
    )
    seconds, peak = measured("average", "--run", run, "--last", 20, "-o", WORK / "average.pt")
    row.update(average_s=seconds, average_peak_gb=peak, average_gb=disk(WORK / "average.pt"))
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="450000,4500000,36000000", help="pairs, comma-separated")
    parser.add_argument("--reuse", action="store_true", help="reuse a prepared corpus (no prepare row)")
    parser.add_argument("--no-big", action="store_true", help="skip the big model's checkpoints")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    smallest = None
    for pairs in sizes:
        raw = corpus(pairs)
        data = WORK / f"data_{pairs}"
        row = {"bench": "scale", "pairs": pairs, **prepare(raw, data, args.reuse)}
        row.update(train(data, WORK / f"run_{pairs}", "base.toml"))
        row.update(plan(data))
        print(json.dumps(row), flush=True)
        smallest = smallest or data
    if not args.no_big and smallest is not None:
        print(json.dumps(big_checkpoints(smallest)), flush=True)


if __name__ == "__main__":
    main()
