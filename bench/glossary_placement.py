"""Glossary terms in the model's own word's place, on Multi30k (test_2016_flickr, En-De): whether
a forced term replaces the word the model would have written for its source term, or lands beside
it ("Velo fährt ein Mann Fahrrad.").

- The dictionary, mined from train.en/train.de alone: for each German content word (alphabetic, as
  `constraint_sets.words` cuts them, of 4 letters or more, not a function word of
  `constraint_sets.STOPWORDS`) the English word (lowercased) that co-occurs with it in the
  most sentence pairs relative to both counts (the Dice coefficient, at least 0.1 over at least 3
  pairs). The German words whose best English word is `e`, and those whose Dice with `e` is 0.3
  or more, are `e`'s translations: "Fahrrad" (0.50) for "bike" though its best English word is
  "bicycle", not "fährt" (0.24; its best is "riding").
- The set: a test line counts when one of its English content words `e` (once in the line, not a
  function word) has a translation `r` in the reference (once, a content word) that the
  unconstrained beam-4 translation lacks, while that translation holds another translation `o` of
  `e` once (the model's own word). The glossary of the line is `e<TAB>r`: a term the model would
  not have written, where it wrote `o`. The first such `e` of the line is taken.
- Each line is translated three ways at beam 4: unconstrained; with `r` as a plain constraint of
  the line (`constraints=`, which may go anywhere); with the glossary `e -> r` (`glossary=`).
- In place: `r` is in the output, and the word before it or the word after it (a sentence start
  or end counts as a word) is the one before or after `o` in the unconstrained output (where the
  model had its own word), or the one before or after `r` in the reference (where a translator
  put it), compared lowercased; both are reported apart too. Duplicate: `o` is in the output
  too. Placed: in place and no duplicate.
- BLEU of each way on all 1,000 lines (the lines outside the set keep the unconstrained
  translation) and on the set alone; sentences a second of each way on the set (median of 3
  runs, in the same process).
- Terms foreign to the model, as a user's glossary has them: `bike -> Velo`, `snow ->
  Pulverschnee` and `dog -> Vierbeiner`, on every test line that holds the source word once and
  whose unconstrained translation holds one of its dictionary translations once; judged as above
  (no BLEU: no reference has these words).

    .venv/bin/python bench/glossary_placement.py --model avg.pt [--data ../shared/data/multi30k]
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import re
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import sacrebleu
from common import DEFAULT_DATA, THREADS, emit
from constraint_sets import MIN_LENGTH, STOPWORDS, words

from nmt_cli import Translator
from nmt_cli.data.glossary import Glossary
from nmt_cli.device import configure_cpu
from nmt_cli.user_settings import DecodeOverrides

ENGLISH_STOPWORDS = frozenset(
    """a an the and or of in on at to for from with by into onto over under near while is are was
    be been being his her its their there this that these those some two three one other another
    each while who which what as it they he she them up down out off""".split()
)
_TOKEN = re.compile(r"\w+(?:-\w+)*|[^\w\s]")
STRONG = 0.3
"""A Dice coefficient that makes a German word a translation of an English word whatever else."""
EDGE = "\n"
"""What a sentence start or end counts as, beside a word."""


@dataclasses.dataclass(frozen=True)
class Case:
    """One test line of the set: its source word, the reference's word forced for it, and the
    model's own word for it in the unconstrained translation."""

    line: int
    source_word: str
    term: str
    own: str


def lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def content(german: str) -> bool:
    """Whether a German word may be a term: not a function word ("Der" is no translation of "dog")."""
    return len(german) >= MIN_LENGTH and german.lower() not in STOPWORDS


def dictionary(english: list[str], german: list[str]) -> dict[str, set[str]]:
    """English word (lowercased) -> the German words whose best English word by Dice it is."""
    english_count: collections.Counter[str] = collections.Counter()
    german_count: collections.Counter[str] = collections.Counter()
    joint: collections.Counter[tuple[str, str]] = collections.Counter()
    for en, de in zip(english, german, strict=True):
        en_words, de_words = {w.lower() for w in words(en)}, {w for w in words(de) if content(w)}
        english_count.update(en_words)
        german_count.update(de_words)
        joint.update((e, g) for e in en_words for g in de_words)
    best: dict[str, tuple[float, str]] = {}
    translations: dict[str, set[str]] = collections.defaultdict(set)
    for (e, g), n in joint.items():
        dice = 2 * n / (english_count[e] + german_count[g])
        if n >= 3 and dice >= 0.1 and dice > best.get(g, (0.0, ""))[0]:
            best[g] = (dice, e)
        if n >= 3 and dice >= STRONG:
            translations[e].add(g)
    for g, (_, e) in best.items():
        translations[e].add(g)
    return translations


def tokens(text: str) -> list[str]:
    return _TOKEN.findall(text)


def once(word: str, text_tokens: list[str]) -> bool:
    return text_tokens.count(word) == 1


def pick_case(
    i: int, source: str, reference: str, plain: str, translations: dict[str, set[str]]
) -> Case | None:
    """The line's case (module docstring), None if it has none."""
    src, ref, out = tokens(source), tokens(reference), tokens(plain)
    for e in src:
        if e.lower() in ENGLISH_STOPWORDS or len(e) < 3 or not e.isalpha() or not once(e, src):
            continue
        family = translations.get(e.lower(), set())
        terms = [r for r in ref if r in family and once(r, ref) and r not in out]
        owns = [o for o in out if o in family and once(o, out)]
        if terms and owns:
            return Case(i, e, terms[0], owns[0])
    return None


FOREIGN = {"bike": "Velo", "snow": "Pulverschnee", "dog": "Vierbeiner"}


def foreign_cases(sources: list[str], plain: list[str], translations: dict[str, set[str]]) -> list[Case]:
    """The lines that hold one of `FOREIGN`'s source words once, and one of its translations once
    in their unconstrained translation."""
    cases = []
    for i, (source, out) in enumerate(zip(sources, plain, strict=True)):
        src, words_out = tokens(source), tokens(out)
        for e, term in FOREIGN.items():
            owns = [o for o in words_out if o in translations.get(e, set()) and once(o, words_out)]
            if once(e, src) and owns and term not in words_out:
                cases.append(Case(i, e, term, owns[0]))
                break
    return cases


def neighbours(text_tokens: list[str], at: int) -> tuple[str, str]:
    before = text_tokens[at - 1].lower() if at > 0 else EDGE
    after = text_tokens[at + 1].lower() if at + 1 < len(text_tokens) else EDGE
    return before, after


def judged(case: Case, plain: str, output: str, reference: str | None) -> dict[str, bool]:
    """Whether the term is met, in place (beside the neighbours of the model's own word in the
    unconstrained translation, or of the term in the reference), and beside a duplicate of the
    model's own word."""
    out, before = tokens(output), tokens(plain)
    met = case.term in out
    now: tuple[str | None, str | None] = neighbours(out, out.index(case.term)) if met else (None, None)
    was = neighbours(before, before.index(case.own))
    as_model = now[0] == was[0] or now[1] == was[1]
    ref = tokens(reference) if reference is not None else []
    there: tuple[str | None, str | None] = (None, None)
    if case.term in ref:
        there = neighbours(ref, ref.index(case.term))
    as_reference = met and (now[0] == there[0] or now[1] == there[1])
    in_place = as_model or as_reference
    duplicate = case.own in out
    return {
        "met": met,
        "in_place_as_model": as_model,
        "in_place_as_reference": as_reference,
        "in_place": in_place,
        "duplicate": duplicate,
        "placed": in_place and not duplicate,
    }


def bleu(outputs: list[str], references: list[str]) -> float:
    return round(sacrebleu.corpus_bleu(outputs, [references]).score, 2)


def with_glossary(translator: Translator, sources: list[str], cases: list[Case]) -> list[str]:
    """Each case's line translated with its own one-entry glossary, all in one batched call."""
    settings = translator.settings(DecodeOverrides(beam=4))
    units = []
    for case in cases:
        glossary = dataclasses.replace(settings, glossary=Glossary.of({case.source_word: case.term}))
        units.extend(translator.constrained([sources[case.line]], glossary, None))
    return [r.hyps[0][0] for r in translator.translate_results(units, settings)]


def timed(call: Callable[[], list[str]], runs: int = 3) -> tuple[list[str], float]:
    """The last call's result and the median seconds of `runs` calls."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        out = call()
        times.append(time.perf_counter() - start)
    return out, statistics.median(times)


Outputs = dict[str, tuple[list[str], float]]
"""Each way's translations of the cases and its sentences a second."""


def ways(translator: Translator, sources: list[str], cases: list[Case]) -> Outputs:
    """The cases translated with their terms as constraints and as glossary entries."""
    chosen, constraints = [sources[c.line] for c in cases], [[c.term] for c in cases]
    anywhere, anywhere_s = timed(
        lambda: translator.translate(chosen, split_sentences=False, beam=4, constraints=constraints)
    )
    placed, placed_s = timed(lambda: with_glossary(translator, sources, cases))
    return {
        "constraint": (anywhere, round(len(cases) / anywhere_s, 1)),
        "glossary": (placed, round(len(cases) / placed_s, 1)),
    }


def measured(outputs: Outputs, cases: list[Case], plain: list[str], references: list[str] | None) -> dict:
    """Each way's shares of `judged`, its speed, and (with `references`) its BLEU."""
    result = {}
    for way, (out, per_s) in outputs.items():
        judgements = [
            judged(c, plain[c.line], line, references[c.line] if references is not None else None)
            for c, line in zip(cases, out, strict=True)
        ]
        shares = {key: round(sum(j[key] for j in judgements) / len(cases), 4) for key in judgements[0]}
        result[way] = {**shares, "sentences_per_s": per_s}
        if references is not None:
            whole = list(plain)
            for case, line in zip(cases, out, strict=True):
                whole[case.line] = line
            subset = [references[c.line] for c in cases]
            result[way].update(bleu_all=bleu(whole, references), bleu_set=bleu(out, subset))
    return result


def examples(sources: list[str], plain: list[str], cases: list[Case], outputs: Outputs, n: int) -> list[dict]:
    return [
        {"source": sources[case.line], "term": f"{case.source_word} -> {case.term}", "own": case.own,
         "unconstrained": plain[case.line], **{way: out[i] for way, (out, _) in outputs.items()}}
        for i, case in enumerate(cases[:n])
    ]  # fmt: skip


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--model", type=Path, required=True, help="a Multi30k En-De checkpoint")
    parser.add_argument("--examples", type=int, default=5, help="cases shown with their outputs")
    args = parser.parse_args(argv)
    configure_cpu(THREADS)
    start = time.perf_counter()
    translations = dictionary(lines(args.data / "train.en"), lines(args.data / "train.de"))
    dictionary_s = time.perf_counter() - start
    translator = Translator.load(args.model, device="cpu", precision="fp32")
    sources = lines(args.data / "test_2016_flickr.en")
    references = lines(args.data / "test_2016_flickr.de")
    plain = translator.translate(sources, split_sentences=False, beam=4)
    lines_of = zip(sources, references, plain, strict=True)
    found = (pick_case(i, s, r, p, translations) for i, (s, r, p) in enumerate(lines_of))
    cases = [case for case in found if case is not None]
    outputs = ways(translator, sources, cases)
    foreign = foreign_cases(sources, plain, translations)
    foreign_outputs = ways(translator, sources, foreign)
    result: dict = {
        "model": str(args.model),
        "beam": 4,
        "lines": len(sources),
        "dictionary_entries": sum(map(len, translations.values())),
        "dictionary_s": round(dictionary_s, 1),
        "cases": len(cases),
        "bleu_all_unconstrained": bleu(plain, references),
        "bleu_set_unconstrained": bleu([plain[c.line] for c in cases], [references[c.line] for c in cases]),
        **measured(outputs, cases, plain, references),
        "examples": examples(sources, plain, cases, outputs, args.examples),
        "foreign": {
            "glossary": FOREIGN,
            "cases": len(foreign),
            **measured(foreign_outputs, foreign, plain, None),
            "examples": examples(sources, plain, foreign, foreign_outputs, args.examples),
        },
    }
    emit(result)
    return result


if __name__ == "__main__":
    main()
