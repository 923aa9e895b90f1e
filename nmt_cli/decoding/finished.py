"""The finished hypotheses of a batched beam search: K slots per sentence, filled as candidates
end, with the two ways of filling them (first come with early stopping; the best K otherwise)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from nmt_cli.special_ids import EOS_ID, PAD_ID


@dataclass
class Candidates:
    """A step's 2K best continuations of each active sentence, best first: (A, 2K) each."""

    scores: Tensor
    beams: Tensor  # the hypothesis (0..R-1) each one continues
    tokens: Tensor
    ending: Tensor  # EOS ranked within the first K, with a finite score


@dataclass
class Finished:
    scores: Tensor  # (N, K) normalised by the length penalty; -inf in a free slot
    tokens: Tensor  # (N, K, max_steps), EOS included, PAD after it
    count: Tensor  # (N,) slots filled first come (early stopping)

    @classmethod
    def empty(cls, n: int, k: int, max_steps: int, device: torch.device) -> Finished:
        return cls(
            torch.full((n, k), float("-inf"), dtype=torch.float64, device=device),
            torch.full((n, k, max_steps), PAD_ID, dtype=torch.long, device=device),
            torch.zeros(n, dtype=torch.long, device=device),
        )

    def take_free_slots(self, c: Candidates, history: Tensor, active: Tensor, t: int, penalty: float) -> None:
        """Early stopping: the ending candidates take their sentence's free slots in rank order,
        scored over `penalty`; those beyond K are dropped."""
        k = self.scores.shape[1]
        slot = self.count[active].unsqueeze(1) + c.ending.long().cumsum(dim=1) - 1
        finish = c.ending & (slot < k)
        if bool(finish.any()):
            row, col = finish.nonzero(as_tuple=True)
            sent, s = active[row], slot[row, col]
            self.scores[sent, s] = c.scores[row, col].double() / penalty
            self.tokens[sent, s, :t] = history[row, c.beams[row, col]]
            self.tokens[sent, s, t] = EOS_ID
            self.count[active] += finish.sum(dim=1)

    def keep_best(self, scores: Tensor, tokens: Tensor, active: Tensor) -> None:
        """The K best of each active sentence's finished hypotheses and of its candidates
        (normalised `scores` (A, 2K), -inf for those that do not end; `tokens` (A, 2K, t)):
        transformers' bookkeeping, where a finished hypothesis is replaced by a better one that
        finishes later."""
        padded = tokens.new_full((*tokens.shape[:2], self.tokens.shape[2]), PAD_ID)
        padded[:, :, : tokens.shape[2]] = tokens
        merged_scores = torch.cat([self.scores[active], scores], dim=1)  # the old first, as transformers
        merged_tokens = torch.cat([self.tokens[active], padded], dim=1)
        best = merged_scores.topk(self.scores.shape[1], dim=1).indices
        self.scores[active] = merged_scores.gather(1, best)
        width = merged_tokens.shape[2]
        self.tokens[active] = merged_tokens.gather(1, best.unsqueeze(-1).expand(-1, -1, width))

    def best(self, nbest: int) -> tuple[Tensor, Tensor]:
        """The `nbest` best of each sentence, best first: tokens (N, nbest, max_steps), scores."""
        order = self.scores.argsort(dim=1, descending=True)[:, :nbest]
        tokens = self.tokens.gather(1, order.unsqueeze(-1).expand(-1, -1, self.tokens.shape[-1]))
        return tokens, self.scores.gather(1, order)
