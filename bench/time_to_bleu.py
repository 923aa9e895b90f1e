"""Time to quality: train the benchmark model for 15 minutes of wall time, average the last
checkpoints, translate test_2016_flickr with beam 4 and report sacreBLEU, in bf16 and fp32.

Then bf16 against fp32 at equal updates: bf16 trains again, from the same seed over the same
batches, for exactly as many updates as the fp32 run reached, and is scored the same way.

The run follows recipes/multi30k/small.toml as it is (validation loss only). A finished run
is cached in bench/work/ttb_<precision>_<budget>/ and reused while the recipe file is unchanged;
--fresh retrains.
    .venv/bin/python bench/time_to_bleu.py [--minutes 15] [--precision bf16 fp32 recipe]
        [--seeds 1 2] [--fresh]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
from pathlib import Path

from common import DEFAULT_DATA, RECIPE, THREADS, WORK, bleu, emit, nmt, prepared

from nmt_cli.checkpoint import numbered


def trained_model(
    data: Path,
    precision: str,
    minutes: float,
    fresh: bool = False,
    updates: int = 0,
    vocab: int = 8000,
    seed: int = 1,
) -> tuple[Path, dict]:
    """Train (or reuse) a run of `minutes` (or of exactly `updates`, when given) on the corpus
    prepared with a joint vocabulary of `vocab` pieces; return its averaged checkpoint and facts.
    `precision` "recipe" passes none: the recipe's bf16, or fp32 where `nmt train` finds this CPU's
    bf16 no faster (the command as a user runs it)."""
    suffix = "" if vocab == 8000 else f"_v{vocab}"
    return trained_run(
        prepared(data, vocab=vocab), RECIPE, precision, minutes, fresh, updates, seed, suffix=suffix
    )


def trained_run(
    data_dir: Path,
    recipe: Path,
    precision: str,
    minutes: float,
    fresh: bool = False,
    updates: int = 0,
    seed: int = 1,
    name: str = "ttb",
    suffix: str = "",
) -> tuple[Path, dict]:
    """`trained_model` on any prepared corpus and recipe, cached in
    bench/work/NAME_PRECISION_BUDGET[SUFFIX][_seedN]/ while the recipe's text is the one it was
    trained with (a tuned recipe must not be reported with its predecessor's model)."""
    budget_name = f"{updates}upd" if updates else f"{minutes:g}min"
    run = WORK / f"{name}_{precision}_{budget_name}{suffix}{'' if seed == 1 else f'_seed{seed}'}"
    done = run / "bench.json"
    recipe_sha256 = hashlib.sha256(recipe.read_bytes()).hexdigest()
    if done.exists() and not fresh:
        facts = json.loads(done.read_text())
        if facts.get("recipe_sha256") == recipe_sha256:
            return run / "average.pt", facts
    shutil.rmtree(run, ignore_errors=True)
    args = ["--data", str(data_dir), "--recipe", str(recipe), "--out", str(run), "--device", "cpu"]
    args += ["--threads", str(THREADS)] + ([] if precision == "recipe" else ["--precision", precision])
    budget = [f"train.max_minutes={0 if updates else minutes}", f"train.max_updates={updates}"]
    seconds, rss = nmt("train", *args, "--set", budget[0], "--set", budget[1], "--set", f"train.seed={seed}")
    nmt("average", "--run", str(run), "-o", str(run / "average.pt"))
    reached = max(update for update, _ in numbered(run / "checkpoints"))  # the last, even if not logged
    config = (run / "config.toml").read_text(encoding="utf-8")
    trained_in = "bf16" if 'precision = "bf16"' in config else "fp32"
    facts = {
        "updates": reached,
        "train_seconds": round(seconds),
        "peak_rss_mb": round(rss),
        "precision": trained_in,
        "recipe_sha256": recipe_sha256,
    }
    done.write_text(json.dumps(facts))
    return run / "average.pt", facts


def score_on_test(model: Path, data: Path) -> tuple[float, float]:
    """sacreBLEU and length ratio of `model` on test_2016_flickr, beam 4."""
    hyp = model.with_name("test.hyp")
    source, ref = data / "test_2016_flickr.en", data / "test_2016_flickr.de"
    nmt(
        "translate",
        "-m",
        str(model),
        "-i",
        str(source),
        "-o",
        str(hyp),
        "--beam",
        "4",
        "--threads",
        str(THREADS),
    )
    return bleu(hyp, ref)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--minutes", type=float, default=15.0)
    parser.add_argument(
        "--precision", nargs="+", default=["bf16", "fp32"], help="bf16, fp32, recipe (no --precision)"
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[1], help="train.seed of each run")
    parser.add_argument("--fresh", action="store_true", help="retrain even if a cached run exists")
    args = parser.parse_args(argv)
    result = {}
    for precision in args.precision:
        for seed in args.seeds:
            model, facts = trained_model(args.data, precision, args.minutes, args.fresh, seed=seed)
            tag = f"{args.minutes:g}min_{precision}" + ("" if seed == 1 else f"_seed{seed}")
            score, ratio = score_on_test(model, args.data)
            result[f"bleu_{tag}"] = round(score, 2)
            result[f"updates_{tag}"] = facts["updates"]
            result[f"len_ratio_{tag}"] = round(ratio, 3)
            if precision == "recipe":
                result[f"trained_in_{tag}"] = facts["precision"]
    if {"bf16", "fp32"} <= set(args.precision):
        updates = result[f"updates_{args.minutes:g}min_fp32"]
        model, _ = trained_model(args.data, "bf16", args.minutes, args.fresh, updates=updates)
        score, _ = score_on_test(model, args.data)
        result["equal_updates"] = updates
        result["bleu_equal_updates_bf16"] = round(score, 2)
        result["bleu_equal_updates_fp32"] = result[f"bleu_{args.minutes:g}min_fp32"]
    emit(result)
    return result


if __name__ == "__main__":
    main()
