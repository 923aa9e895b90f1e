"""A translation's results (`Result`: hypotheses and word alignment), the checks of a call's lines,
and what a line's result is when it is not decoded. Texts of several sentences are cut and joined
back by the text pipeline (`decoding.text_plan`). No model here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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
