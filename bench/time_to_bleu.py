"""Time to quality: train the benchmark model for 15 minutes of wall time, average the last
checkpoints, translate test_2016_flickr with beam 4 and report sacreBLEU, in bf16 and fp32.

The run follows recipes/multi30k/small.toml as it is (validation loss only). A finished run
is cached in bench/work/ttb_<precision>/ and reused; --fresh retrains.
    .venv/bin/python bench/time_to_bleu.py [--minutes 15] [--precision bf16 fp32]
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

from common import DEFAULT_DATA, RECIPE, THREADS, WORK, bleu, emit, nmt, prepared, train_records


def trained_model(data: Path, precision: str, minutes: float, fresh: bool = False) -> tuple[Path, dict]:
    """Train (or reuse) a run of `minutes` and return its averaged checkpoint and facts."""
    run = WORK / f"ttb_{precision}_{minutes:g}min"
    done = run / "bench.json"
    if done.exists() and not fresh:
        return run / "average.pt", json.loads(done.read_text())
    shutil.rmtree(run, ignore_errors=True)
    data_dir = prepared(data)
    args = ["--data", str(data_dir), "--recipe", str(RECIPE), "--out", str(run), "--device", "cpu"]
    args += ["--threads", str(THREADS), "--precision", precision]
    args += ["--set", f"train.max_minutes={minutes}", "--set", "train.max_updates=0"]
    seconds, rss = nmt("train", *args)
    nmt("average", "--run", str(run), "-o", str(run / "average.pt"))
    updates = max(r["update"] for r in train_records(run))
    facts = {"updates": updates, "train_seconds": round(seconds), "peak_rss_mb": round(rss)}
    done.write_text(json.dumps(facts))
    return run / "average.pt", facts


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--minutes", type=float, default=15.0)
    parser.add_argument("--precision", nargs="+", default=["bf16", "fp32"])
    parser.add_argument("--fresh", action="store_true", help="retrain even if a cached run exists")
    args = parser.parse_args(argv)
    result = {}
    for precision in args.precision:
        model, facts = trained_model(args.data, precision, args.minutes, args.fresh)
        hyp = model.with_name("test.hyp")
        nmt(
            "translate",
            "-m",
            str(model),
            "-i",
            str(args.data / "test_2016_flickr.en"),
            "-o",
            str(hyp),
            "--beam",
            "4",
            "--threads",
            str(THREADS),
        )
        ref = args.data / "test_2016_flickr.de"
        tag = f"{args.minutes:g}min_{precision}"
        score, ratio = bleu(hyp, ref)
        result[f"bleu_{tag}"] = round(score, 2)
        result[f"updates_{tag}"] = facts["updates"]
        result[f"len_ratio_{tag}"] = round(ratio, 3)
    emit(result)
    return result


if __name__ == "__main__":
    main()
