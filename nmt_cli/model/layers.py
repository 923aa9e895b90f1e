"""Building blocks: feed-forward network, residual sub-layer, embeddings and positions."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

_LEVELS = 1 << 16  # a CPU dropout mask is drawn from 16 random bits per element


def dropout(x: Tensor, p: float, training: bool) -> Tensor:
    """F.dropout, except on CPU, where torch's dropout draws one number per element from a
    serial generator (about 6 ns each: 40% of a small model's forward pass). There each
    element gets 16 bits of one 64-bit draw, so p is rounded to a multiple of 1/65536 and the
    scale matches the rounded p (kept elements are still unbiased)."""
    if not training or p == 0.0:
        return x
    if x.device.type != "cpu" or p >= 1.0:
        return F.dropout(x, p, training=True)
    dropped = min(max(round(p * _LEVELS), 1), _LEVELS - 1)
    n = x.numel()
    words = torch.empty((n + 3) // 4, dtype=torch.int64).random_(-(1 << 63), None)
    keep = words.view(torch.int16)[:n].view(x.shape).ge(dropped - _LEVELS // 2)
    # uint8 -> float is a fast cast; bool -> float is not. The mask is exactly 0/1 in any dtype,
    # and the scale is applied in the op's own precision (a bf16 mask of 1/(1-p) would be biased).
    return x * keep.view(torch.uint8).to(x.dtype) * (_LEVELS / (_LEVELS - dropped))


ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {"relu": F.relu, "gelu": F.gelu, "swish": F.silu}


class FeedForward(nn.Module):
    """FFN(x) = max(0, x W1 + b1) W2 + b2 (§3.3, Eq. 2); GELU or swish in place of the max for
    models imported from toolkits that use them."""

    def __init__(self, d_model: int, d_ff: int, activation_dropout: float, activation: str = "relu"):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.activation_dropout = activation_dropout
        self.activation = ACTIVATIONS[activation]

    def forward(self, x: Tensor) -> Tensor:
        hidden = dropout(self.activation(self.linear1(x)), self.activation_dropout, self.training)
        return self.linear2(hidden)


class Residual(nn.Module):
    """The residual connection and layer normalisation around one sub-layer (§3.1, §5.4).

    post-norm (the paper): LayerNorm(x + Dropout(Sublayer(x)))
    pre-norm (an option):  x + Dropout(Sublayer(LayerNorm(x)))
    The caller runs the sub-layer between `before` and `after`, so attention can
    return extra values (cache, scores) without this class knowing about them.
    """

    def __init__(self, d_model: int, dropout: float, pre_norm: bool):
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.dropout = dropout
        self.pre_norm = pre_norm

    def before(self, x: Tensor) -> Tensor:
        return self.norm(x) if self.pre_norm else x

    def after(self, x: Tensor, sublayer_out: Tensor) -> Tensor:
        y = x + dropout(sublayer_out, self.dropout, self.training)
        return y if self.pre_norm else self.norm(y)


def sinusoidal_table(max_positions: int, d_model: int, layout: str = "sinusoidal") -> Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(...) (§3.5).

    Imported models keep their own arrangement of the same idea: "sinusoidal-halves" (Marian) puts
    the sines in the first half and the cosines in the second; "sinusoidal-fairseq" does too, with
    frequencies 10000^(-i/(d/2 - 1)) and the first token at position 2 (fairseq's padding index + 1).
    """
    first = 2 if layout == "sinusoidal-fairseq" else 0
    position = torch.arange(first, first + max_positions, dtype=torch.float32).unsqueeze(1)  # (P, 1)
    half = d_model // 2
    if layout == "sinusoidal-fairseq":
        inv_freq = torch.exp(torch.arange(half, dtype=torch.float32) * (-math.log(10000.0) / (half - 1)))
    else:
        steps = torch.arange(0, d_model, 2, dtype=torch.float32)
        inv_freq = torch.exp(steps * (-math.log(10000.0) / d_model))
    table = torch.zeros(max_positions, d_model)
    if layout == "sinusoidal":
        table[:, 0::2] = torch.sin(position * inv_freq)
        table[:, 1::2] = torch.cos(position * inv_freq[:half])
    elif layout == "sinusoidal-halves":  # in float64 and rounded once, as Marian's own table
        angles = torch.arange(max_positions, dtype=torch.float64)[:, None] / torch.pow(
            10000.0, torch.arange(0, d_model, 2, dtype=torch.float64)[:half] / d_model
        )
        table[:, :half] = torch.sin(angles).float()
        table[:, half : 2 * half] = torch.cos(angles).float()
    else:
        table[:, :half] = torch.sin(position * inv_freq[:half])
        table[:, half : 2 * half] = torch.cos(position * inv_freq[:half])
    return table  # (P, d_model)


class Embedding(nn.Module):
    """Token embedding * sqrt(d_model) + position encoding, then dropout (§3.4, §3.5, §5.4)."""

    table: Tensor  # the sinusoidal positions, a buffer (when positions are not learned)

    def __init__(
        self,
        tokens: nn.Embedding,
        d_model: int,
        max_positions: int,
        positions: str,
        dropout: float,
        scale: bool = True,
        initialize: bool = True,
    ):
        super().__init__()
        self.tokens = tokens
        self.scale = math.sqrt(d_model) if scale else 1.0
        self.dropout = dropout
        self.learned = learned = positions == "learned"
        if learned and initialize:
            self.positions = nn.Embedding(max_positions, d_model)
            nn.init.normal_(self.positions.weight, std=d_model**-0.5)
        elif learned:  # weights to be loaded: no random draw
            weight = torch.empty(max_positions, d_model)
            self.positions = nn.Embedding(max_positions, d_model, _weight=weight)
        else:
            # Not a parameter and not saved: checkpoints hold only what training changes. Left
            # empty when not initializing: on the meta device the first arithmetic costs a second
            # of set-up, and reset_table fills it once the model has memory.
            shape = (max_positions, d_model)
            table = sinusoidal_table(*shape, positions) if initialize else torch.empty(shape)
            self.register_buffer("table", table, persistent=False)
        self.layout = positions

    def reset_table(self) -> None:
        """Compute the sinusoidal table, beside the token embeddings (a model built on the meta
        device has none until then)."""
        if not self.learned:
            positions, width = self.table.shape
            self.table = sinusoidal_table(positions, width, self.layout).to(self.tokens.weight.device)

    def forward(self, ids: Tensor, start: int = 0, positions: Tensor | None = None) -> Tensor:
        """ids (B, T) at positions start..start+T-1 -> (B, T, d_model); or packed ids (N,) at
        `positions` (N,) -> (N, d_model)."""
        table = self.positions.weight if self.learned else self.table
        if positions is not None:
            pos = table.index_select(0, positions)
        else:
            pos = table[start : start + ids.shape[1]]
        x = self.tokens(ids) * self.scale + pos
        return dropout(x, self.dropout, self.training)
