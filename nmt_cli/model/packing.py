"""Packed batches: the sentences of a batch laid end to end, with no padding.

A padded batch of WMT-like lengths is 10-25% padding, and every layer but attention works on
each token alone: projections, feed-forward networks, layer norms, dropout and the loss. Packed,
they see the real tokens only, (N, d_model). Attention, the one place where tokens meet, keeps
each sentence to itself: on a GPU through torch's variable-length flash attention, which takes
the packed tokens and their sentences' offsets as they are; elsewhere (a CPU, or fp32, which
that kernel does not take) by laying the sentences out padded for the duration of the call
(`Packing.padded` and `Packing.packed`), which gives what a padded batch gives.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from nmt_cli.config import ModelConfig


@dataclass
class Packing:
    """Where each sentence of a packed batch lies: tokens offsets[i]:offsets[i+1] are sentence i."""

    offsets: Tensor
    """(B + 1,) int32, the cumulative lengths (variable-length attention's cu_seqlens)."""
    positions: Tensor
    """(N,) int64, each token's position in its sentence."""
    slots: Tensor
    """(N,) int64, each token's place in the (B x longest) padded layout, row-major."""
    longest: int
    """The longest sentence's length."""
    rows: int
    """Sentences in the batch."""

    @classmethod
    def of(cls, lengths: np.ndarray | list[int]) -> Packing:
        """The packing of sentences of these lengths (each at least 1), made on the host."""
        lengths = np.asarray(lengths, dtype=np.int64)
        assert len(lengths) and lengths.min() >= 1, "a packed sentence has at least one token"
        offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        total, longest = int(offsets[-1]), int(lengths.max())
        starts = np.repeat(offsets[:-1], lengths)
        positions = np.arange(total, dtype=np.int64) - starts
        slots = positions + np.repeat(np.arange(len(lengths), dtype=np.int64) * longest, lengths)
        return cls(
            torch.from_numpy(offsets.astype(np.int32)),
            torch.from_numpy(positions),
            torch.from_numpy(slots),
            longest,
            len(lengths),
        )

    def to(self, device: torch.device, non_blocking: bool = False) -> Packing:
        def move(t: Tensor) -> Tensor:
            return t.to(device, non_blocking=non_blocking)

        return Packing(move(self.offsets), move(self.positions), move(self.slots), self.longest, self.rows)

    def pin_memory(self) -> Packing:
        return Packing(
            self.offsets.pin_memory(),
            self.positions.pin_memory(),
            self.slots.pin_memory(),
            self.longest,
            self.rows,
        )

    def padded(self, x: Tensor) -> Tensor:
        """Packed (N, h, d) -> padded (B, h, longest, d), zeros at padding."""
        n, heads, width = x.shape
        out = x.new_zeros(self.rows * self.longest, heads, width)
        out.index_copy_(0, self.slots, x)
        return out.view(self.rows, self.longest, heads, width).transpose(1, 2)

    def packed(self, x: Tensor) -> Tensor:
        """Padded (B, h, longest, d) -> packed (N, h, d): `padded`'s inverse on real positions."""
        b, heads, t, width = x.shape
        return x.transpose(1, 2).reshape(b * t, heads, width).index_select(0, self.slots)

    def key_mask(self) -> Tensor:
        """(B, 1, 1, longest), True at real positions of the padded layout."""
        lengths = self.offsets[1:] - self.offsets[:-1]
        real = torch.arange(self.longest, device=lengths.device)[None, :] < lengths[:, None]
        return real[:, None, None, :]


def packed_tokens(padded: Tensor, pad_id: int) -> tuple[Tensor, Packing]:
    """The tokens of a padded batch (B, T) (padding at the ends of rows) packed: (N,) and their
    packing; made on the host."""
    real = padded != pad_id
    return padded[real], Packing.of(real.sum(dim=1).tolist())


def packing_supported(cfg: ModelConfig) -> bool:
    """Whether the model trains on packed batches: not with RealFormer's scores, which pass
    padded score tensors from layer to layer, nor restricted self-attention."""
    return not cfg.residual_attention and cfg.attention_window == 0
