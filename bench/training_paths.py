"""The training paths against autocast: train.half_weights, train.packed (and, with --compile,
train.compile) on the benchmark model (see common.py) for the same updates and seed, each ending
with a validation. Prints JSON: per path the valid loss, its difference from autocast's and the
target tokens/s; the spread of autocast's valid loss over --seeds is the noise the differences
compare with. On CPU packed attention goes through the padded layout, so its speed here is not
a GPU's.
    .venv/bin/python bench/training_paths.py [--data ../shared/data/multi30k] [--updates 2000]
        [--seeds 1 2] [--compile]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
from pathlib import Path

from common import DEFAULT_DATA, RECIPE, THREADS, WORK, emit, nmt, prepared, train_records

PATHS = {
    "autocast": [],
    "half_weights": ["train.half_weights=true"],
    "packed": ["train.packed=true"],
    "packed_half_weights": ["train.packed=true", "train.half_weights=true"],
}
LOG_EVERY = 50


def train(data_dir: Path, name: str, settings: list[str], updates: int, seed: int) -> dict:
    run = WORK / f"training_paths_{name}_{seed}"
    shutil.rmtree(run, ignore_errors=True)
    fixed = [
        f"train.max_updates={updates}", "train.max_minutes=0", f"train.valid_every_updates={updates}",
        "train.valid_bleu=false", "train.save_every_updates=0", "train.save_every_minutes=0",
        f"train.log_every_updates={LOG_EVERY}", f"train.seed={seed}",
    ]  # fmt: skip
    args = ["train", "--data", str(data_dir), "--recipe", str(RECIPE), "--out", str(run), "--device", "cpu"]
    args += ["--threads", str(THREADS), "--precision", "bf16"]
    for setting in fixed + settings:
        args += ["--set", setting]
    nmt(*args)
    trained = train_records(run)
    seconds = sum(LOG_EVERY / r["updates_per_s"] for r in trained[1:])  # the first interval warms up
    tokens = sum(r["tokens_per_s"] * LOG_EVERY / r["updates_per_s"] for r in trained[1:])
    valid = train_records(run, "valid")[-1]["loss"]
    shutil.rmtree(run, ignore_errors=True)
    return {"valid_loss": valid, "tok_s": tokens / seconds if seconds else None}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--updates", type=int, default=2000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2], help="autocast's seeds (the noise)")
    parser.add_argument("--compile", action="store_true", help="also half_weights through torch.compile")
    args = parser.parse_args(argv)
    data_dir = prepared(args.data)
    paths = dict(PATHS)
    if args.compile:
        paths["compiled_half_weights"] = ["train.half_weights=true", "train.compile=true"]
    seed = args.seeds[0]
    baseline = [train(data_dir, "autocast", [], args.updates, s) for s in args.seeds]
    result: dict = {"updates": args.updates, "seed": seed, "autocast_seeds": args.seeds}
    result["autocast"] = {
        "valid_loss": round(baseline[0]["valid_loss"], 4),
        "valid_loss_by_seed": [round(b["valid_loss"], 4) for b in baseline],
        "noise": round(max(b["valid_loss"] for b in baseline) - min(b["valid_loss"] for b in baseline), 4),
        "tok_s": round(statistics.median(b["tok_s"] for b in baseline)),
    }
    for name, settings in paths.items():
        if name == "autocast":
            continue
        run = train(data_dir, name, settings, args.updates, seed)
        result[name] = {
            "valid_loss": round(run["valid_loss"], 4),
            "minus_autocast": round(run["valid_loss"] - baseline[0]["valid_loss"], 4),
            "tok_s": round(run["tok_s"]),
        }
    emit(result)
    return result


if __name__ == "__main__":
    main()
