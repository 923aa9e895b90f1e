"""Text with several sentences, cut into sentences and put back together around their translations.

A model trained on one sentence per line (Multi30k, WMT) translates a paragraph given as one line
badly: it tends to stop after the first sentence or to merge them. sentencex (Wikimedia's
segmenter, rules per language with fallbacks between related languages) finds the boundaries;
the whitespace between sentences is kept as it was, so that joining the translations with it
gives the paragraph's layout back.
"""

from __future__ import annotations

from dataclasses import dataclass

from sentencex import segment


@dataclass(frozen=True)
class Split:
    """`text` = lead + sentences[0] + gaps[0] + sentences[1] + gaps[1] + ...: each sentence
    stripped, `gaps[i]` the whitespace after sentence i."""

    lead: str
    sentences: tuple[str, ...]
    gaps: tuple[str, ...]

    def join(self, translations: list[str]) -> str:
        """The translations of `sentences`, in their places."""
        return self.lead + "".join(t + gap for t, gap in zip(translations, self.gaps, strict=True))


def split_sentences(text: str, language: str) -> Split:
    """`text` cut at its sentence boundaries by the rules of `language` (an ISO 639 code; an
    unknown one gets sentencex's fallback rules). Blank text gives no sentence."""
    stripped = text.lstrip()
    lead = text[: len(text) - len(stripped)]
    sentences: list[str] = []
    gaps: list[str] = []
    # The segmenter takes UTF-8 only: a lone surrogate (possible in a Python str) is segmented as
    # "?", one character for one, and the parts are cut from the text itself.
    safe = stripped.encode("utf-8", "replace").decode("utf-8")
    at = 0
    for safe_part in segment(language, safe):
        part, at = stripped[at : at + len(safe_part)], at + len(safe_part)
        core = part.rstrip()
        if not core:  # whitespace the segmenter gave on its own: it belongs to the gap before
            if gaps:
                gaps[-1] += part
            continue
        sentences.append(core.lstrip())
        if len(core.lstrip()) < len(core) and gaps:  # leading whitespace: the previous gap's
            gaps[-1] += core[: len(core) - len(core.lstrip())]
        gaps.append(part[len(core) :])
    split = Split(lead, tuple(sentences), tuple(gaps))
    if split.join(list(split.sentences)) != text:  # a segmenter that altered the text: keep it whole
        core = stripped.rstrip()
        return Split(lead, (core,), (stripped[len(core) :],))
    return split
