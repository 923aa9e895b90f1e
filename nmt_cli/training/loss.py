"""Label-smoothed cross entropy (§5.4, eps_ls), computed without a one-hot of the vocabulary.

The smoothed target puts 1 - eps on the reference and eps / (V - 1) on every other class.
The loss and its gradient (softmax - target distribution) are computed together in row chunks,
so no (tokens x V) float32 tensor is ever materialised:
- `label_smoothed_nll` scores given logits (validation), keeping their gradient in their dtype;
- `linear_label_smoothed_nll` takes the decoder's output and the pre-softmax projection and
  makes each chunk's logits itself (training): not even the logits of the whole batch exist,
  and the chunk's gradient goes straight into the gradients of the output and the projection.
On a GPU the chunk's loss and gradient run as one fused kernel (`torch.compile`): the eager
form reads and writes each logit about a dozen times, a third of a base model's update.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch
from torch import Tensor

from nmt_cli.special_ids import PAD_ID

CHUNK_ELEMENTS = 1 << 22  # ~16 MB of float32 per chunk: it stays in a CPU core's cache
GPU_CHUNK_ELEMENTS = 1 << 27  # 512 MB: a few chunks a batch (each costs a dozen kernel launches)
# On CPU oneDNN compiles a matmul kernel for each new row count, which costs more than the
# product itself (docs/benchmarks.md). Chunks of a multiple of this many rows, the last one
# padded up to it, give the projection a handful of row counts instead of one per batch.
CPU_ROW_MULTIPLE = 64

ChunkLoss = Callable[[Tensor, Tensor, float], tuple[Tensor, Tensor, Tensor]]


def chunk_loss(logits: Tensor, target: Tensor, epsilon: float) -> tuple[Tensor, Tensor, Tensor]:
    """One chunk's summed smoothed loss and NLL (float32 scalars) and d loss / d logits in the
    logits' dtype: logits (c, V), target (c,); padding rows add nothing and get no gradient.

    One softmax gives the gradient, and its largest probability gives log-sum-exp (lse = max -
    log p_max; p_max >= 1/V, so it never underflows) without a separate, slower logsumexp."""
    vocab = logits.shape[-1]
    other = epsilon / (vocab - 1)
    keep = target != PAD_ID
    chunk = logits.float()
    p = torch.softmax(chunk, dim=-1)
    lse = chunk.amax(dim=-1) - p.amax(dim=-1).log()  # (c,)
    row_nll = lse - chunk.gather(1, target[:, None])[:, 0]
    row_uniform = vocab * lse - chunk.sum(dim=-1)  # -sum_v log p_v
    row_loss = (1.0 - epsilon - other) * row_nll + other * row_uniform
    # torch.where, not boolean indexing: indexing reads the mask back to the host (a GPU
    # synchronisation), and a product with the mask would keep a padding row's NaN.
    loss = torch.where(keep, row_loss, 0.0).sum()
    nll = torch.where(keep, row_nll, 0.0).sum()
    # d loss / d logits = softmax - smoothed target: (p - other) on real rows, minus (1 - eps -
    # other) more at the reference, 0 on padding rows.
    at_target = torch.full_like(target[:, None], other - (1.0 - epsilon), dtype=p.dtype)
    p.scatter_add_(1, target[:, None], at_target)
    real = keep[:, None].to(p.dtype)
    grad = torch.addcmul(real * -other, p, real)
    return loss, nll, grad.to(logits.dtype)


_fused: ChunkLoss | None = None


def _fused_chunk_loss(logits: Tensor, target: Tensor, epsilon: float) -> tuple[Tensor, Tensor, Tensor]:
    """`chunk_loss` compiled into one kernel (CUDA); eager for good after a failed compilation,
    with a warning, since training still works without it."""
    global _fused
    if _fused is None:
        _fused = torch.compile(chunk_loss, dynamic=True)
    if _fused is chunk_loss:
        return chunk_loss(logits, target, epsilon)
    try:
        return _fused(logits, target, epsilon)
    except Exception as exc:  # a missing compiler toolchain, an unsupported GPU
        warnings.warn(
            f"the fused loss did not compile ({type(exc).__name__}); using the eager one", stacklevel=2
        )
        _fused = chunk_loss
        return chunk_loss(logits, target, epsilon)


def chunk_function(device: torch.device, fused: bool | None = None) -> ChunkLoss:
    """The chunk loss for `device`: fused on a GPU (unless `fused` says otherwise), eager on CPU,
    where the compiled form gains nothing over the eager one and costs seconds to compile."""
    return _fused_chunk_loss if (device.type == "cuda" if fused is None else fused) else chunk_loss


def _chunking(device: torch.device, vocab: int) -> tuple[int, int]:
    """Rows a chunk, and the multiple of rows the batch is padded to (`CPU_ROW_MULTIPLE` on
    CPU; 1 on a GPU, whose kernels take any row count)."""
    if device.type == "cuda":
        return max(1, GPU_CHUNK_ELEMENTS // vocab), 1
    rows = max(1, CHUNK_ELEMENTS // vocab)
    multiple = min(CPU_ROW_MULTIPLE, rows)
    return rows - rows % multiple, multiple


class _SmoothedCrossEntropy(torch.autograd.Function):
    """The loss and, when a gradient is wanted, the gradient too, in one pass over each chunk:
    backward then only scales the stored gradient."""

    @staticmethod
    def forward(ctx, logits: Tensor, target: Tensor, epsilon: float) -> tuple[Tensor, Tensor]:
        # logits (N, V) in any float dtype, target (N,) -> summed smoothed loss and NLL over non-padding rows.
        n, vocab = logits.shape
        grad = torch.empty_like(logits) if ctx.needs_input_grad[0] else None
        loss = torch.zeros((), dtype=torch.float32, device=logits.device)
        nll = torch.zeros((), dtype=torch.float32, device=logits.device)
        rows = _chunking(logits.device, vocab)[0]
        for start in range(0, n, rows):
            stop = start + rows
            chunk_sum, chunk_nll, chunk_grad = chunk_loss(logits[start:stop], target[start:stop], epsilon)
            loss += chunk_sum
            nll += chunk_nll
            if grad is not None:
                grad[start:stop].copy_(chunk_grad)
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


class _LinearSmoothedCrossEntropy(torch.autograd.Function):
    """Projection and loss together, chunk by chunk: each chunk's logits are made, scored and
    turned into the gradients of `hidden` (its rows) and of the projection (summed over chunks,
    in float32), then dropped. Backward only scales what forward stored."""

    @staticmethod
    def forward(
        ctx,
        hidden: Tensor,
        weight: Tensor,
        bias: Tensor | None,
        target: Tensor,
        epsilon: float,
        dtype: torch.dtype,
        fused: ChunkLoss,
    ) -> tuple[Tensor, Tensor]:
        n, vocab = hidden.shape[0], weight.shape[0]
        device = hidden.device
        want = ctx.needs_input_grad
        with torch.autocast(device.type, enabled=False):  # the dtypes here are chosen explicitly
            h, w = hidden.to(dtype), weight.to(dtype)
            b = bias.to(dtype) if bias is not None else None
            rows, multiple = _chunking(device, vocab)
            pad = -n % multiple
            if pad:  # padding rows: PAD targets, so they add no loss and no gradient
                h = torch.nn.functional.pad(h, (0, 0, 0, pad))
                target = torch.nn.functional.pad(target, (0, pad), value=PAD_ID)
            grad_hidden = torch.empty_like(h) if want[0] else None
            grad_weight = torch.zeros(weight.shape, dtype=torch.float32, device=device) if want[1] else None
            grad_bias = torch.zeros(vocab, dtype=torch.float32, device=device) if want[2] else None
            loss = torch.zeros((), dtype=torch.float32, device=device)
            nll = torch.zeros((), dtype=torch.float32, device=device)
            for start in range(0, h.shape[0], rows):
                stop = start + rows
                part = h[start:stop]
                logits = part @ w.T if b is None else torch.addmm(b, part, w.T)
                chunk_sum, chunk_nll, grad = fused(logits, target[start:stop], epsilon)
                loss += chunk_sum
                nll += chunk_nll
                if grad_hidden is not None:
                    torch.mm(grad, w, out=grad_hidden[start:stop])
                if grad_weight is not None:
                    grad_weight += grad.T @ part
                if grad_bias is not None:
                    grad_bias += grad.sum(dim=0, dtype=torch.float32)
        if grad_hidden is not None:
            grad_hidden = grad_hidden[:n]
        ctx.save_for_backward(grad_hidden, grad_weight, grad_bias)
        ctx.dtypes = (hidden.dtype, weight.dtype, None if bias is None else bias.dtype)
        ctx.mark_non_differentiable(nll)
        return loss, nll

    @staticmethod
    def backward(ctx, grad_loss: Tensor, _grad_nll: Tensor) -> tuple[Tensor | None, ...]:
        grads = []
        for grad, dtype in zip(ctx.saved_tensors, ctx.dtypes, strict=True):
            grads.append(None if grad is None else grad.mul_(grad_loss.to(grad.dtype)).to(dtype))
        return (*grads, None, None, None, None)


def linear_label_smoothed_nll(
    hidden: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    target: Tensor,
    epsilon: float,
    fused: bool | None = None,
) -> tuple[Tensor, Tensor]:
    """`label_smoothed_nll` of the logits `hidden @ weight.T + bias`, without making them all.

    hidden (N, d), weight (V, d), bias (V,) or None, target (N,) -> (smoothed loss, plain NLL),
    float32 sums over the non-padding targets; the loss carries the gradients of hidden, weight
    and bias. Under autocast the logits are made in its dtype, as a linear layer would make them.
    `fused`: the chunk's loss as one compiled kernel (default: on a GPU)."""
    device = hidden.device
    dtype = torch.get_autocast_dtype(device.type) if torch.is_autocast_enabled(device.type) else hidden.dtype
    chunk = chunk_function(device, fused)
    return _LinearSmoothedCrossEntropy.apply(hidden, weight, bias, target, epsilon, dtype, chunk)
