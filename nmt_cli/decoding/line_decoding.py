"""A Translator's lines on the model's side: the phrases each line's translation must contain, and
the lines decoded whole, in this process or in a decoding worker (`Translator.translate_results`).

A line's source pieces go through the search (`batches.translate_sentences`) and come back as
text with their scores, and with the word alignment of the best hypothesis where the settings ask;
a line without letters or digits is kept as it is.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol, cast

import numpy as np
import torch
from sentencepiece import SentencePieceProcessor

from nmt_cli.data.shortlist import Shortlist
from nmt_cli.data.text import has_letters_or_digits, one_line
from nmt_cli.data.tokenizer import MosesBpe
from nmt_cli.decoding import terms, texts
from nmt_cli.decoding.alignment import aligned_words
from nmt_cli.decoding.batches import translate_sentences
from nmt_cli.decoding.ensemble import Ensemble
from nmt_cli.decoding.search import Hypothesis
from nmt_cli.decoding.settings import DecodeSettings
from nmt_cli.decoding.term_alignment import terms_aligned
from nmt_cli.decoding.terms import Constrained, Vocabulary, constrained_lines, phrases_of, text_of, word_ends
from nmt_cli.decoding.texts import Result, padded
from nmt_cli.errors import SettingError


class Models(Protocol):
    """What decoding a line needs of the loaded models (a Translator has it all)."""

    ensemble: Ensemble
    src_spm: SentencePieceProcessor | MosesBpe
    tgt_spm: SentencePieceProcessor | MosesBpe
    device: torch.device
    shortlist: Shortlist | None

    def source_ids(self, line: str, count: bool = True) -> np.ndarray: ...


def with_phrases(
    translator: Models,
    lines: Sequence[str | Constrained],
    settings: DecodeSettings,
    given: Iterable[Sequence[str]] | None,
) -> list[str | Constrained]:
    """`lines` with the phrases their translations must contain, checked (`decoding.terms`):
    `given`, a list for each line, and the terms of `settings.glossary` each line matches."""
    if settings.sampling is not None:
        raise SettingError("sampling", settings.sampling.method, "draws freely; constraints need a search")
    cfg, longest = settings.search, translator.ensemble.max_positions - 1

    def room(line: str) -> int:
        return int(min(cfg.max_len_a * len(translator.source_ids(line, False)) + cfg.max_len_b, longest))

    return constrained_lines(lines, given, settings.glossary, Vocabulary.of(translator.tgt_spm, room))


def decode_lines(
    translator: Models, lines: Sequence[str | Constrained], settings: DecodeSettings
) -> list[Result]:
    """Each line translated whole with `translator`'s models, with its phrases where it has any;
    the lines it cuts to the model's positions are counted in `translator.truncated`."""
    ids = [translator.source_ids(text_of(line)) for line in lines]
    todo = [i for i, x in enumerate(ids) if len(x) and has_letters_or_digits(text_of(lines[i]))]
    phrases = [phrases_of(lines[i]) for i in todo]
    results = [texts.kept_as_is(text_of(line), settings) for line in lines]
    src_spm, tgt_spm = translator.src_spm, translator.tgt_spm
    size = translator.ensemble.models[0].cfg.tgt_vocab_size
    anchors = [terms.anchors_of(lines[i], src_spm.encode, len(ids[i])) for i in todo]
    hyps = translate_sentences(
        translator.ensemble,
        [ids[i] for i in todo],
        settings,
        translator.device,
        shortlist=translator.shortlist if settings.search.shortlist else None,
        constraints=phrases if any(phrases) else None,
        word_ends=word_ends(tgt_spm, size) if any(phrases) else None,
        anchors=anchors if any(map(any, anchors)) else None,
        word_starts=terms.word_starts(tgt_spm, size) if any(phrases) else None,
    )
    for i, sentence in zip(todo, hyps, strict=True):
        found = [(one_line(tgt_spm.decode(h.tokens)), h.score) for h in sentence]
        results[i] = Result(padded(found or [("", 0.0)], settings.nbest))
    if settings.alignments:
        spm = cast(SentencePieceProcessor, src_spm), cast(SentencePieceProcessor, tgt_spm)
        for i, sentence in zip(todo, hyps, strict=True):
            best = sentence[0] if sentence else Hypothesis([], 0.0, [])
            links = aligned_words(best.links, ids[i], best.tokens, *spm)
            links = texts.in_words_of(text_of(lines[i]), links)
            results[i] = Result(results[i].hyps, terms_aligned(lines[i], best.tokens, links, spm[1]))
    return results
