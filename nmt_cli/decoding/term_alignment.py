"""The word alignment of a glossary term's translation, from the term itself rather than from
attention: the search wrote the term's pieces because the glossary said so, and attention while
it did may rest anywhere. The words of each target term are linked to the words of the source
term it stands for, in order: the first to the first, the last to the last, a word shared where
the two sides have different numbers of words; the source term's words keep no other link. So
an inline HTML element around part of a term (`<b>new</b> <i>York</i>`) lands on the matching
part of its translation, and `--alignments` shows the term where it is."""

from __future__ import annotations

import re
import unicodedata

from sentencepiece import SentencePieceProcessor

from nmt_cli.decoding.alignment import Alignment, word_of_pieces
from nmt_cli.decoding.terms import Constrained


def terms_aligned(
    line: str | Constrained, tokens: list[int], alignment: Alignment, tgt: SentencePieceProcessor
) -> Alignment:
    """`alignment` (source words of the line, target words of the translation `tokens`) with the
    glossary terms of `line` linked to their source terms. A term's pieces are found in the order
    its source terms stand in the line, the n-th occurrence standing for the n-th source term."""
    spans_of_phrases = getattr(line, "spans", ())  # where each glossary term's source term stands
    if not isinstance(line, Constrained) or not any(spans_of_phrases):
        return alignment
    text = unicodedata.normalize("NFC", line.text)  # what the spans count characters of
    source_words = [found.span() for found in re.finditer(r"\S+", text)]
    target_word = word_of_pieces([tgt.id_to_piece(token) for token in tokens])
    links = set(alignment)
    for phrase, spans in zip(line.phrases, spans_of_phrases, strict=False):
        for span, at in zip(spans, _occurrences(tokens, list(phrase)), strict=False):
            sources = _words_of(source_words, span)
            targets = sorted(set(target_word[at : at + len(phrase)]))
            if not sources or not targets:
                continue
            links = {(i, j) for i, j in links if i not in sources and j not in targets}
            links |= _in_order(sources, targets)
    return tuple(sorted(links))


def _occurrences(tokens: list[int], phrase: list[int]) -> list[int]:
    """Where `phrase` starts in `tokens`, each occurrence once (none overlapping)."""
    found, at = [], 0
    while phrase and at + len(phrase) <= len(tokens):
        if tokens[at : at + len(phrase)] == phrase:
            found.append(at)
            at += len(phrase)
        else:
            at += 1
    return found


def _words_of(words: list[tuple[int, int]], span: tuple[int, int]) -> list[int]:
    """The words that the characters `span` touch."""
    start, end = span
    return [i for i, (a, b) in enumerate(words) if a < end and start < b]


def _in_order(sources: list[int], targets: list[int]) -> set[tuple[int, int]]:
    """Each source word to the target words at its relative place, and each target word to the
    source word at its relative place: every word has a link, none crossing another."""
    m, n = len(sources), len(targets)
    return {(sources[r], targets[r * n // m]) for r in range(m)} | {
        (sources[q * m // n], targets[q]) for q in range(n)
    }
