"""`nmt score`: BLEU, chrF and TER of hypotheses against one or more references, computed
by sacreBLEU's Python API (never a BLEU of our own), each with its sacreBLEU signature.

`--compound-split` computes the figure the paper's Table 2 reports for En-De instead of
sacreBLEU's: tokenized BLEU on compound-split text, the way tensor2tensor's
get_ende_bleu.sh does it (Moses-tokenize, rewrite "a-b" as "a ##AT##-##AT## b", then
multi-bleu.perl). Here sacreBLEU's 13a tokenizer stands in for the Moses tokenizer
(`--tokenize none` when the files are tokenized already) and sacreBLEU scores the result
with no further tokenization and no smoothing, as multi-bleu.perl does. Imports sacrebleu,
the standard library, `data.text` and `errors`.
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
from nmt_cli.errors import InputError

METRICS = ("bleu", "chrf", "ter")
SACREBLEU = "sacreBLEU"
PAPER = "tokenized BLEU, compound-split (comparable to the paper's Table 2)"
# tensor2tensor get_ende_bleu.sh: perl -ple 's{(\S)-(\S)}{$1 ##AT##-##AT## $2}g'. Kept as is,
# quirk included: matches do not overlap, so a one-letter part stays joined ("a-b-c" becomes
# "a ##AT##-##AT## b-c") while "rich-text-format" is split at both hyphens.
_COMPOUND = re.compile(r"(\S)-(\S)")


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
        split = _compound_splitter(tokenize or "13a")
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
        signature += f"|pretok:{tokenize or '13a'}+compound-split"
    return {
        "score": round(float(result.score), 4),
        "signature": signature,
        "label": label,
        "text": str(result),
    }


def _compound_splitter(tokenize: str) -> Callable[[str], str]:
    tokenizer = _make(lambda: BLEU(tokenize=tokenize)).tokenizer

    def split(line: str) -> str:
        return _COMPOUND.sub(r"\1 ##AT##-##AT## \2", tokenizer(line.strip()))

    return split


def _make(build: Callable[[], BLEU]) -> BLEU:
    """Build a sacreBLEU metric; tokenizers that need extra packages fail here."""
    try:
        return build()
    except (ImportError, RuntimeError, OSError) as err:
        raise InputError(f"--tokenize: sacreBLEU cannot load this tokenizer ({err})") from None


def _lines(n: int) -> str:
    return f"{n} line" if n == 1 else f"{n} lines"
