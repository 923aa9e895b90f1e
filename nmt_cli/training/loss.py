"""Label-smoothed cross entropy (§5.4, eps_ls), computed by gather: no one-hot of the vocabulary.

Imports torch and `config`.
"""

from __future__ import annotations

import torch
from torch import Tensor

from nmt_cli.config import PAD_ID


def label_smoothed_nll(logits: Tensor, target: Tensor, epsilon: float) -> tuple[Tensor, Tensor]:
    """Summed losses over the non-padding targets.

    logits (B, T, V), target (B, T) -> (smoothed loss, plain NLL), each a scalar sum.
    The smoothed target puts 1 - eps on the reference and spreads eps uniformly over
    the other V - 1 classes.
    """
    log_probs = logits.float().log_softmax(dim=-1)  # (B, T, V); fp32 even under autocast
    keep = target != PAD_ID  # (B, T)
    nll = -log_probs.gather(-1, target.unsqueeze(-1)).squeeze(-1)  # (B, T)
    uniform = -log_probs.sum(dim=-1)  # (B, T): cross entropy against an all-ones target
    eps_other = epsilon / (log_probs.shape[-1] - 1)
    loss = (1.0 - epsilon - eps_other) * nll + eps_other * uniform
    zero = torch.zeros((), device=logits.device)
    return torch.where(keep, loss, zero).sum(), torch.where(keep, nll, zero).sum()
