"""How a beam search picks and keeps its candidates: the plain beam, and the beam that must meet
lexical constraints (`decoding.constraints`), behind one small protocol (`BeamStrategy`), so that
`search.beam_search` reads the same with or without constraints.

At every step the search asks its strategy to `restrict` the next pieces, to list the step's
`candidates` in the order the beam takes them, which ending ones `may_end`, which continuing ones
it `keep`s, which sentences are `settled`, and to `prune` the sentences that leave the batch. A
strategy holds whatever it tracks per hypothesis (a constrained beam: each one's progress through
its phrases); the search never reads it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import torch
from torch import Tensor

from nmt_cli.decoding.constraints import Chosen, ConstraintProgress, Constraints, candidates, restrict
from nmt_cli.decoding.placement import gave_up, own_word_again
from nmt_cli.decoding.ranking import top_k


class BeamStrategy(Protocol):
    """One beam search's choice of candidates. A (active sentences) and R (hypothesis rows per
    sentence: 1 at the first step, K after) as in `search.beam_search`; M candidates per sentence."""

    reads_attention: bool
    """Whether `restrict` reads each hypothesis's most attended source position (`Batch.attended`),
    which the decoder then keeps."""
    prunes_every_step: bool
    """Whether done sentences leave the batch at every step, whatever the device."""

    def restrict(
        self, log_probs: Tensor, active: Tensor, at_limit: Tensor, attended: Callable[[], Tensor | None]
    ) -> None:
        """Ban, in place, the pieces (A * R, V) a hypothesis may not produce next; `at_limit`
        (A * R,): the rows at their length limit."""

    def candidates(
        self, cand: Tensor, log_probs: Tensor, active: Tensor, k: int, width: int
    ) -> tuple[Tensor, Tensor, Tensor]:
        """The step's candidates, in the order the beam takes them: scores, the hypothesis (0..R-1)
        each continues and its piece, (A, M) each with M >= 2K. `cand` (A, R * width): every
        continuation's score; `log_probs` (A * R, width): the same row by row."""
        ...

    def may_end(self, ends: Tensor, finished: Tensor) -> Tensor:
        """(A, M): which of the candidates that would end now (`ends`) do; `finished` (A, K): the
        sentences' finished scores so far."""
        ...

    def keep(self, columns: Tensor) -> None:
        """The candidates that continue: `columns` (A, K) of the step's order."""

    def settled(self, active: Tensor, finished: Tensor) -> Tensor | bool:
        """(A,) the sentences done for the strategy's own reasons (False: none); `finished` (A,):
        how many hypotheses each has finished."""
        ...

    def prune(self, keep: Tensor, k: int) -> None:
        """Only the active sentences `keep` stay in the batch, each with its K hypotheses."""


class PlainBeam:
    """The usual beam: the 2K best continuations, any of them free to end."""

    reads_attention = False
    prunes_every_step = False

    def restrict(
        self, log_probs: Tensor, active: Tensor, at_limit: Tensor, attended: Callable[[], Tensor | None]
    ) -> None:
        pass

    def candidates(
        self, cand: Tensor, log_probs: Tensor, active: Tensor, k: int, width: int
    ) -> tuple[Tensor, Tensor, Tensor]:
        r = cand.shape[1] // width
        if r * width < 2 * k:  # a vocabulary smaller than 2K (tests): impossible candidates fill up
            cand = torch.cat([cand, cand.new_full((cand.shape[0], 2 * k - r * width), float("-inf"))], dim=1)
        top_scores, top_idx = top_k(cand, 2 * k)  # (A, 2K)
        return top_scores, (top_idx // width).clamp_(max=r - 1), top_idx % width

    def may_end(self, ends: Tensor, finished: Tensor) -> Tensor:
        return ends

    def keep(self, columns: Tensor) -> None:
        pass

    def settled(self, active: Tensor, finished: Tensor) -> Tensor | bool:
        return False

    def prune(self, keep: Tensor, k: int) -> None:
        pass


class ConstrainedBeam:
    """The beam that must meet lexical constraints (`decoding.constraints`): it holds the batch's
    phrases and each hypothesis's progress through them."""

    prunes_every_step = True

    def __init__(self, constraints: Constraints, n: int, device: torch.device) -> None:
        self.constraints = constraints
        self.progress = ConstraintProgress.start(n, constraints.ids.shape[1], device)
        self.chosen: Chosen | None = None
        self.attended: Tensor | None = None
        self.reads_attention = constraints.anchors is not None  # placement reads attention

    def restrict(
        self, log_probs: Tensor, active: Tensor, at_limit: Tensor, attended: Callable[[], Tensor | None]
    ) -> None:
        """`constraints.restrict`; where phrases have anchors, with `attended` (`Batch.attended`),
        each hypothesis's most attended source position, read for placement (`decoding.placement`):
        a hypothesis that gave up a term's place ends here, unfinished (wandering on until its
        attention met the source term again put the term in a sentence of its own; a sentence
        left with none is searched again, `batches.BatchSearch`), and one that attends a
        placed term's source again does not write the model's own word for it there."""
        r = log_probs.shape[0] // active.numel()
        lengths = self.constraints.lengths[active].repeat_interleave(r, dim=0)
        anchors = self.constraints.anchors
        self.attended = attended() if anchors is not None else None
        if anchors is not None and self.attended is not None:
            best = log_probs.argmax(dim=1)
            lost = gave_up(anchors[active], self.progress.met, lengths, best)
            log_probs.masked_fill_(lost.unsqueeze(1), float("-inf"))
            if self.constraints.word_starts is not None:
                # Right after a term the attention often still rests on its source, and the model's
                # likeliest piece is the sentence's next word: the rule waits a step.
                placed = self.progress.met & ~self.progress.ended.unsqueeze(1)
                own = own_word_again(
                    anchors[active], placed, self.attended, best, self.constraints.word_starts
                )
                log_probs.scatter_(1, own.unsqueeze(1), float("-inf"))  # PAD where none: already -inf
        restrict(log_probs, self.progress, lengths, at_limit, self.constraints.word_ends)

    def candidates(
        self, cand: Tensor, log_probs: Tensor, active: Tensor, k: int, width: int
    ) -> tuple[Tensor, Tensor, Tensor]:
        """`constraints.candidates`: in bank order."""
        mine = self.constraints.select(active)
        self.chosen = candidates(cand, log_probs, self.progress, mine, k, width, self.attended)
        return self.chosen.scores, self.chosen.beams, self.chosen.tokens

    def may_end(self, ends: Tensor, finished: Tensor) -> Tensor:
        """A candidate with a phrase unmet ends only at the length limit (`restrict` lets no other
        end), and there only if its sentence has nothing better: no finished hypothesis, and no
        candidate that met its phrases among those that end now."""
        assert self.chosen is not None
        met = self.chosen.all_met
        better = (finished.amax(dim=1) > float("-inf")) | (met & ends).any(dim=1)
        return ends & (met | ~better.unsqueeze(1))

    def keep(self, columns: Tensor) -> None:
        """The progress of the candidates that continue."""
        assert self.chosen is not None
        m = self.chosen.scores.shape[1]
        rows = (torch.arange(columns.shape[0], device=columns.device).unsqueeze(1) * m + columns).flatten()
        self.progress = self.chosen.progress.select(rows)

    def settled(self, active: Tensor, finished: Tensor) -> Tensor | bool:
        """(A,) the sentences with terms placed by their source (`decoding.placement`) that have a
        translation and no hypothesis left that holds their phrases: those left could only put a
        term out of its place. False without such terms."""
        anchors = self.constraints.anchors
        if anchors is None:
            return False
        lengths = self.constraints.lengths[active]
        rows = self.progress.met.shape[0] // active.numel()
        holding = self.progress.all_met(lengths.repeat_interleave(rows, dim=0)).view(-1, rows).any(dim=1)
        guided = (~anchors[active][:, :, -1] & (lengths > 0)).any(dim=1)
        return guided & (finished > 0) & ~holding

    def prune(self, keep: Tensor, k: int) -> None:
        """The progress of the hypotheses of the sentences that stay."""
        self.progress = self.progress.select(
            (keep.unsqueeze(1) * k + torch.arange(k, device=keep.device)).flatten()
        )


def beam_strategy(
    constraints: Constraints | None, vocab: Tensor | None, n: int, device: torch.device
) -> BeamStrategy:
    """The strategy for a batch of `n` sentences: constrained with `constraints` (their pieces as
    columns of `vocab`, the batch's shortlist vocabulary; None: the whole), plain without."""
    if constraints is None:
        return PlainBeam()
    return ConstrainedBeam(constraints.in_vocabulary(vocab), n, device)
