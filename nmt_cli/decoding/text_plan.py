"""One text pipeline for the library (`decoding.engine`), `nmt translate` (through the engine) and
`nmt serve` (`serving.translating`): how texts become the units a model decodes (HTML fragments
read into their blocks' texts, texts cut into sentences, each unit's phrases from the call's
constraints and glossary), and how the units' results become the texts' answers again (sentences
joined with the whitespace between them, the HTML rebuilt around its translations).

Planning and rebuilding are plain functions of the texts: the decoding between them is the
caller's, in this process (the engine) or through a server's queue. No model here: the phrases
are checked by the function passed in (`Engine.constrained`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from nmt_cli.data.sentences import Split, split_sentences
from nmt_cli.decoding.settings import DecodeSettings
from nmt_cli.decoding.terms import Constrained
from nmt_cli.decoding.texts import Result, padded
from nmt_cli.errors import optional_import_failure

if TYPE_CHECKING:  # lxml is an optional extra: `decoding.markup` is imported when HTML comes
    from nmt_cli.decoding.markup import Parsed

Constrain = Callable[
    [Sequence[str | Constrained], DecodeSettings, Iterable[Sequence[str]] | None], list[str | Constrained]
]
"""Units with the phrases their translations must contain, checked (`Engine.constrained`)."""


@dataclass(frozen=True)
class Html:
    """HTML fragments as parsed, with the texts to translate read from them (one a block: a page
    of many blocks takes a while, so a server reads them once, off its event loop)."""

    parsed: Parsed
    texts: list[str]


def parse_html(fragments: list[str], documents: bool = False) -> Html:
    """The HTML fragments parsed (each a whole document with `documents`, else those that open as
    one); MarkupError (an InputError) for one lxml cannot read, an ImportError naming the extra
    to install without lxml."""
    try:
        from nmt_cli.decoding.markup import Parsed
    except ImportError as err:
        raise optional_import_failure(err, 'HTML needs lxml: pip install "nmt-cli[html]"', "lxml") from None
    parsed = Parsed.of(fragments, documents)
    return Html(parsed, parsed.texts)


@dataclass(frozen=True)
class TextPlan:
    """What to decode for a call's texts (`units`, with `settings`), and how the units' results
    become the texts' answers (`answers`)."""

    units: list[str | Constrained]
    settings: DecodeSettings
    """The call's settings; a glossary already applied to the units is left out (no need to ship it)."""
    splits: list[Split] | None = None
    """Each text's sentences, where the texts were cut."""
    html: Html | None = None
    """The HTML fragments the texts were read from, if any."""

    @property
    def rebuilds(self) -> bool:
        """Whether the answers are more than the units' results (sentences to join, HTML to rebuild)."""
        return self.splits is not None or self.html is not None

    def answers(self, results: list[Result]) -> list[Result]:
        """The units' `results` (in order) as the texts': the sentences' results joined into their
        texts' (`joined`), and the HTML rebuilt around them (one hypothesis, scored 0)."""
        if self.splits is not None:
            results = join_results(self.splits, results, self.settings)
        if self.html is None:
            return results
        rebuilt = self.html.parsed.rebuild([(r.hyps[0][0], r.alignment or ()) for r in results])
        return [Result([(text, 0.0)]) for text in rebuilt]


def plan_texts(
    texts: Sequence[str | Constrained],
    settings: DecodeSettings,
    constrain: Constrain,
    language: str,
    split: bool = True,
    constraints: Iterable[Sequence[str]] | None = None,
    html: Html | None = None,
) -> TextPlan:
    """How `texts` (`html.texts` where they come from HTML) are decoded: cut into sentences by
    `language`'s rules (where `split`, always for HTML), unless they have `constraints` of their
    own (a phrase belongs to the text, not to one of its sentences); each unit with its phrases
    (`constraints`, a list for each text, and the glossary's terms it matches) where there are
    any. A phrase that cannot be met raises what `constrain` raises (`ConstraintError`). Units
    that have their phrases already (`Constrained`) are taken whole, not cut."""
    cut = (split or html is not None) and constraints is None
    # Constrained units come from Engine.translate_results, which never cuts.
    splits = split_texts(cast(Sequence[str], texts), language) if cut else None
    units: list[str | Constrained] = list(sentences_of(splits) if splits else texts)
    if constraints is not None or settings.glossary is not None:
        units = constrain(units, settings, constraints)
        settings = dataclasses.replace(settings, glossary=None)  # applied: no need to ship it
    return TextPlan(units, settings, splits, html)


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
