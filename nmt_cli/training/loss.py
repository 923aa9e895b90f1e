"""Label-smoothed cross entropy (§5.4, eps_ls), computed without a one-hot of the vocabulary.

The smoothed target puts 1 - eps on the reference and eps / (V - 1) on every other class.
The loss and its gradient (softmax - target distribution) are computed together in row chunks
that read the logits in place: no (tokens x V) float32 tensor is ever materialised, and the
gradient is kept in the logits' dtype.
"""

from __future__ import annotations

import torch
from torch import Tensor

from nmt_cli.special_ids import PAD_ID

CHUNK_ELEMENTS = 1 << 22  # ~16 MB of float32 per chunk: it stays in a CPU core's cache
GPU_CHUNK_ELEMENTS = 1 << 27  # 512 MB: a few chunks a batch (each costs a dozen kernel launches)


class _SmoothedCrossEntropy(torch.autograd.Function):
    """The loss and, when a gradient is wanted, the gradient too, in one pass over each chunk:
    backward then only scales the stored gradient. Per chunk: one softmax gives the gradient,
    and its largest probability gives log-sum-exp (lse = max - log p_max; p_max >= 1/V, so it
    never underflows) without a separate, slower logsumexp."""

    @staticmethod
    def forward(ctx, logits: Tensor, target: Tensor, epsilon: float) -> tuple[Tensor, Tensor]:
        # logits (N, V) in any float dtype, target (N,) -> summed smoothed loss and NLL over non-padding rows.
        n, vocab = logits.shape
        other = epsilon / (vocab - 1)
        keep = target != PAD_ID
        grad = torch.empty_like(logits) if ctx.needs_input_grad[0] else None
        loss = torch.zeros((), dtype=torch.float32, device=logits.device)
        nll = torch.zeros((), dtype=torch.float32, device=logits.device)
        chunk_elements = GPU_CHUNK_ELEMENTS if logits.device.type == "cuda" else CHUNK_ELEMENTS
        rows = max(1, chunk_elements // vocab)
        for start in range(0, n, rows):
            stop = start + rows
            chunk = logits[start:stop].float()  # (c, V)
            row_target, row_keep = target[start:stop, None], keep[start:stop]
            p = torch.softmax(chunk, dim=-1)
            lse = chunk.amax(dim=-1) - p.amax(dim=-1).log()  # (c,)
            row_nll = lse - chunk.gather(1, row_target)[:, 0]
            row_uniform = vocab * lse - chunk.sum(dim=-1)  # -sum_v log p_v
            row_loss = (1.0 - epsilon - other) * row_nll + other * row_uniform
            # torch.where, not boolean indexing: indexing reads the mask back to the host (a GPU
            # synchronisation), and a product with the mask would keep a padding row's NaN.
            loss += torch.where(row_keep, row_loss, 0.0).sum()
            nll += torch.where(row_keep, row_nll, 0.0).sum()
            if grad is not None:
                # d loss / d logits = softmax - smoothed target, zero on padding rows.
                at_target = torch.full_like(row_target, other - (1.0 - epsilon), dtype=p.dtype)
                p.scatter_add_(1, row_target, at_target)
                # (p - other) on real rows, 0 on padding rows, in one pass: selecting the rows
                # to zero would read the mask back to the host (a GPU synchronisation).
                real = row_keep[:, None].to(p.dtype)
                grad[start:stop].copy_(torch.addcmul(real * -other, p, real))
        ctx.save_for_backward(grad)
        ctx.mark_non_differentiable(nll)
        return loss, nll

    @staticmethod
    def backward(ctx, grad_loss: Tensor, _grad_nll: Tensor) -> tuple[Tensor, None, None]:
        (grad,) = ctx.saved_tensors
        return grad.mul_(grad_loss), None, None  # in place: the graph is used once


def label_smoothed_nll(logits: Tensor, target: Tensor, epsilon: float) -> tuple[Tensor, Tensor]:
    """Summed losses over the non-padding targets.

    logits (B, T, V), target (B, T) -> (smoothed loss, plain NLL), each a float32 scalar sum;
    only the smoothed loss carries a gradient.
    """
    vocab = logits.shape[-1]
    return _SmoothedCrossEntropy.apply(logits.reshape(-1, vocab), target.reshape(-1), epsilon)
