"""Label-smoothed cross entropy (§5.4, eps_ls), computed without a one-hot of the vocabulary.

The smoothed target puts 1 - eps on the reference and eps / (V - 1) on every other class.
The loss and its gradient (softmax - target distribution) are computed in row chunks that
read the logits in place: no (tokens x V) float32 tensor is ever materialised besides the
gradient itself, which on CPU also spares the page faults of large temporary allocations.
Imports torch and `config`.
"""

from __future__ import annotations

import torch
from torch import Tensor

from nmt_cli.config import PAD_ID

CHUNK_ELEMENTS = 1 << 22  # ~16 MB of float32 per chunk


class _SmoothedCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits: Tensor, target: Tensor, epsilon: float) -> tuple[Tensor, Tensor]:
        # logits (N, V) in any float dtype, target (N,) -> summed smoothed loss and NLL over non-padding rows.
        n, vocab = logits.shape
        other = epsilon / (vocab - 1)
        keep = target != PAD_ID
        lse = torch.empty(n, dtype=torch.float32, device=logits.device)
        loss = torch.zeros((), dtype=torch.float32, device=logits.device)
        nll = torch.zeros((), dtype=torch.float32, device=logits.device)
        rows = max(1, CHUNK_ELEMENTS // vocab)
        for start in range(0, n, rows):
            chunk = logits[start : start + rows].float()  # (c, V)
            lse[start : start + rows] = chunk_lse = chunk.logsumexp(dim=-1)  # (c,)
            row_nll = chunk_lse - chunk.gather(1, target[start : start + rows, None])[:, 0]
            row_uniform = vocab * chunk_lse - chunk.sum(dim=-1)  # -sum_v log p_v
            row_loss = (1.0 - epsilon - other) * row_nll + other * row_uniform
            row_keep = keep[start : start + rows]
            loss += row_loss[row_keep].sum()
            nll += row_nll[row_keep].sum()
        ctx.save_for_backward(logits, target, lse)
        ctx.epsilon = epsilon
        ctx.mark_non_differentiable(nll)
        return loss, nll

    @staticmethod
    def backward(ctx, grad_loss: Tensor, _grad_nll: Tensor) -> tuple[Tensor, None, None]:
        logits, target, lse = ctx.saved_tensors
        n, vocab = logits.shape
        other = ctx.epsilon / (vocab - 1)
        grad = torch.empty_like(logits)
        rows = max(1, CHUNK_ELEMENTS // vocab)
        for start in range(0, n, rows):
            stop = start + rows
            # d loss / d logits = softmax - smoothed target, zero on padding rows.
            p = (logits[start:stop].float() - lse[start:stop, None]).exp_()  # (c, V)
            p.sub_(other)
            at_target = torch.full((p.shape[0], 1), other - (1.0 - ctx.epsilon), device=p.device)
            p.scatter_add_(1, target[start:stop, None], at_target)
            p.mul_(((target[start:stop] != PAD_ID).float() * grad_loss)[:, None])
            grad[start:stop] = p
        return grad, None, None


def label_smoothed_nll(logits: Tensor, target: Tensor, epsilon: float) -> tuple[Tensor, Tensor]:
    """Summed losses over the non-padding targets.

    logits (B, T, V), target (B, T) -> (smoothed loss, plain NLL), each a float32 scalar sum;
    only the smoothed loss carries a gradient.
    """
    vocab = logits.shape[-1]
    return _SmoothedCrossEntropy.apply(logits.reshape(-1, vocab), target.reshape(-1), epsilon)
