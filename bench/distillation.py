"""Sequence-level knowledge distillation on Multi30k En-De (recipes/multi30k/distillation.md),
end to end: the teachers (recipes/multi30k/small.toml, 15 minutes each, seeds 1..--teachers, as
time_to_bleu.py trains them), their ensemble's beam-4 translations of the training set, the
student (recipes/multi30k/student.toml, 45 minutes on those) for each --seeds, the tuned recipe's
model and the student of each seed scored on valid and test, and both decoding the same lines at
beam 4.

Speed: test_2016_flickr.en repeated to --lines lines, translated by whole `nmt translate`
processes (as a user runs it; median of --repeats, the teacher's and the student's runs
interleaved), at each --precisions without a shortlist and with each of SHORTLISTS (`nmt
shortlist`'s default sizes and half of them), learned from the model's own training pairs: the
real ones for the teacher, the distilled ones for the student. Each model is taken at its
fastest setting within 0.3 BLEU of its own fp32 full-vocabulary output; `student_speedup` is the
student's sentences/s over the tuned recipe's (one model, not the ensemble). Speed is measured on
the first seed's models; BLEU for every seed.

Teachers are cached in bench/work/ttb_recipe_15min[_seedN]/, the distilled corpus in
bench/work/kd_corpus_ensN/ and students in bench/work/kd_student_recipe_<minutes>min[_seedN]/;
--fresh retrains them all.
    .venv/bin/python bench/distillation.py [--seeds 1 2] [--teachers 3] [--student-minutes 45]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
from pathlib import Path

from common import DEFAULT_DATA, RECIPE, ROOT, WORK, bleu, emit, nmt, prepared, repeated_test
from time_to_bleu import trained_model, trained_run

from nmt_cli.recipe import load_recipe

STUDENT = ROOT / "recipes" / "multi30k" / "student.toml"


def decode(recipe: Path) -> list[str]:
    """Beam 4 and the length penalty of `recipe`'s [decode] (the teacher's 0.6, the student's 1.5)."""
    return ["--beam", "4", "--lenpen", str(load_recipe(recipe).decode.lenpen)]


def distilled_corpus(teachers: list[tuple[Path, dict]], data: Path, fresh: bool) -> tuple[Path, bool]:
    """The training sources with the teachers' ensemble translations as targets, prepared with
    the teachers' vocabulary (valid and test stay real); and whether it was made anew. A cached
    corpus is reused only while the teachers are the runs it was translated by."""
    work = WORK / f"kd_corpus_ens{len(teachers)}"
    out, stamp = work / "prepared", work / "teachers.json"
    made_by = json.dumps([facts for _, facts in teachers], sort_keys=True)
    if (out / "meta.json").exists() and stamp.exists() and stamp.read_text() == made_by and not fresh:
        return out, False
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    shutil.copyfile(data / "train.en", work / "train.en")
    ensemble = [arg for teacher, _ in teachers for arg in ("-m", str(teacher))]
    nmt("translate", *ensemble, "-i", str(data / "train.en"), "-o", str(work / "train.de"), *decode(RECIPE))
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
    stamp.write_text(made_by)
    return out, True


def scores(models: list[Path], recipe: Path, data: Path, hyps: Path) -> dict:
    """sacreBLEU on valid and test, beam 4, fp32 (the model's quality, not a decoding setting's),
    `recipe`'s length penalty; several models decode as an ensemble. The translations go to the
    folder `hyps`."""
    result = {}
    ensemble = [arg for model in models for arg in ("-m", str(model))]
    for split, name in (("valid", "val"), ("test", "test_2016_flickr")):
        hyp = hyps / f"{split}.hyp"
        source = str(data / f"{name}.en")
        nmt("translate", *ensemble, "-i", source, "-o", str(hyp), "--precision", "fp32", *decode(recipe))
        result[f"bleu_{split}"] = round(bleu(hyp, data / f"{name}.de")[0], 2)
    return result


SHORTLISTS = {"shortlist": (20, 100), "half_shortlist": (10, 50)}
"""Shortlist sizes timed, (candidates a source piece, frequent pieces): `nmt shortlist`'s defaults,
and half of each, which a distilled student's peakier output may need no more than."""


def with_shortlist(model: Path, corpus: Path, sizes: tuple[int, int]) -> Path:
    """`model` with a shortlist of `sizes` learned from its own training corpus `corpus` (a raw
    text prefix: the real pairs for the teacher, the distilled ones for the student)."""
    listed = model.with_name(f"average_shortlist_{sizes[0]}_{sizes[1]}.pt")
    if not listed.exists():
        candidates, frequent = (str(n) for n in sizes)
        nmt(
            "shortlist",
            "-m",
            str(model),
            "--train",
            str(corpus),
            "-o",
            str(listed),
            "--candidates",
            candidates,
            "--frequent",
            frequent,
        )
    return listed


Timed = tuple[Path, Path, Path]
"""A model, its recipe and its training corpus (a raw text prefix, for its shortlists)."""


def speed(models: dict[str, Timed], data: Path, lines: int, repeats: int, precisions: list[str]) -> dict:
    """Sentences/s and BLEU of every model at every setting (precision; no shortlist or one of
    SHORTLISTS), runs interleaved; then each model's fastest setting within 0.3 BLEU of its fp32."""
    work = WORK / "kd_speed"
    work.mkdir(parents=True, exist_ok=True)
    source, reference = repeated_test(data, lines, work)
    settings = [(p, s) for p in precisions for s in ("", *SHORTLISTS)]
    seconds: dict[str, list[float]] = {}
    for _ in range(repeats):
        for name, (model, recipe, corpus) in models.items():
            for precision, listed in settings:
                label = "_".join(x for x in (name, precision, listed) if x)
                checkpoint = with_shortlist(model, corpus, SHORTLISTS[listed]) if listed else model
                args = ["-m", str(checkpoint), "-i", str(source), "-o", str(work / f"{label}.hyp")]
                args += ["--precision", precision, *decode(recipe), *(["--shortlist"] if listed else [])]
                seconds.setdefault(label, []).append(nmt("translate", *args)[0])
    import sacrebleu

    result: dict = {}
    for label, runs in seconds.items():
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
    parser.add_argument("--student-minutes", type=float, default=45.0, help="the student's training time")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--teachers", type=int, default=3, help="tuned-recipe seeds in the teaching ensemble")
    parser.add_argument("--lines", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=3, help="timed runs of each setting; 0: no timing")
    parser.add_argument("--precisions", default="fp32,int8", help="nmt precisions timed")
    parser.add_argument("--fresh", action="store_true", help="retrain every model")
    args = parser.parse_args(argv)
    result: dict = {"lines": args.lines, "settings": "beam 4, each recipe's lenpen, 2 cores"}
    teachers = [
        trained_model(args.data, "recipe", args.minutes, args.fresh, seed=seed)
        for seed in range(1, args.teachers + 1)
    ]
    corpus, new_corpus = distilled_corpus(teachers, args.data, args.fresh)
    result["ensemble"] = scores([model for model, _ in teachers], RECIPE, args.data, corpus.parent)
    first: dict[str, Timed] = {}
    for seed in args.seeds:
        teacher, teacher_facts = (
            teachers[seed - 1]
            if seed <= len(teachers)
            else trained_model(args.data, "recipe", args.minutes, args.fresh, seed=seed)
        )
        student, student_facts = trained_run(
            # a student of an earlier corpus is not this corpus's student
            corpus,
            STUDENT,
            "recipe",
            args.student_minutes,
            args.fresh or new_corpus,
            seed=seed,
            name="kd_student",
        )
        runs = (("teacher", teacher, RECIPE, teacher_facts), ("student", student, STUDENT, student_facts))
        for name, model, recipe, facts in runs:
            result[f"{name}_seed{seed}"] = {**facts, **scores([model], recipe, args.data, model.parent)}
        first = first or {
            "teacher": (teacher, RECIPE, args.data / "train"),
            "student": (student, STUDENT, corpus.parent / "train"),
        }
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
