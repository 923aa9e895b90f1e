"""Texts rather than sentences: what a line's translation is made of when the line holds several
sentences, and the types of a translation's results. No model here: the translating is passed in."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from nmt_cli.data.sentences import Split, split_sentences
from nmt_cli.data.text import one_line, visible
from nmt_cli.decoding.alignment import Alignment
from nmt_cli.decoding.settings import DecodeSettings

Hypotheses = list[tuple[str, float]]
"""A line's (text, score) hypotheses, best first; the score is the length-normalised log-probability."""


@dataclass(frozen=True)
class Result:
    """One line's hypotheses and, where asked, the word alignment of the best one."""

    hyps: Hypotheses
    alignment: Alignment | None = None


def text_lines(
    lines: object, method: str, name: str = "lines", kinds: tuple[type, ...] = (str,)
) -> list[Any]:
    """`lines` (the argument `name` of `method`) as a list of str (or of `kinds`), or a TypeError
    naming what is wrong: a single string would be translated character by character, and a None
    or a number has no text."""
    wanted = " or ".join(kind.__name__ for kind in kinds)
    if isinstance(lines, str | bytes):
        raise TypeError(
            f"{method}({name}): a list of strings, not one {type(lines).__name__}; write {method}([text])"
        )
    try:
        items = list(lines)  # type: ignore[call-overload]
    except TypeError:
        raise TypeError(f"{method}({name}): a list of strings, not {type(lines).__name__}") from None
    for i, line in enumerate(items):
        if not isinstance(line, kinds):
            raise TypeError(f"{method}({name}): {name}[{i}] is {type(line).__name__}, not {wanted}")
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
    their mean), alignments with word numbers counted over the joined texts."""
    nbest = settings.nbest
    if not results:
        return Result(padded([(split.join([]), 0.0)], nbest), () if settings.alignments else None)
    hyps = [
        (split.join([r.hyps[k][0] for r in results]), sum(r.hyps[k][1] for r in results) / len(results))
        for k in range(nbest)
    ]
    if not settings.alignments:
        return Result(hyps)
    src_words = _renumbered(split, list(split.sentences))
    tgt_words = _renumbered(split, [r.hyps[0][0] for r in results])
    links: set[tuple[int, int]] = set()
    for src, tgt, r in zip(src_words, tgt_words, results, strict=True):
        if src and tgt:  # a sentence's links count words as its pieces do: kept inside its words
            links.update((src[min(i, len(src) - 1)], tgt[min(j, len(tgt) - 1)]) for i, j in r.alignment or ())
    return Result(hyps, tuple(sorted(links)))


def _renumbered(split: Split, parts: list[str]) -> list[list[int]]:
    """For each part, the number in `split.join(parts)` of each of its own words. Parts need not be
    separated by whitespace (the segmenter cuts "A dog.A cat." with no gap): a word that straddles
    two parts is one word of the joined text, and belongs to both."""
    text = split.join(parts)
    owner, word = [], -1  # the number of the word each character is in (-1: whitespace)
    for at, char in enumerate(text):
        if not char.isspace() and (at == 0 or text[at - 1].isspace()):
            word += 1
        owner.append(-1 if char.isspace() else word)
    numbers, at = [], len(split.lead)
    for part, gap in zip(parts, split.gaps, strict=True):
        starts = [i for i, c in enumerate(part) if not c.isspace() and (i == 0 or part[i - 1].isspace())]
        numbers.append([owner[at + i] for i in starts])
        at += len(part) + len(gap)
    return numbers


def kept_as_is(text: str, settings: DecodeSettings) -> Result:
    """The result of a line left untranslated, having no letter or digit: its visible characters
    ("" for a blank line, as for one of invisible characters only), each word aligned to itself. A
    model given "..." or a zero-width space would invent a sentence."""
    hyps = padded([(one_line(visible(text)).strip(), 0.0)], settings.nbest)
    return Result(
        hyps, tuple((i, k) for k, i in enumerate(_visible_words(text))) if settings.alignments else None
    )


def in_words_of(text: str, alignment: Alignment) -> Alignment:
    """`alignment`, whose source words are those of `visible(text)`, with its source words numbered
    over `text` itself, where a word of invisible characters only is a word too."""
    kept = _visible_words(text)
    if len(kept) == len(text.split()):
        return alignment
    return tuple((kept[i], j) for i, j in alignment if i < len(kept))


def _visible_words(text: str) -> list[int]:
    """The numbers of the words of `text` that `visible` leaves something of."""
    return [i for i, word in enumerate(text.split()) if visible(word)]


def padded(hyps: Hypotheses, nbest: int) -> Hypotheses:
    """Exactly `nbest` hypotheses: where the search found fewer distinct ones (an empty line, tight
    length limits), the rest are empty with score -inf."""
    return hyps + [("", float("-inf"))] * (nbest - len(hyps))
