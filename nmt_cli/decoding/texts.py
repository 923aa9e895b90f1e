"""Texts rather than sentences: what a line's translation is made of when the line holds several
sentences, and the types of a translation's results. No model here: the translating is passed in."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from nmt_cli.data.sentences import Split, split_sentences
from nmt_cli.decoding.alignment import Alignment
from nmt_cli.decoding.settings import DecodeSettings

Hypotheses = list[tuple[str, float]]
"""A line's (text, score) hypotheses, best first; the score is the length-normalised log-probability."""


@dataclass(frozen=True)
class Result:
    """One line's hypotheses and, where asked, the word alignment of the best one."""

    hyps: Hypotheses
    alignment: Alignment | None = None


def text_lines(lines: object, method: str) -> list[str]:
    """`lines` as a list of str, or a TypeError naming what is wrong: a single string would be
    translated character by character, and a None or a number has no text."""
    if isinstance(lines, str | bytes):
        raise TypeError(
            f"{method}(lines): a list of strings, not one {type(lines).__name__}; write {method}([text])"
        )
    try:
        items = list(lines)  # type: ignore[call-overload]
    except TypeError:
        raise TypeError(f"{method}(lines): a list of strings, not {type(lines).__name__}") from None
    for i, line in enumerate(items):
        if not isinstance(line, str):
            raise TypeError(f"{method}(lines): lines[{i}] is {type(line).__name__}, not str")
    return items


def translate_by_sentence(
    translate: Callable[[list[str], DecodeSettings], list[Result]],
    texts: Sequence[str],
    settings: DecodeSettings,
    language: str,
) -> list[Result]:
    """Each text cut into sentences by `language`'s rules, all sentences translated in one call of
    `translate`, and each text's translations joined with the whitespace between its sentences
    (what surrounds the text is left out, as a line translated whole has none)."""
    splits = split_texts(texts, language)
    return join_results(splits, translate(sentences_of(splits), settings), settings)


def split_texts(texts: Sequence[str], language: str) -> list[Split]:
    """Each text's sentences, by `language`'s rules, without the whitespace around the text."""
    return [_inner(split_sentences(text, language)) for text in texts]


def sentences_of(splits: list[Split]) -> list[str]:
    return [sentence for split in splits for sentence in split.sentences]


def join_results(splits: list[Split], flat: list[Result], settings: DecodeSettings) -> list[Result]:
    """The results of `sentences_of(splits)`, joined back into one result a text."""
    results, at = [], 0
    for split in splits:
        count = len(split.sentences)
        results.append(joined(split, flat[at : at + count], settings))
        at += count
    return results


def _inner(split: Split) -> Split:
    """`split` without the whitespace before its first sentence and after its last."""
    return Split("", split.sentences, (*split.gaps[:-1], "") if split.gaps else ())


def joined(split: Split, results: list[Result], settings: DecodeSettings) -> Result:
    """The results of a text's sentences as one: the i-th hypothesis of each joined (scored by
    their mean), alignments with word numbers shifted past the sentences before."""
    nbest = settings.nbest
    if not results:
        return Result(padded([(split.join([]), 0.0)], nbest), () if settings.alignments else None)
    hyps = [
        (split.join([r.hyps[k][0] for r in results]), sum(r.hyps[k][1] for r in results) / len(results))
        for k in range(nbest)
    ]
    if not settings.alignments:
        return Result(hyps)
    links: list[tuple[int, int]] = []
    src_at = tgt_at = 0
    for sentence, r in zip(split.sentences, results, strict=True):
        links += [(i + src_at, j + tgt_at) for i, j in r.alignment or ()]
        src_at, tgt_at = src_at + len(sentence.split()), tgt_at + len(r.hyps[0][0].split())
    return Result(hyps, tuple(links))


def padded(hyps: Hypotheses, nbest: int) -> Hypotheses:
    """Exactly `nbest` hypotheses: where the search found fewer distinct ones (an empty line, tight
    length limits), the rest are empty with score -inf."""
    return hyps + [("", float("-inf"))] * (nbest - len(hyps))
