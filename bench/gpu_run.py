"""`make gpu-run`: what a lent GPU is for, measured in one run of at most 8 minutes on one H100 or
H200, each figure beside its target: one JSON (stdout and bench/results/gpu_run.json) and one
Markdown table (bench/results/gpu_run.md), both rewritten after every step.

Steps, in this order, each started only while its share of the time is left:
1. corpora: Multi30k prepared by `nmt prepare` (8k joint BPE), and a WMT-shaped corpus of its
   lines joined and cut to WMT14's log-normal lengths, in the same pieces.
2. throughput (gpu_check's step, decoding left out): bf16 training of the paper's base and big
   models and of the recipe's model at this corpus's vocabulary: MFU on the real tokens beside
   the padded MFU, real / padded tokens, GPU time by kernel class, kernels per update.
3. recipe: `nmt train --recipe recipes/wmt14_en_de/base.toml` as written on the WMT-shaped
   corpus, only its stop condition, logging and validation overridden: the median tokens/s of
   its log records over throughput's for the same model.
4. padding: real / padded tokens of the batches `nmt train` makes with that run's batch size
   (as train.fit_batch found it) from Multi30k's and from the WMT-shaped lengths.
5. side_by_side (bench/side_by_side.py, where fairseq is importable): fairseq-train against
   `nmt train`, then beam-5 decoding of fairseq's model by both.
6. paths (bench/gpu_paths.py), in the time left: packed batches, the bf16 copy and torch.compile
   against the padded autocast update, equal updates on this GPU and tokens/s side by side; then
   batch_fit: the batch train.fit_batch finds for the WMT14 recipes on this GPU, base and big.
The CPU's figures (training tokens/s, the Multi30k recipe's BLEU) are measured on the CPU, not here.

Without CUDA, or with --dry-run, every step runs on CPU with a tiny model (the big one left out)
and tiny corpora, in under 2 minutes: a check of the script (tests/unit/test_gpu_run.py), not a measurement.
Run: `make gpu-run`, `PYTHONPATH=. python3 bench/gpu_run.py [--data MULTI30K]`, or on a lent GPU
`bash bench/gpu_run.sh` (fairseq from .gpu/whl first).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from gpu_check import clean, run, throughput  # bench/, beside this file
from gpu_paths import batch_fit, path_throughput
from side_by_side import NMT_TINY, median_after_two, raw_corpus, side_by_side
from side_by_side import run as command

from nmt_cli.config import ModelConfig
from nmt_cli.data.batching import make_batches, real_share
from nmt_cli.data.corpus import load_meta, load_split
from nmt_cli.recipe import load_recipe
from nmt_cli.training.loop import shape_multiple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "gpu"))  # the GPU tests' helpers and checks
from gpu_checks import path_equivalence  # noqa: E402
from gpu_helpers import BASE, BIG, CUDA, DEVICE, TINY  # noqa: E402

RESULTS = ROOT / "bench" / "results"
RECIPE = ROOT / "recipes" / "wmt14_en_de" / "base.toml"
Figures = dict[str, Any]
BUDGET_S = 480.0
NMT = [sys.executable, "-m", "nmt_cli", "-q"]
# On a GPU: the seconds a step needs beyond those it is given to train for (starting processes,
# preparing data, saving, decoding); estimated from the H200 figures in docs/benchmarks.md
# (fairseq-generate a 26 s process, `nmt translate` 6 s, each training process's start-up).
RECIPE_OVERHEAD_S, SIDE_OVERHEAD_S = 45.0, 130.0
# Dry run: a tiny model, small batches, a few updates.
DRY_RECIPE = [*NMT_TINY, "train.max_tokens=600", "train.update_tokens=1200", "train.max_updates=6",
              "train.log_every_updates=2"]  # fmt: skip


@dataclass
class Run:
    data: Path | None
    """Raw Multi30k: train, val and test_2016_flickr .en/.de."""
    work: Path
    deadline: float

    def left(self) -> float:
        return self.deadline - time.monotonic()


# --- corpora ------------------------------------------------------------------------------------


def wmt_shaped(src: list[str], tgt: list[str], pairs: int, seed: int = 0) -> tuple[list[str], list[str]]:
    """`pairs` lines of WMT14's lengths from parallel lines of any: consecutive pairs joined until
    the source has a log-normal number of words (median 19: ~23 pieces, newstest's, at Multi30k's
    ~1.25 pieces a word), then both sides cut to it in proportion."""
    rng = np.random.default_rng(seed)
    wanted = np.clip(rng.lognormal(2.93, 0.55, pairs), 1, 150).astype(int)
    order = rng.permutation(len(src))
    out_src, out_tgt, at = [], [], 0
    for n in wanted:
        words_s: list[str] = []
        words_t: list[str] = []
        while len(words_s) < n:
            i = order[at % len(order)]
            words_s += src[i].split()
            words_t += tgt[i].split()
            at += 1
        keep = max(1, round(n * len(words_t) / len(words_s)))
        out_src.append(" ".join(words_s[:n]))
        out_tgt.append(" ".join(words_t[:keep]))
    return out_src, out_tgt


def corpora(r: Run) -> Figures:
    """Multi30k prepared, and the WMT-shaped corpus in its pieces (no new vocabulary to learn)."""
    assert r.data is not None
    raw = raw_corpus(r.data, r.work)  # cut to 3,000 lines on CPU
    workers = str(min(8, os.cpu_count() or 1))
    command([*NMT, "prepare", "--train", str(raw / "train"), "--valid", str(raw / "valid"), "--src", "en",
             "--tgt", "de", "--out", str(r.work / "m30k"), "--vocab-size", "8000" if CUDA else "500",
             "--workers", workers], r.work / "prepare_m30k.log", 600)  # fmt: skip
    lines = [(raw / f"train.{lang}").read_text(encoding="utf-8").splitlines() for lang in ("en", "de")]
    wmt = r.work / "wmt_raw"
    wmt.mkdir(exist_ok=True)
    for lang, text in zip(
        ("en", "de"), wmt_shaped(lines[0], lines[1], 150_000 if CUDA else 2000), strict=True
    ):
        (wmt / f"train.{lang}").write_text("".join(line + "\n" for line in text), encoding="utf-8")
    command([*NMT, "prepare", "--train", str(wmt / "train"), "--valid", str(raw / "valid"), "--src", "en",
             "--tgt", "de", "--out", str(r.work / "wmt"), "--spm-from", str(r.work / "m30k"),
             "--workers", workers], r.work / "prepare_wmt.log", 600)  # fmt: skip
    sizes = {name: len(load_split(r.work / name, "train")) for name in ("m30k", "wmt")}
    return {"pairs": sizes, "vocab": load_meta(r.work / "wmt").vocab_size["tgt"]}


def recipe_model(r: Run) -> ModelConfig:
    """The model `nmt train --recipe base.toml` builds for the WMT-shaped corpus."""
    cfg = load_recipe(RECIPE, [] if CUDA else NMT_TINY).model
    vocab = load_meta(r.work / "wmt").vocab_size
    return replace(cfg, src_vocab_size=int(vocab["src"]), tgt_vocab_size=int(vocab["tgt"]))


# --- the steps on the GPU -----------------------------------------------------------------------


def recipe(r: Run, minutes: float) -> Figures:
    """`nmt train` with base.toml as written for `minutes`: the median tokens/s of its log records
    after the first two, and the batch it trained with (train.fit_batch's, in its config.toml)."""
    out = r.work / "recipe"
    sets = ["train.valid_every_updates=0"]
    sets += [f"train.max_minutes={minutes:.2f}", "train.log_every_updates=10"] if CUDA else DRY_RECIPE
    device = ["--device", "cuda"] if CUDA else ["--device", "cpu", "--threads", "2"]
    command([*NMT, "train", "--data", str(r.work / "wmt"), "--recipe", str(RECIPE), "--out", str(out),
             *device, *(x for item in sets for x in ("--set", item))], r.work / "recipe.log",
            minutes * 60 + 300)  # fmt: skip
    lines = (out / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    rates = [record["tokens_per_s"] for record in map(json.loads, lines) if "tokens_per_s" in record]
    if not rates:
        raise RuntimeError(f"nmt train wrote no tokens_per_s records ({out / 'metrics.jsonl'})")
    train = tomllib.loads((out / "config.toml").read_text(encoding="utf-8"))["train"]
    return {"minutes": minutes if CUDA else None, "records": len(rates),
            "tokens_per_s": round(median_after_two(rates)), "precision": train["precision"],
            "max_tokens": train["max_tokens"], "update_freq": train["update_freq"],
            "overrides": sets}  # fmt: skip


def padding(r: Run, max_tokens: int) -> Figures:
    """Real / padded tokens of an epoch's batches as `nmt train` makes them with `max_tokens`."""
    multiple = shape_multiple(load_recipe(RECIPE).train, torch.device("cuda" if CUDA else "cpu"))
    shares: Figures = {"max_tokens": max_tokens, "multiple": multiple}
    for name in ("m30k", "wmt"):
        split = load_split(r.work / name, "train")
        src, tgt = split.src.lengths(), split.tgt.lengths()
        batches = make_batches(src, tgt, max_tokens, seed=1, epoch=0, multiple=multiple)
        shares[name] = round(real_share(batches, src, tgt, multiple), 3)
    return shares


def paths(cfg: ModelConfig) -> Figures:
    """The training paths' equivalence (tests/gpu/gpu_checks.py) and throughput
    (bench/gpu_paths.py), one model."""
    same, speed = path_equivalence(DEVICE), path_throughput({"base": cfg})
    return {"equivalence": same, "throughput": speed, "ok": same["ok"] and speed["ok"]}


def measure(r: Run, record: Callable[[str, Figures], None]) -> None:
    """Run the steps in order, each (on a GPU) only while the time it needs is left, and give
    each one's figures to `record` as it ends."""
    done: dict[str, Figures] = {}

    def step(name: str, needs_s: float, work: Callable[[], Figures]) -> None:
        if CUDA and r.left() < needs_s:
            left = f"{r.left():.0f} s of the budget left, ~{needs_s:.0f} s needed"
            done[name] = {"name": name, "ok": True, "skipped": left}
        else:
            done[name] = run(name, work)
        record(name, done[name])

    if r.data is None or not (r.data / "train.en").is_file():
        step("corpora", 0, lambda: {"skipped": f"no Multi30k at {r.data} (give --data DIR)"})
    else:
        step("corpora", 60, lambda: corpora(r))
    prepared = "pairs" in done["corpora"]
    models = {"base": BASE, "big": BIG} if CUDA else {"base": TINY}  # big's path is base's
    # The recipe's model at the corpus's vocabulary: the denominator of the recipe's ratio.
    step(
        "throughput",
        100,
        lambda: throughput({**models, **({"recipe": recipe_model(r)} if prepared else {})}, decode=False),
    )
    if prepared:
        side_needs = 2 * 15 + SIDE_OVERHEAD_S
        minutes = min(1.0, max(0.5, (r.left() - RECIPE_OVERHEAD_S - side_needs) / 60))
        step("recipe", minutes * 60 + RECIPE_OVERHEAD_S, lambda: recipe(r, minutes))
        max_tokens = done["recipe"].get("max_tokens") or load_recipe(RECIPE).train.max_tokens
        step("padding", 10, lambda: padding(r, max_tokens))
    seconds = min(30.0, max(15.0, (r.left() - SIDE_OVERHEAD_S) / 2)) if CUDA else 20.0
    work = r.work / "side_by_side"
    step("side_by_side", 2 * seconds + SIDE_OVERHEAD_S, lambda: side_by_side(r.data, work, seconds))
    # Last, in the time left: the training paths besides the recipe's (packed, the bf16 copy,
    # compiled), equal to the padded update on this GPU and their speed beside it; then what
    # train.fit_batch finds for base and big.
    step("paths", 150, lambda: paths(models["base"]))
    step("batch_fit", 30, batch_fit)


# --- the table ----------------------------------------------------------------------------------


def figure(steps: dict[str, Figures], *path: str) -> Any:
    """steps[path[0]][path[1]]..., or None where a step or a figure is missing."""
    value: Any = steps
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def why_not(step: Figures | None) -> str:
    if step is None:
        return "not run"
    if "skipped" in step:
        return f"skipped: {step['skipped']}"
    if "error" in step:
        return f"failed: {step['error']}"[:160]
    return "not measured" + ("" if CUDA else " in a dry run")


def table(steps: dict[str, Figures]) -> list[Figures]:
    """Each figure beside its target; "met" is None where there is no figure, and in a dry run."""
    tps, denominator = figure(steps, "recipe", "tokens_per_s"), figure(steps, "throughput", "recipe")
    ratio = tps / denominator["target_tokens_per_s"] if tps and denominator else None
    base, big = (figure(steps, "throughput", name) or {} for name in ("base", "big"))
    padded = "padded {}, real share {}".format
    rows = [  # (figure, step, value, at least (else at most), target, detail)
        ("`nmt train` base.toml as written, one GPU: tokens/s / throughput's", "recipe", ratio, True,
         0.95, f"{tps:,} / {denominator['target_tokens_per_s']:,}" if ratio else ""),
        ("nmt / fairseq-train target tokens/s, base, fp16, same data and GPU", "side_by_side",
         figure(steps, "side_by_side", "training", "nmt_over_fairseq"), True, 1.5, ""),
        ("MFU on real tokens, base", "throughput", base.get("mfu_real"), True, 0.30,
         padded(base.get("mfu"), base.get("real_share"))),
        ("MFU on real tokens, big", "throughput", big.get("mfu_real"), True, 0.45,
         padded(big.get("mfu"), big.get("real_share"))),
        ("kernels per base update", "throughput", base.get("kernels_per_update"), False, 400,
         base.get("kernels_counted", "")),
        ("real / padded tokens, Multi30k lengths", "padding", figure(steps, "padding", "m30k"), True, 0.9,
         ""),
        ("real / padded tokens, WMT-shaped lengths", "padding", figure(steps, "padding", "wmt"), True, 0.9,
         ""),
        *(
            (f"{path.replace('_', ' ')} / padded autocast training tokens/s, base", "paths",
             figure(steps, "paths", "throughput", "base", f"{path}_over_autocast"), True, 1.0,
             "equal updates" if figure(steps, "paths", "equivalence", "ok") else "")
            for path in ("packed", "half_weights", "packed_half_weights", "compiled_packed_half_weights")
        ),
        ("decoding sentences/s, beam 5, fairseq's model, same GPU", "side_by_side",
         figure(steps, "side_by_side", "decoding", "nmt", "sentences_per_s"), True, 1144, "2x round 1's 572"),
    ]  # fmt: skip
    out = []
    for name, step, value, at_least, target, detail in rows:
        if value is None:
            out.append(
                {"figure": name, "value": None, "shown": "-", "met": None, "detail": why_not(steps.get(step))}
            )
        else:
            met = (value >= target if at_least else value <= target) if CUDA else None
            shown = f"{value:.3g}" if isinstance(value, float) and value < 100 else f"{value:,.0f}"
            out.append({"figure": name, "value": value, "shown": shown, "met": met, "detail": detail})
        out[-1]["target"] = f"{'>=' if at_least else '<='} {target:,}"
    cpu = "measured on CPU: bench/train_speed.py, bench/time_to_bleu.py"
    out.append({"figure": "CPU training tokens/s, Multi30k recipe BLEU", "value": None, "shown": "-",
                "met": None, "detail": cpu, "target": "not lower"})  # fmt: skip
    return out


def markdown(rows: list[Figures], report: Figures) -> str:
    head = f"{report['gpu'] or 'CPU dry run'}, torch {report['torch']}, {report.get('seconds', '?')} s"
    lines = [head, "", "| figure | measured | target | met | |", "|---|---|---|---|---|"]
    for row in rows:
        met = {True: "yes", False: "**no**", None: "-"}[row["met"]]
        lines.append(f"| {row['figure']} | {row['shown']} | {row['target']} | {met} | {row['detail']} |")
    return "\n".join(lines) + "\n"


# --- driver -------------------------------------------------------------------------------------


def arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="The figures of a lent GPU against their targets.")
    found = [p for p in (ROOT / ".gpu" / "data", ROOT.parent / "shared" / "data" / "multi30k") if p.is_dir()]
    parser.add_argument(
        "--data",
        type=Path,
        default=found[0] if found else None,
        help="raw Multi30k (default: .gpu/data, else ../shared/data/multi30k)",
    )
    parser.add_argument("--out", type=Path, help="a folder to write gpu_run.json and gpu_run.md to as well")
    parser.add_argument(
        "--work", type=Path, help="keep the corpora and runs here (default: a temporary folder)"
    )
    parser.add_argument("--minutes", type=float, default=BUDGET_S / 60, help="the whole run's time on a GPU")
    parser.add_argument("--dry-run", action="store_true", help="tiny sizes on CPU, even with a GPU")
    return parser.parse_args(argv)  # fmt: skip


def save(report: Figures, folders: list[Path]) -> str:
    report["rows"] = table(report["steps"])
    text = json.dumps(clean(report), indent=2)
    for folder in folders:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "gpu_run.json").write_text(text + "\n", encoding="utf-8")
        (folder / "gpu_run.md").write_text(markdown(report["rows"], report), encoding="utf-8")
    return text


def main(argv: list[str]) -> int:
    args = arguments(argv)
    if args.dry_run and CUDA:  # gpu_check sizes its steps by torch.cuda.is_available(): hide the GPU
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
        os.execve(sys.executable, [sys.executable, str(Path(__file__).resolve()), *argv], env)
    if not CUDA:
        torch.set_num_threads(min(2, torch.get_num_threads()))  # more threads than cores spin
    start = time.monotonic()
    report: Figures = {"device": "cuda" if CUDA else "cpu", "dry_run": not CUDA, "torch": torch.__version__,
                       "gpu": torch.cuda.get_device_name() if CUDA else None, "budget_s": args.minutes * 60,
                       "steps": {}}  # fmt: skip
    folders = [RESULTS, *([args.out] if args.out else [])]
    with tempfile.TemporaryDirectory(prefix="gpu_run_") as tmp:
        r = Run(args.data, args.work or Path(tmp), start + args.minutes * 60)
        r.work.mkdir(parents=True, exist_ok=True)

        def record(name: str, figures: Figures) -> None:
            report["steps"][name] = figures
            print(json.dumps(clean(figures)), file=sys.stderr, flush=True)  # seen as it goes
            save(report, folders)

        measure(r, record)
    report["ok"] = all(step.get("ok", True) for step in report["steps"].values())
    report["seconds"] = round(time.monotonic() - start, 1)
    print(save(report, folders))
    print()
    print(markdown(report["rows"], report), end="")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
