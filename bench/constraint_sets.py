"""Constraint sets for lexically constrained decoding, taken from the reference.

For each line, the constraints are content words of the German reference that the unconstrained
hypothesis misses: words the model did not produce on its own but a human translator used. Forcing
them into the output (fairseq-interactive's ``--constraints``, nmt's constrained beam search) must
then raise BLEU against that same reference, which makes the sets a check that constrained decoding
works, and a fixture to compare two implementations of it on.

A constraint is a token of the reference that is an alphabetic word (letters, umlauts and ß
included, at most one internal hyphen), at least 4 characters long, not a German function word
(``STOPWORDS``, compared lowercased) and not present as a whole word in the hypothesis (case as
written); each is chosen once, up to ``most`` a line, in reference order.

    python bench/constraint_sets.py --source input.en --reference reference.de \
        --hypotheses fairseq.beam4.de --most 2 --out constraints.en

writes one line per source line in fairseq-interactive's input format for ``--constraints``: the
source line, then each constraint after a TAB (a line with no constraint is the source alone).
Plain Python, no imports beyond the standard library.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence

# German function words: articles, pronouns, prepositions, conjunctions, auxiliaries (lowercase).
# Only words of MIN_LENGTH letters or more are listed: shorter ones are never picked anyway.
STOPWORDS = frozenset(
    """
    eine einen einem einer eines keine keinen keinem keiner
    sich sein seine seinen seinem seiner ihre ihren ihrem ihrer ihnen
    diese dieser diesem diesen dieses jemand etwas andere anderen anderer alle allen
    welche welcher jeder jede
    über unter neben hinter zwischen durch gegen ohne nach beim während entlang gegenüber
    oder aber dass weil wenn sowie sondern
    sind waren wird werden wurde wurden haben hatte kann können
    """.split()
)
MIN_LENGTH = 4

_WORD = re.compile(r"[^\W\d_]+(?:-[^\W\d_]+)?")
# Characters stripped from the ends of a whitespace token before it is tested as a word.
_EDGE_PUNCTUATION = "\"'.,;:!?()[]{}«»„“”‚‘’…–—/"


def words(text: str) -> list[str]:
    """The alphabetic words of ``text``: whitespace tokens, edge punctuation removed."""
    result = []
    for token in text.split():
        token = token.strip(_EDGE_PUNCTUATION)
        if _WORD.fullmatch(token):
            result.append(token)
    return result


def contains_word(text: str, word: str) -> bool:
    """Whether ``word`` occurs in ``text`` as a whole word (case as written).

    A word ends at anything but a letter, a digit or a hyphen, so "Zaun" is not in "Holz-Zaun"
    nor in "Zauns".
    """
    pattern = r"(?<![\w-])" + re.escape(word) + r"(?![\w-])"
    return re.search(pattern, text) is not None


def pick_constraints(reference: str, hypothesis: str, most: int = 2) -> list[str]:
    """Up to ``most`` content words of ``reference`` that ``hypothesis`` lacks, in reference order."""
    chosen: list[str] = []
    for word in words(reference):
        if len(chosen) >= most:
            break
        if len(word) < MIN_LENGTH or word.lower() in STOPWORDS or word in chosen:
            continue
        if contains_word(hypothesis, word):
            continue
        chosen.append(word)
    return chosen


def _read_lines(path: str) -> list[str]:
    with open(path, encoding="utf-8") as handle:
        return [line.rstrip("\n") for line in handle]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", required=True, help="source sentences, one a line")
    parser.add_argument("--reference", required=True, help="reference translations, one a line")
    parser.add_argument("--hypotheses", required=True, help="unconstrained outputs, one a line")
    parser.add_argument("--most", type=int, default=2, help="constraints a line at most (2)")
    parser.add_argument("--out", required=True, help="source<TAB>constraint... lines to write")
    args = parser.parse_args(argv)

    sources = _read_lines(args.source)
    references = _read_lines(args.reference)
    hypotheses = _read_lines(args.hypotheses)
    if not len(sources) == len(references) == len(hypotheses):
        parser.error(
            f"line counts differ: {len(sources)} sources, {len(references)} references, "
            f"{len(hypotheses)} hypotheses"
        )
    lines_with = total = 0
    with open(args.out, "w", encoding="utf-8") as out:
        for source, reference, hypothesis in zip(sources, references, hypotheses, strict=True):
            if "\t" in source:
                parser.error(f"a source line holds a TAB: {source!r}")
            constraints = pick_constraints(reference, hypothesis, args.most)
            lines_with += bool(constraints)
            total += len(constraints)
            out.write("\t".join([source, *constraints]) + "\n")
    print(
        f"{args.out}: {len(sources)} lines, {lines_with} with constraints, {total} constraints",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
