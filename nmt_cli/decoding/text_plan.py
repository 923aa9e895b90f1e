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

from nmt_cli.data.sentences import Split
from nmt_cli.decoding.settings import DecodeSettings
from nmt_cli.decoding.terms import Constrained
from nmt_cli.decoding.texts import Result, join_results, sentences_of, split_texts
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
        texts' (`texts.joined`), and the HTML rebuilt around them (one hypothesis, scored 0)."""
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
