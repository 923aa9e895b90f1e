"""Sequence-level knowledge distillation on Multi30k En-De (recipes/multi30k/distillation.md),
end to end: the teacher (recipes/multi30k/small.toml, 15 minutes, as time_to_bleu.py trains it),
its beam-4 translations of the training set, the student (recipes/multi30k/student.toml, 15
minutes on those), both scored on valid and test, and both decoding the same lines at beam 4.

Speed: test_2016_flickr.en repeated to --lines lines, translated by whole `nmt translate`
processes (as a user runs it; median of --repeats, the teacher's and the student's runs
interleaved), at each --precisions with and without the shortlist (`nmt shortlist` on the real
training corpus, its default sizes). Each model is taken at its fastest setting within 0.3 BLEU
of its own fp32 full-vocabulary output; `student_speedup` is the student's sentences/s over the
teacher's. Speed is measured on the first seed's models; BLEU for every seed.

Teachers are cached in bench/work/ttb_recipe_15min[_seedN]/, distilled corpora in
bench/work/kd_corpus[_seedN]/ and students in bench/work/kd_student_recipe_<minutes>min[_seedN]/;
--fresh retrains them all.
    .venv/bin/python bench/distillation.py [--seeds 1 2] [--student-minutes 15] [--repeats 3]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
from pathlib import Path

from common import DEFAULT_DATA, ROOT, WORK, bleu, emit, nmt, prepared, repeated_test
from time_to_bleu import trained_model, trained_run

STUDENT = ROOT / "recipes" / "multi30k" / "student.toml"
DECODE = ["--beam", "4", "--lenpen", "0.6"]  # the recipes' [decode]


def distilled_corpus(teacher: Path, data: Path, seed: int, fresh: bool) -> Path:
    """The training sources with the teacher's translations as targets, prepared with the
    teacher's vocabulary (valid and test stay real)."""
    work = WORK / ("kd_corpus" if seed == 1 else f"kd_corpus_seed{seed}")
    out = work / "prepared"
    if (out / "meta.json").exists() and not fresh:
        return out
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    shutil.copyfile(data / "train.en", work / "train.en")
    nmt("translate", "-m", str(teacher), "-i", str(data / "train.en"), "-o", str(work / "train.de"), *DECODE)
    nmt(
        "prepare",
        "--train",
        str(work / "train"),
        "--valid",
        str(data / "val"),
        "--test",
        str(data / "test_2016_flickr"),
        "--src",
        "en",
        "--tgt",
        "de",
        "--out",
        str(out),
        "--spm-from",
        str(prepared(data)),
    )
    return out


def scores(model: Path, data: Path) -> dict:
    """sacreBLEU on valid and test, beam 4, fp32 (the model's quality, not a decoding setting's)."""
    result = {}
    for split, name in (("valid", "val"), ("test", "test_2016_flickr")):
        hyp = model.with_name(f"{split}.hyp")
        source = str(data / f"{name}.en")
        nmt("translate", "-m", str(model), "-i", source, "-o", str(hyp), "--precision", "fp32", *DECODE)
        result[f"bleu_{split}"] = round(bleu(hyp, data / f"{name}.de")[0], 2)
    return result


def with_shortlist(model: Path, data: Path) -> Path:
    listed = model.with_name("average_shortlist.pt")
    if not listed.exists():
        nmt("shortlist", "-m", str(model), "--train", str(data / "train"), "-o", str(listed))
    return listed


def speed(models: dict[str, Path], data: Path, lines: int, repeats: int, precisions: list[str]) -> dict:
    """Sentences/s and BLEU of every model at every setting, runs interleaved; then each model's
    fastest setting within 0.3 BLEU of its fp32."""
    work = WORK / "kd_speed"
    work.mkdir(parents=True, exist_ok=True)
    source, reference = repeated_test(data, lines, work)
    settings = [(p, s) for p in precisions for s in (False, True)]
    seconds: dict[tuple[str, str, bool], list[float]] = {}
    for _ in range(repeats):
        for name, model in models.items():
            for precision, listed in settings:
                out = work / f"{name}_{precision}{'_shortlist' if listed else ''}.hyp"
                args = ["-m", str(with_shortlist(model, data) if listed else model), "-i", str(source)]
                args += [
                    "-o",
                    str(out),
                    "--precision",
                    precision,
                    *DECODE,
                    *(["--shortlist"] if listed else []),
                ]
                seconds.setdefault((name, precision, listed), []).append(nmt("translate", *args)[0])
    import sacrebleu

    result: dict = {}
    for (name, precision, listed), runs in seconds.items():
        label = f"{name}_{precision}{'_shortlist' if listed else ''}"
        hyps = (work / f"{label}.hyp").read_text(encoding="utf-8").splitlines()
        median = statistics.median(runs)
        result[label] = {
            "seconds": round(median, 2),
            "sent_s": round(lines / median, 1),
            "bleu": round(sacrebleu.corpus_bleu(hyps, [reference]).score, 2),
        }
    for name in models:
        floor = result[f"{name}_fp32"]["bleu"] - 0.3 if f"{name}_fp32" in result else float("-inf")
        eligible = [k for k in result if k.startswith(f"{name}_") and result[k]["bleu"] >= floor]
        result[f"{name}_best"] = max(eligible, key=lambda k: result[k]["sent_s"])
    best = {name: result[result[f"{name}_best"]]["sent_s"] for name in models}
    result["student_speedup"] = round(best["student"] / best["teacher"], 2)
    return result


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--minutes", type=float, default=15.0, help="the teacher's training time")
    parser.add_argument("--student-minutes", type=float, default=15.0, help="the student's training time")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--lines", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=3, help="timed runs of each setting; 0: no timing")
    parser.add_argument("--precisions", default="fp32,int8", help="nmt precisions timed")
    parser.add_argument("--fresh", action="store_true", help="retrain every model")
    args = parser.parse_args(argv)
    result: dict = {"lines": args.lines, "settings": "beam 4, lenpen 0.6, 2 cores"}
    first: dict[str, Path] = {}
    for seed in args.seeds:
        teacher, teacher_facts = trained_model(args.data, "recipe", args.minutes, args.fresh, seed=seed)
        corpus = distilled_corpus(teacher, args.data, seed, args.fresh)
        student, student_facts = trained_run(
            corpus, STUDENT, "recipe", args.student_minutes, args.fresh, seed=seed, name="kd_student"
        )
        for name, model, facts in (("teacher", teacher, teacher_facts), ("student", student, student_facts)):
            result[f"{name}_seed{seed}"] = {**facts, **scores(model, args.data)}
        first = first or {"teacher": teacher, "student": student}
    for name in ("teacher", "student"):
        for split in ("valid", "test"):
            values = [result[f"{name}_seed{seed}"][f"bleu_{split}"] for seed in args.seeds]
            result[f"{name}_bleu_{split}_mean"] = round(statistics.mean(values), 2)
    if args.repeats > 0:
        result["speed"] = speed(first, args.data, args.lines, args.repeats, args.precisions.split(","))
    emit(result)
    return result


if __name__ == "__main__":
    main()
