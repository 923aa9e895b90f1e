"""Alignment-guided placement of glossary terms in the constrained search (`decoding.constraints`):
a term goes where the model translates its source term, in place of the model's own word, not
beside it ("Velo fährt ein Mann Fahrrad.", "Zwei Pulverschnee spielen im Schnee.").

A glossary term knows the source pieces of its source term, its anchors. At each step the search
reads, for each hypothesis, the source position the model attends to most while predicting the
next piece (the cross-attention that word alignment reads, `decoding.alignment`). Then:

- A term may begin where that attention is on its anchors, or where the model itself ranks the
  term's first piece among its likeliest (`LIKELY`: an inflection of its own word, say, whose
  place the model knows better than its attention tells).
- Where a term begins on its anchors, the piece the model liked best there, if it starts a word,
  is displaced: the hypothesis never writes it afterwards ("Velo ... Fahrrad").
- A hypothesis that attends a placed term's source again, past the piece right after the term,
  does not write its likeliest word there: that would be the model's own word for the source
  term, beside the term ("Velo ... auf ihrem Fahrrad").
- A hypothesis that would end (EOS its likeliest piece) with a term unmet has written its own
  word for the source term and let the term's place go by: it ends there, unfinished, instead of
  wandering on until its attention met the source term again. A sentence with a translation and
  no hypothesis left that holds its terms is done (`ConstrainedBeam.settled`); one left without
  any translation is searched again with the terms free to go anywhere (`search`).

A phrase without anchors (a line's own constraint) may begin anywhere and displaces nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from nmt_cli.decoding.ranking import top_k
from nmt_cli.special_ids import EOS_ID, PAD_ID

LIKELY = 3
LIKELY_MARGIN = 3.0
"""A term may also begin where its first piece is among the model's `LIKELY` likeliest pieces and
at least exp(-LIKELY_MARGIN), a twentieth, as likely as the likeliest. On Multi30k
(bench/glossary_placement.py, docs/benchmarks.md) 2 pieces lost 1.0 BLEU on the lines with a
term against 3, below the terms as plain constraints; 8 gained 0.2 BLEU but placed fewer of the
terms the model does not know (89.9% against 91.3%). Without the margin a model sure of its own
word (the tests' copy model) put its third choice, a term it gave no chance, in another word's
place."""

Anchors = list[tuple[int, ...]]
"""One sentence's anchors: for each phrase, the source positions whose attention lets it begin;
none: anywhere."""


def anchor_mask(anchors: list[Anchors], c: int) -> Tensor:
    """(N, C, S + 1): True at the source positions where each phrase may begin, the last column
    standing for every position from S on; a phrase without anchors is True everywhere."""
    s = max([p + 1 for sentence in anchors for at in sentence for p in at] + [0])
    mask = torch.ones((len(anchors), c, s + 1), dtype=torch.bool)
    for i, sentence in enumerate(anchors):
        for j, at in enumerate(sentence):
            if at:
                mask[i, j] = False
                mask[i, j, list(at)] = True
    return mask


@dataclass(frozen=True)
class Placement:
    """What placement says of B candidates at one step, (B, C) each: whether each phrase may begin
    now, and the piece that beginning it now displaces (PAD: none)."""

    may_start: Tensor
    displacing: Tensor

    def select(self, rows: Tensor) -> Placement:
        return Placement(self.may_start[rows], self.displacing[rows])


def _on_source(anchors: Tensor, attended: Tensor) -> tuple[Tensor, Tensor]:
    """(A * R, C) whether each hypothesis attends each phrase's anchors now (True for a phrase
    without anchors), and whether each phrase has anchors; `anchors` (A, C, S + 1) of the A
    sentences, `attended` (A * R,) of their hypotheses."""
    rows = anchors.repeat_interleave(attended.shape[0] // anchors.shape[0], dim=0)  # (A * R, C, S + 1)
    column = attended.clamp(max=rows.shape[2] - 1).view(-1, 1, 1).expand(-1, rows.shape[1], 1)
    return rows.gather(2, column)[..., 0], ~rows[:, :, -1]


def placement(
    anchors: Tensor, word_starts: Tensor | None, attended: Tensor, log_probs: Tensor, first: Tensor
) -> Placement:
    """The placement of A * R hypotheses (R a sentence) at a step. `anchors` (A, C, S + 1) as
    `anchor_mask` makes them; `word_starts` (V,): the pieces that a term displaces (None: none);
    `attended` (A * R,): the source position each attends to most now; `log_probs` (A * R, V):
    their scores of the next piece; `first` (A * R, C): each phrase's first piece."""
    here, anchored = _on_source(anchors, attended)
    top, at = top_k(log_probs, LIKELY)
    best = at[:, :1]  # (A * R, 1), the likeliest
    score = log_probs.gather(1, first)
    likely = (score >= top[:, -1:]) & (score >= top[:, :1] - LIKELY_MARGIN)
    displaces = anchored & here & (best != first)
    displaces &= word_starts[best] if word_starts is not None else torch.zeros_like(displaces)
    return Placement(here | likely, torch.where(displaces, best, PAD_ID))


def gave_up(anchors: Tensor, met: Tensor, lengths: Tensor, best: Tensor) -> Tensor:
    """(A * R,) the hypotheses that would end now (EOS their likeliest piece, `best` (A * R,)) with
    a phrase that has anchors unmet; `anchors` (A, C, S + 1) of their sentences, `met` and
    `lengths` (A * R, C)."""
    anchored = ~anchors[:, :, -1].repeat_interleave(met.shape[0] // anchors.shape[0], dim=0)
    waiting = (anchored & ~met & (lengths > 0)).any(dim=1)
    return waiting & (best == EOS_ID)


def own_word_again(
    anchors: Tensor, placed: Tensor, attended: Tensor, best: Tensor, word_starts: Tensor
) -> Tensor:
    """(A * R,) for each hypothesis that attends, now, the source of a term it has `placed` (A * R,
    C), its likeliest piece (`best`) where that starts a word (the model's own word for the
    source term, which would stand beside the term); PAD for the others."""
    here, anchored = _on_source(anchors, attended)
    again = (here & anchored & placed).any(dim=1) & word_starts[best]
    return torch.where(again, best, PAD_ID)
