"""`nmt score`: BLEU, chrF and TER of hypotheses against one or more references, computed
by sacreBLEU's Python API (never a BLEU of our own), each with its sacreBLEU signature.

`--compound-split` computes the figure the paper's Table 2 reports for En-De instead of
sacreBLEU's, the way tensor2tensor's get_ende_bleu.sh does it: the Moses tokenizer for
German with its default escaping (sacremoses: "&" becomes "&amp;", '"' becomes "&quot;"),
then every "a-b" rewritten as "a ##AT##-##AT## b", then multi-bleu.perl's corpus BLEU. Here
sacreBLEU scores the result with no further tokenization and no smoothing, which is what
multi-bleu.perl computes. `--tokenize none` says the files are tokenized already and skips
the Moses step; no other `--tokenize` goes with `--compound-split`. sacremoses tokenizes as
tokenizer.perl did before late 2018, when Moses began to split the final period off a last
word that is a non-breaking prefix ("Nummer 10." keeps "10." whole); the paper's figures predate
that change. sacremoses is imported only for `--compound-split`.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from sacrebleu.metrics import BLEU, CHRF, TER
from sacrebleu.metrics.base import Metric

from nmt_cli.data import text
from nmt_cli.errors import InputError, optional_import_failure

METRICS = ("bleu", "chrf", "ter")
SACREBLEU = "sacreBLEU"
PAPER = "tokenized BLEU, compound-split (comparable to the paper's Table 2)"
# tensor2tensor get_ende_bleu.sh: perl -ple 's{(\S)-(\S)}{$1 ##AT##-##AT## $2}g'. Kept as is,
# quirks included. Matches do not overlap, so a one-letter part stays joined ("a-b-c" becomes
# "a ##AT##-##AT## b-c") while "rich-text-format" is split at both hyphens. And perl runs it on
# UTF-8 bytes, where "\S" is one byte, so a one-letter part that is not ASCII is split off
# ("ä-ö-ü" becomes "ä ##AT##-##AT## ö ##AT##-##AT## ü"): hence a bytes pattern here too. The
# hyphen is one byte that never occurs inside a multi-byte character, so the result decodes.
_COMPOUND = re.compile(rb"(\S)-(\S)")
_AT = rb"\1 ##AT##-##AT## \2"


def run(
    *,
    refs: list[Path],
    hyp: Path | None,
    metrics: str,
    tokenize: str | None,
    as_json: bool,
    compound_split: bool = False,
    stdout: TextIO | None = None,
) -> None:
    names = parse_metrics(metrics)
    if tokenize is not None and tokenize not in BLEU.TOKENIZERS:
        raise InputError(f"--tokenize {tokenize!r}: use one of {', '.join(BLEU.TOKENIZERS)}")
    if compound_split and tokenize not in (None, "none"):
        raise InputError(
            f"--tokenize {tokenize} does not go with --compound-split, which tokenizes with Moses: "
            "drop --tokenize, or give --tokenize none if the files are tokenized already"
        )
    hypotheses, hyp_name = _read_hypotheses(hyp)
    references = [text.read_lines(ref, str(ref)) for ref in refs]
    for ref, lines in zip(refs, references, strict=True):
        if len(lines) != len(hypotheses):
            raise InputError(
                f"hypotheses {hyp_name} have {_lines(len(hypotheses))} but reference {ref} has "
                f"{_lines(len(lines))}; they must match line for line"
            )
    if not hypotheses:
        raise InputError(f"nothing to score: hypotheses {hyp_name} and the references are empty")
    results = {name: score(name, hypotheses, references, tokenize, compound_split) for name in names}
    out = stdout or sys.stdout
    if as_json:
        out.write(json.dumps({**results, "lines": len(hypotheses), "refs": [str(r) for r in refs]}) + "\n")
        return
    for result in results.values():
        out.write(f"{result['text']}  [{result['label']}: {result['signature']}]\n")


def parse_metrics(metrics: str) -> list[str]:
    names = [name.strip().lower() for name in metrics.split(",") if name.strip()]
    unknown = [name for name in names if name not in METRICS]
    if unknown or not names:
        raise InputError(f"--metrics {metrics!r}: use a comma-separated list of {', '.join(METRICS)}")
    return list(dict.fromkeys(names))  # drop repeats, keep the order asked for


def _read_hypotheses(hyp: Path | None) -> tuple[list[str], str]:
    if hyp is not None:
        return text.read_lines(hyp, str(hyp)), str(hyp)
    if sys.stdin is None or sys.stdin.isatty():
        raise InputError(
            "no hypotheses: give --hyp FILE or pipe them in, e.g. "
            "`nmt translate -m model.pt -i test.en | nmt score --ref test.de`"
        )
    return text.read_lines(sys.stdin.buffer, "<stdin>"), "(stdin)"


def score(
    name: str, hypotheses: list[str], references: list[list[str]], tokenize: str | None, compound_split: bool
) -> dict:
    """One metric as {"score", "signature", "label", "text"}; `references` holds one list
    of lines per reference file."""
    label = SACREBLEU
    metric: Metric
    if name == "bleu" and compound_split:
        split = _compound_splitter(tokenize or "moses-de")
        hypotheses = [split(line) for line in hypotheses]
        references = [[split(line) for line in ref] for ref in references]
        metric, label = BLEU(tokenize="none", smooth_method="none", force=True), PAPER
    elif name == "bleu":
        metric = _make(lambda: BLEU(tokenize=tokenize) if tokenize else BLEU())
    elif name == "chrf":
        metric = CHRF()
    else:
        metric = TER()
    result = metric.corpus_score(hypotheses, references)
    signature = str(metric.get_signature())
    if label == PAPER:
        signature += f"|pretok:{tokenize or 'moses-de'}+compound-split"
    return {
        "score": round(float(result.score), 4),
        "signature": signature,
        "label": label,
        "text": str(result),
    }


def _compound_splitter(pretok: str) -> Callable[[str], str]:
    """One line as get_ende_bleu.sh hands it to multi-bleu.perl. `pretok` is "moses-de" (the
    Moses tokenizer for German, escaping on) or "none" (the line is tokenized already)."""
    tokenizer = _moses_de() if pretok == "moses-de" else str.strip

    def split(line: str) -> str:
        return _COMPOUND.sub(_AT, tokenizer(line).encode("utf-8")).decode("utf-8")

    return split


def _moses_de() -> Callable[[str], str]:
    try:
        from sacremoses import MosesTokenizer
    except ImportError as err:
        missing = (
            "--compound-split needs sacremoses: pip install sacremoses "
            "(or give --tokenize none for text that is tokenized already)"
        )
        raise optional_import_failure(err, missing, "sacremoses") from None
    moses = MosesTokenizer(lang="de")

    def tokenize(line: str) -> str:
        return moses.tokenize(line, escape=True, return_str=True)

    return tokenize


def _make(build: Callable[[], BLEU]) -> BLEU:
    """Build a sacreBLEU metric; tokenizers that need extra packages fail here."""
    try:
        return build()
    except (ImportError, RuntimeError, OSError) as err:
        why = " ".join(str(err).split())  # sacreBLEU's own message spans lines ("pip install sacrebleu[ja]")
        raise InputError(f"--tokenize: sacreBLEU cannot load this tokenizer ({why})") from None


def _lines(n: int) -> str:
    return f"{n} line" if n == 1 else f"{n} lines"
