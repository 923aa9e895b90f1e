"""Lexically constrained decoding on Multi30k (test_2016_flickr, En-De): whether the constraints are
met, what they do to BLEU and to speed, what a large glossary costs, and how it compares with
fairseq's constrained decoding on the same model.

- The set: for each test line, up to two content words of the reference that the unconstrained
  beam-4 translation lacks (`constraint_sets.pick_constraints`): words a human translator used
  and the model did not, so that enforcing them must raise BLEU.
- nmt on the Multi30k model, beam 4: each constraint met as a whole word (and as pieces, which a
  longer word can hold), BLEU with and without the constraints on the lines that have any and on
  all, and sentences a second of both on all 1,000 lines (median of 3, in the same process).
- A glossary of 100,000 entries (the most frequent word uni-, bi- and trigrams of train.en, each
  mapped to a German word): the seconds to match it against the 1,000 lines, beside the seconds
  of decoding them.
- fairseq: the shared fairseq model (tests/fixtures/fairseq-multi30k-tiny), imported, decodes
  the fixture's constraint set (`make_constrained.sh`, the same rule on its 200 lines) at beam 4;
  satisfaction and BLEU against fairseq's own constrained output stored in the fixture; and the
  sentences a second of `nmt translate --constraints` against `fairseq-interactive --constraints`
  as whole processes on one thread (median of 3), when `--fairseq` points at a fairseq install.

    .venv/bin/python bench/constraints.py [--model avg.pt] [--data ../shared/data/multi30k] \
        [--fairseq /path/to/site-packages-with-fairseq]
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import sacrebleu
from common import DEFAULT_DATA, ROOT, THREADS, emit
from constraint_sets import contains_word, pick_constraints, words

from nmt_cli import Translator
from nmt_cli.data.glossary import Glossary
from nmt_cli.device import configure_cpu

FIXTURE = ROOT / "tests" / "fixtures" / "fairseq-multi30k-tiny"
RUNS = 3
T = TypeVar("T")


def lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def median_seconds(call: Callable[[], T], runs: int = RUNS) -> tuple[float, T]:
    """The median wall time of `runs` calls, and the last call's result."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        out = call()
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


def satisfaction(outputs: list[str], constraints: list[list[str]]) -> dict:
    total = sum(len(c) for c in constraints)
    whole = sum(contains_word(out, c) for out, cs in zip(outputs, constraints, strict=True) for c in cs)
    inside = sum(c in out for out, cs in zip(outputs, constraints, strict=True) for c in cs)
    return {
        "constraints": total,
        "met_as_words": round(whole / total, 4),
        "met_as_pieces": round(inside / total, 4),
    }


def bleu(outputs: list[str], references: list[str]) -> float:
    return round(sacrebleu.corpus_bleu(outputs, [references]).score, 2)


def multi30k(translator: Translator, data: Path) -> dict:
    sources = lines(data / "test_2016_flickr.en")
    references = lines(data / "test_2016_flickr.de")
    translator.translate(sources[:50], split_sentences=False)  # warm-up
    plain_s, plain = median_seconds(lambda: translator.translate(sources, split_sentences=False, beam=4))
    constraints = [pick_constraints(r, h, 2) for r, h in zip(references, plain, strict=True)]
    constrained_s, constrained = median_seconds(
        lambda: translator.translate(sources, constraints=constraints, beam=4)
    )
    having = [i for i, c in enumerate(constraints) if c]
    return {
        "lines": len(sources),
        "lines_with_constraints": len(having),
        **satisfaction(constrained, constraints),
        "bleu_all": {"unconstrained": bleu(plain, references), "constrained": bleu(constrained, references)},
        "bleu_lines_with_constraints": {
            "unconstrained": bleu([plain[i] for i in having], [references[i] for i in having]),
            "constrained": bleu([constrained[i] for i in having], [references[i] for i in having]),
        },
        "sentences_per_s": {
            "unconstrained": round(len(sources) / plain_s, 1),
            "constrained": round(len(sources) / constrained_s, 1),
        },
        "speed_ratio": round(plain_s / constrained_s, 3),
        "decoding_s": round(plain_s, 2),
    }


def large_glossary(data: Path, entries: int = 100_000) -> Glossary:
    """The most frequent uni-, bi- and trigrams of train.en, each mapped to a German word of train.de."""
    counts: collections.Counter[str] = collections.Counter()
    for line in lines(data / "train.en"):
        tokens = words(line)
        counts.update(tokens)
        counts.update(" ".join(pair) for pair in zip(tokens, tokens[1:], strict=False))
        counts.update(" ".join(three) for three in zip(tokens, tokens[1:], tokens[2:], strict=False))
    german = sorted({w for line in lines(data / "train.de") for w in words(line)})
    terms = [term for term, _ in counts.most_common(entries)]
    return Glossary.of({term: german[i % len(german)] for i, term in enumerate(terms)})


def glossary_cost(data: Path, decoding_s: float) -> dict:
    start = time.perf_counter()
    glossary = large_glossary(data)
    built_s = time.perf_counter() - start
    sources = lines(data / "test_2016_flickr.en")
    match_s, matched = median_seconds(lambda: [glossary.targets(line) for line in sources])
    return {
        "entries": len(glossary),
        "build_s": round(built_s, 2),
        "match_s": round(match_s, 4),
        "terms_matched_per_line": round(sum(map(len, matched)) / len(sources), 2),
        "share_of_decoding": round(match_s / decoding_s, 4),
    }


def against_fairseq(fairseq: Path | None) -> dict:
    fields = [line.split("\t") for line in lines(FIXTURE / "constraints.en")]
    constraints = [f[1:] for f in fields]
    references = lines(FIXTURE / "reference.de")
    theirs = lines(FIXTURE / "fairseq.constrained.beam4.de")
    with tempfile.TemporaryDirectory() as tmp:
        imported = Path(tmp) / "fairseq.pt"
        nmt = [sys.executable, "-m", "nmt_cli"]
        subprocess.run(
            [*nmt, "-q", "import", str(FIXTURE / "checkpoint.pt"), "-o", str(imported)], check=True
        )
        command = [*nmt, "-q", "translate", "-m", str(imported), "-i", str(FIXTURE / "constraints.en"),
                   "--constraints", "--beam", "4", "--threads", "1", "--device", "cpu"]  # fmt: skip
        nmt_s, run = median_seconds(
            lambda: subprocess.run(command, check=True, capture_output=True, text=True)
        )
        ours = run.stdout.splitlines()
        result: dict[str, Any] = {
            "lines": len(fields),
            "constraints": sum(map(len, constraints)),
            "nmt": {**satisfaction(ours, constraints), "bleu": bleu(ours, references)},
            "fairseq": {**satisfaction(theirs, constraints), "bleu": bleu(theirs, references)},
            "identical_lines": sum(a == b for a, b in zip(ours, theirs, strict=True)),
            "nmt_process_s": round(nmt_s, 2),
        }
        if fairseq is not None:
            result["fairseq_process_s"] = round(fairseq_seconds(fairseq, Path(tmp)), 2)
            result["nmt_speedup"] = round(result["fairseq_process_s"] / nmt_s, 2)
    return result


def fairseq_env(fairseq: Path) -> dict[str, str]:
    """The environment fairseq-interactive runs in: fairseq importable from `fairseq`, one thread."""
    env = {**os.environ, "PYTHONPATH": str(fairseq), "OMP_NUM_THREADS": "1"}
    env["TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"] = "1"  # fairseq 0.12 loads its checkpoints whole
    return env


def fairseq_imports(fairseq: Path) -> bool:
    """Whether fairseq-interactive imports from the folder `fairseq`."""
    probe = [sys.executable, "-c", "import fairseq_cli.interactive"]
    return subprocess.run(probe, capture_output=True, env=fairseq_env(fairseq)).returncode == 0


def fairseq_seconds(fairseq: Path, tmp: Path) -> float:
    """fairseq-interactive --constraints unordered, beam 4, on the fixture (as make_constrained.sh)."""
    data = tmp / "bin"
    data.mkdir()
    for name in ("dict.en.txt", "dict.de.txt"):
        (data / name).write_bytes((FIXTURE / name).read_bytes())
    env = fairseq_env(fairseq)
    command = [sys.executable, "-m", "fairseq_cli.interactive", str(data), "--cpu",
               "--path", str(FIXTURE / "checkpoint.pt"), "--source-lang", "en", "--target-lang", "de",
               "--beam", "4", "--lenpen", "1.0", "--nbest", "1", "--buffer-size", "200",
               "--max-tokens", "4096",
               "--bpe", "sentencepiece", "--sentencepiece-model", str(FIXTURE / "spm.model"),
               "--input", str(FIXTURE / "constraints.en"), "--constraints", "unordered"]  # fmt: skip
    seconds, _ = median_seconds(lambda: subprocess.run(command, check=True, capture_output=True, env=env))
    return seconds


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument(
        "--model", type=Path, help="checkpoint (default: the benchmark's cached 15-minute model)"
    )
    parser.add_argument("--fairseq", type=Path, help="a folder from which fairseq 0.12 imports (PYTHONPATH)")
    args = parser.parse_args(argv)
    if args.fairseq is not None and not fairseq_imports(args.fairseq):  # before a minute of decoding
        raise SystemExit(f"bench: fairseq_cli.interactive does not import from --fairseq {args.fairseq}")
    if args.model is None:
        from time_to_bleu import trained_model

        args.model, _ = trained_model(args.data, "recipe", 15.0)
    configure_cpu(THREADS)
    translator = Translator.load(args.model, device="cpu", precision="fp32")
    result: dict = {"model": str(args.model), "precision": "fp32", "threads": THREADS, "beam": 4}
    result["multi30k"] = multi30k(translator, args.data)
    result["glossary"] = glossary_cost(args.data, result["multi30k"]["decoding_s"])
    result["fairseq_fixture"] = against_fairseq(args.fairseq)
    emit(result)
    return result


if __name__ == "__main__":
    main()
