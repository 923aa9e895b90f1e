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
        scored over `penalty`; those beyond K are dropped. Written by scattering the first K
        candidates (only they may end) into K + 1 slots, where the spare last one takes those
        that do not finish: the search never reads back which ones do. A slot is free until
        filled, PAD past its EOS, so only the first t + 1 positions change."""
        a, k = active.numel(), self.scores.shape[1]
        ending = c.ending[:, :k]
        slot = self.count[active].unsqueeze(1) + ending.long().cumsum(dim=1) - 1
        finish = ending & (slot < k)
        target = torch.where(finish, slot, k)  # (A, K)
        scores = torch.cat([self.scores[active], self.scores.new_full((a, 1), float("-inf"))], dim=1)
        scores.scatter_(1, target, c.scores[:, :k].double() / penalty)
        candidate_tokens = self.tokens.new_full((a, k, t + 1), EOS_ID)  # each one's history, then EOS
        candidate_tokens[:, :, :t] = history.gather(1, c.beams[:, :k, None].expand(-1, -1, t))
        tokens = torch.cat([self.tokens[active, :, : t + 1], candidate_tokens[:, :1]], dim=1)
        tokens.scatter_(1, target.unsqueeze(-1).expand(-1, -1, t + 1), candidate_tokens)
        self.scores[active] = scores[:, :k]
        self.tokens[active, :, : t + 1] = tokens[:, :k]
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
