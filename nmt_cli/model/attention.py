"""Multi-head attention (§3.2.2) on `scaled_dot_product_attention`, with its incremental cache
(`kv_cache`).

The cache is an explicit value passed in and returned, never state hidden in the
module.
"""

from __future__ import annotations

import functools
import math
from types import ModuleType
from typing import cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from nmt_cli.model.kv_cache import KVCache, SelfCache
from nmt_cli.model.layers import dropout
from nmt_cli.model.packing import Packing


@functools.cache
def _varlen() -> ModuleType | None:
    """torch's variable-length attention, imported on first use: it loads torch._dynamo, about as
    long to import as torch itself, which every command would pay, CPU ones included. None on an
    older torch, where packed batches attend through the padded layout."""
    try:
        from torch.nn.attention import varlen
    except ImportError:
        return None
    return varlen


def _explicit(q: Tensor, queries: int) -> bool:
    """Whether to write attention out instead of calling SDPA: for bf16 on CPU, where SDPA's
    math kernel converts q, k and v to float32 (and keeps those copies for backward) and its
    flash kernel is slower still at sentence lengths. The explicit form multiplies in bf16 and
    takes the softmax in float32, faster than either, forward + backward. Except for one query a
    row (a decoding step's self-attention, greedy cross-attention), which the flash kernel answers
    faster than the explicit form. The timings: docs/benchmarks.md."""
    return q.device.type == "cpu" and q.dtype == torch.bfloat16 and queries > 1


def _variable_length(q: Tensor, dropout_p: float) -> bool:
    """Whether torch's variable-length flash attention takes packed q: CUDA, half precision
    (flash kernels), and no attention dropout (the kernel has none)."""
    half = q.dtype in (torch.float16, torch.bfloat16)
    return q.is_cuda and half and dropout_p == 0.0 and _varlen() is not None


class MultiHeadAttention(nn.Module):
    """MultiHead(Q, K, V) = Concat(head_1..head_h) W^O, head_i = Attention(Q W^Q_i, K W^K_i, V W^V_i).

    Self-attention projects Q, K and V with one fused matrix; cross-attention
    projects Q from the decoder and K, V (fused) from the encoder output.
    """

    def __init__(
        self,
        d_model: int,
        heads: int,
        d_k: int,
        d_v: int,
        dropout: float,
        self_attention: bool,
        residual: bool = False,
    ):
        super().__init__()
        self.heads, self.d_k, self.d_v = heads, d_k, d_v
        self.self_attention = self_attention
        self.residual = residual  # RealFormer: add the previous layer's raw scores, return these
        self.dropout = dropout
        if self_attention:
            self.qkv_proj = nn.Linear(d_model, heads * (2 * d_k + d_v))
        else:
            self.q_proj = nn.Linear(d_model, heads * d_k)
            self.kv_proj = nn.Linear(d_model, heads * (d_k + d_v))
        self.out_proj = nn.Linear(heads * d_v, d_model)

    def _split(self, x: Tensor, d: int) -> Tensor:
        b, t, _ = x.shape
        return x.view(b, t, self.heads, d).transpose(1, 2)  # (B, h, T, d)

    def project_kv(self, memory: Tensor) -> KVCache:
        """Cross-attention keys and values of the encoder output; computed once per sentence."""
        k, v = self.kv_proj(memory).split([self.heads * self.d_k, self.heads * self.d_v], dim=-1)
        return KVCache(self._split(k, self.d_k), self._split(v, self.d_v))

    def cross_weights(
        self, x: Tensor, memory_kv: KVCache, mask: Tensor, prev_scores: Tensor | None = None, group: int = 1
    ) -> Tensor:
        """The probabilities cross-attention from `x` (B, T, d_model) puts on each memory
        position, (B, h, T, S), in float32; `group` as forward() takes it. For inspection (`nmt
        attend`) and word alignment, since forward() never materialises them on the SDPA path."""
        q = self._split(self.q_proj(x), self.d_k)
        if group > 1:
            q = _fold(q, group)
            prev_scores = _fold(prev_scores, group) if prev_scores is not None else None
        scores = self._scores(q, memory_kv.k, prev_scores)
        weights = scores.float().masked_fill(~mask, float("-inf")).softmax(dim=-1)
        return _unfold(weights, group) if group > 1 else weights

    def _scores(self, q: Tensor, k: Tensor, prev_scores: Tensor | None) -> Tensor:
        """Q K^T / sqrt(d_k) (Eq. 1), plus RealFormer's scores of the layer below: (B, h, T, S)."""
        scores = (q @ k.transpose(-2, -1)).mul_(1.0 / math.sqrt(self.d_k))
        return scores if prev_scores is None else scores + prev_scores

    def forward(
        self,
        x: Tensor,
        mask: Tensor | None,
        cache: SelfCache | None = None,
        memory_kv: KVCache | None = None,
        is_causal: bool = False,
        prev_scores: Tensor | None = None,
        group: int = 1,
    ) -> tuple[Tensor, SelfCache | None, Tensor | None]:
        """Attend from `x` (B, T, d_model).

        mask: boolean, True where attention is allowed, broadcastable to (B, h, T, S); every
            query must be allowed at least one key (a softmax over no key is NaN).
        is_causal: with no mask, each query sees the keys up to its own position, the queries
            being the last T of the S positions (after the cached ones).
        cache: self-attention keys/values of earlier steps; the new ones are appended (written
            into a StaticKVCache's buffers).
        memory_kv: precomputed cross-attention keys/values (see project_kv).
        prev_scores: with RealFormer, the previous layer's raw scores (B, h, T, S); None in the
            first layer.
        group: rows of `x` per row of memory_kv (cross-attention in beam search: the hypotheses
            of one sentence share its memory row).
        Returns (output (B, T, d_model), the updated self-attention cache, with RealFormer the
        raw scores for the next layer, else None).
        """
        if self.self_attention:
            q, k, v = self.qkv_proj(x).split(
                [self.heads * self.d_k, self.heads * self.d_k, self.heads * self.d_v], dim=-1
            )
            q, k, v = self._split(q, self.d_k), self._split(k, self.d_k), self._split(v, self.d_v)
            new_cache = KVCache(k, v) if cache is None else cache.extended(k, v)
            k, v = new_cache.k, new_cache.v
        else:
            assert memory_kv is not None, "cross-attention needs the projected encoder output"
            q = self._split(self.q_proj(x), self.d_k)
            k, v = memory_kv.k, memory_kv.v
            new_cache = None
        out, scores = self._attend(q, k, v, mask, is_causal, prev_scores, group)
        b, _, t, _ = out.shape
        out = out.transpose(1, 2).reshape(b, t, self.heads * self.d_v)  # (B, T, h * d_v)
        return self.out_proj(out), new_cache, scores

    def _attend(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        mask: Tensor | None,
        is_causal: bool,
        prev_scores: Tensor | None,
        group: int,
    ) -> tuple[Tensor, Tensor | None]:
        """Attention of projected q (B*group, h, T, d_k) over k, v (B, h, S, d): (out (B*group,
        h, T, d_v), RealFormer's raw scores or None); the arguments as forward() takes them."""
        t_q, t_k = q.shape[-2], k.shape[-2]
        explicit = self.residual or _explicit(q, t_q * group)
        if is_causal and mask is None and (explicit or t_q != t_k):
            # SDPA's is_causal puts the diagonal at the top left; with cached keys the new
            # queries are the last t_q positions, so the diagonal belongs at the bottom right.
            mask = torch.ones(t_q, t_k, dtype=torch.bool, device=q.device).tril(t_k - t_q)
            is_causal = False
        assert q.shape[0] == k.shape[0] * group, "each memory row serves `group` rows of x"
        if group > 1:
            # A sentence's hypotheses become extra query positions over its one memory row.
            q = _fold(q, group)
            if prev_scores is not None:
                prev_scores = _fold(prev_scores, group)
        p = self.dropout if self.training else 0.0

        scores = None
        if not explicit:
            out = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, dropout_p=p, is_causal=is_causal and mask is None
            )
        else:
            scores = self._scores(q, k, prev_scores)
            weights = scores if mask is None else scores.masked_fill(~mask, float("-inf"))
            # softmax in float32 whatever the scores' dtype, as mixed-precision training does.
            weights = dropout(weights.softmax(dim=-1, dtype=torch.float32).to(v.dtype), p, self.training)
            out = weights @ v
            if not self.residual:
                scores = None  # only RealFormer passes the raw scores on
        if group > 1:
            out = _unfold(out, group)
            scores = _unfold(scores, group) if scores is not None else None
        return out, scores

    def forward_packed(
        self, x: Tensor, query: Packing, keys: Packing, memory: Tensor | None = None, causal: bool = False
    ) -> Tensor:
        """Attend from packed `x` (N, d_model), laid out by `query`, to itself (self-attention;
        `causal`: each token sees its sentence's tokens up to itself) or to packed `memory`
        (cross-attention), laid out by `keys`: each sentence to its own keys only -> (N, d_model).
        Without RealFormer scores (`packing_supported`)."""
        n = x.shape[0]
        if self.self_attention:
            q, k, v = self.qkv_proj(x).split(
                [self.heads * self.d_k, self.heads * self.d_k, self.heads * self.d_v], dim=-1
            )
        else:
            assert memory is not None, "cross-attention needs the encoder output"
            q = self.q_proj(x)
            k, v = self.kv_proj(memory).split([self.heads * self.d_k, self.heads * self.d_v], dim=-1)
        q, k, v = (t.view(t.shape[0], self.heads, -1) for t in (q, k, v))  # (N, h, d)
        p = self.dropout if self.training else 0.0
        if _variable_length(q, p):
            window = (-1, 0) if causal else (-1, -1)
            out = cast(Tensor, cast(ModuleType, _varlen()).varlen_attn(
                q, k, v, query.offsets, keys.offsets, query.longest, keys.longest, window_size=window
            ))  # fmt: skip
        else:  # the padded layout for the call: a padded batch's attention, exactly
            mask = None if causal else keys.key_mask()
            padded, _ = self._attend(query.padded(q), keys.padded(k), keys.padded(v), mask, causal, None, 1)
            out = query.packed(padded)
        return self.out_proj(out.reshape(n, self.heads * self.d_v))


def _fold(x: Tensor, group: int) -> Tensor:
    """(B*G, h, T, X) -> (B, h, G*T, X): the G rows of a group side by side as query positions."""
    bg, h, t, last = x.shape
    return x.view(bg // group, group, h, t, last).transpose(1, 2).reshape(bg // group, h, group * t, last)


def _unfold(x: Tensor, group: int) -> Tensor:
    """The inverse of _fold: (B, h, G*T, X) -> (B*G, h, T, X)."""
    b, h, gt, last = x.shape
    return x.view(b, h, group, gt // group, last).transpose(1, 2).reshape(b * group, h, gt // group, last)
