"""What `bench/gpu_check.py` reads off a training update, as functions that need no GPU.

- `forward_flops` / `training_flops`: the model FLOPs of the real tokens, counted from each
  sentence's lengths (the numerator of MFU on real tokens; torch's FlopCounterMode counts the
  padded batch as it runs).
- `real_lengths` / `real_share`: a padded batch's real tokens against its padded ones.
- `kernel_class` / `time_shares`: where the GPU's time goes, from the kernels' names and intervals.
- `count_aten_ops`: the aten operators an update dispatches (kernel launches on a GPU, roughly);
  tests/unit/test_op_count.py holds the budget of a tiny model's update.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from nmt_cli.config import ModelConfig
from nmt_cli.special_ids import PAD_ID

Lengths = Sequence[int] | np.ndarray


def forward_flops(cfg: ModelConfig, src_lengths: Lengths, tgt_lengths: Lengths) -> float:
    """Model FLOPs (a multiply-add counts 2) of one teacher-forced forward pass over sentences of
    these lengths: the source with its EOS, the target with its BOS (the positions computed).

    With d = d_model, q = heads x d_k and v = heads x d_v, for a sentence of S and T positions:
    - each encoder layer: projections q, k, v, o 2·S·(2dq + 2dv); scores and weighted sum
      2·S²·(q + v); FFN 2·S·2·d·d_ff;
    - each decoder layer: self-attention as the encoder's over T, causal attention counted in
      full (as FlopCounterMode and the kernels' usual accounting do; a causal kernel skips about
      half of it); cross-attention q, o on the target 2·T·(dq + dv), k, v on the source
      2·S·(dq + dv), scores and weighted sum 2·T·S·(q + v); FFN 2·T·2·d·d_ff;
    - the pre-softmax projection 2·T·d·V (training projects the real target rows only).
    Embeddings, norms, softmax, dropout and the loss are left out: no weight multiplies there."""
    s = np.asarray(src_lengths, dtype=np.float64)
    t = np.asarray(tgt_lengths, dtype=np.float64)
    d, q, v = cfg.d_model, cfg.heads * cfg.d_k, cfg.heads * cfg.d_v
    projections = 2 * (2 * d * q + 2 * d * v)  # per position
    ffn = 2 * 2 * d * cfg.d_ff  # per position
    attend = 2 * (q + v)  # per (query, key) pair
    encoder = cfg.encoder_layers * (s.sum() * (projections + ffn) + attend * (s * s).sum())
    decoder = cfg.decoder_layers * (
        t.sum() * (projections + ffn)
        + attend * (t * t).sum()  # self-attention
        + (t.sum() + s.sum()) * 2 * (d * q + d * v)  # cross: q, o on the target; k, v on the source
        + attend * (t * s).sum()
    )
    output = 2 * d * cfg.tgt_vocab_size * t.sum()
    return float(encoder + decoder + output)


def training_flops(cfg: ModelConfig, src_lengths: Lengths, tgt_lengths: Lengths) -> float:
    """Forward and backward: 3 x the forward's FLOPs (backward multiplies twice: the gradients of
    the inputs and of the weights). FlopCounterMode counts a flash-attention backward as 2.5
    forwards (it recomputes the scores), so it counts a little more attention."""
    return 3 * forward_flops(cfg, src_lengths, tgt_lengths)


def real_lengths(batch: dict[str, torch.Tensor]) -> tuple[np.ndarray, np.ndarray]:
    """The real (non-padding) positions of each row of a padded batch: (source, target)."""
    src = (batch["src"] != PAD_ID).sum(dim=1).numpy()
    tgt = (batch["tgt_out"] != PAD_ID).sum(dim=1).numpy()  # = tgt_in's: BOS + tokens, tokens + EOS
    return src, tgt


def real_share(batches: list[dict[str, torch.Tensor]]) -> float:
    """Real tokens over padded tokens of the batches, source and target together."""
    real = sum(int((b[k] != PAD_ID).sum()) for b in batches for k in ("src", "tgt_out"))
    padded = sum(b[k].numel() for b in batches for k in ("src", "tgt_out"))
    return real / max(1, padded)


# --- where the GPU's time goes ----------------------------------------------------------------

CLASSES = ("matmul", "attention", "elementwise", "loss", "optimizer", "other")
# Tried in this order: the first class whose pattern the lower-cased name matches. Attention comes
# before matmul (fmha_cutlass..., cudnn's sdpa kernels hold "xmma"), matmul before elementwise
# (addmm), the optimizer before elementwise (multi_tensor_apply over foreach norms).
_PATTERNS = (
    ("attention", r"flash|fmha|attention|sdpa"),
    ("matmul", r"gemm|gemv|cutlass|xmma|nvjet|cublas|splitkreduce|aten::((add|baddb|b)?mm|linear)\b|matmul"),
    ("optimizer", r"multi_tensor_apply|adam|lpnorm|_foreach"),
    # In an eager model the only Triton kernels are the fused loss's (training/loss.py); scatter
    # and gather are its target's, softmax is never attention's on a GPU (flash kernels).
    ("loss", r"softmax|cross_entropy|nll|scatter|gather|triton"),
    ("other", r"memcpy|memset"),
    (
        "elementwise",
        r"elementwise|vectorized|unrolled|reduce|cast|layer_?norm|gammabeta|dropout|copy|fill|"
        r"aten::(add|sub|mul|div|relu|threshold|where|sum|mean|native_layer_norm)",
    ),
)
_COMPILED = [(name, re.compile(pattern)) for name, pattern in _PATTERNS]


def kernel_class(name: str) -> str:
    """The class of a CUDA kernel (or, on CPU, an aten operator) by its name alone: one of CLASSES."""
    lowered = name.lower()
    for kind, pattern in _COMPILED:
        if pattern.search(lowered):
            return kind
    return "other"


def time_shares(kernels: Sequence[tuple[str, float, float]], wall: float) -> dict[str, float]:
    """Shares of `wall` (the span the kernels ran in) by kernel class, and "idle": the part of the
    wall time no kernel covers (wall minus the union of the (name, start, end) intervals). Kernels
    of several streams may overlap: each class gets the busy time in proportion to its kernels'
    summed durations. The shares sum to 1."""
    spent = dict.fromkeys(CLASSES, 0.0)
    for name, start, end in kernels:
        spent[kernel_class(name)] += end - start
    busy, reach = 0.0, float("-inf")
    for _, start, end in sorted(kernels, key=lambda k: k[1]):
        if end > reach:
            busy += end - max(start, reach)
            reach = end
    busy_share = min(1.0, busy / wall) if wall > 0 else 0.0
    total = sum(spent.values())
    shares = {k: busy_share * v / total if total else 0.0 for k, v in spent.items()}
    return {**shares, "idle": 1.0 - busy_share}


# --- operators an update dispatches -----------------------------------------------------------


class _OpCounter(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.count += 1
        return func(*args, **(kwargs or {}))


def count_aten_ops(work: Callable[[], object]) -> int:
    """How many aten operators `work` dispatches, backward's included: counted below autograd,
    after composite operators are decomposed, so each one is an operator kernel (views cost no
    launch on a GPU, but count here). Not for code that runs torch.compile'd functions."""
    counter = _OpCounter()
    with counter:
        work()
    return counter.count
