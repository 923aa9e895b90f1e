"""One layer of the encoder stack and one of the decoder stack (§3.1): attention and
feed-forward sub-layers, each inside its residual connection and layer norm."""

from __future__ import annotations

from torch import Tensor, nn

from nmt_cli.config import ModelConfig
from nmt_cli.model.attention import MultiHeadAttention
from nmt_cli.model.kv_cache import KVCache, SelfCache
from nmt_cli.model.layers import FeedForward, Residual
from nmt_cli.model.packing import Packing


def _attention(cfg: ModelConfig, self_attention: bool) -> MultiHeadAttention:
    return MultiHeadAttention(
        cfg.d_model,
        cfg.heads,
        cfg.d_k,
        cfg.d_v,
        cfg.attention_dropout,
        self_attention,
        cfg.residual_attention,
    )


def _residual(cfg: ModelConfig) -> Residual:
    return Residual(cfg.d_model, cfg.dropout, pre_norm=cfg.norm == "pre")


def _feed_forward(cfg: ModelConfig) -> FeedForward:
    return FeedForward(cfg.d_model, cfg.d_ff, cfg.activation_dropout, cfg.activation)


ScorePair = tuple[Tensor | None, Tensor | None]
"""RealFormer's raw (self-attention, cross-attention) scores passed from layer to layer."""


class EncoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.self_attn = _attention(cfg, self_attention=True)
        self.attn_res = _residual(cfg)
        self.ffn = _feed_forward(cfg)
        self.ffn_res = _residual(cfg)

    def forward(self, x: Tensor, mask: Tensor, scores: Tensor | None) -> tuple[Tensor, Tensor | None]:
        out, _, scores = self.self_attn(self.attn_res.before(x), mask, prev_scores=scores)
        x = self.attn_res.after(x, out)
        x = self.ffn_res.after(x, self.ffn(self.ffn_res.before(x)))
        return x, scores

    def forward_packed(self, x: Tensor, sentences: Packing) -> Tensor:
        """The layer over packed tokens (N, d_model) laid out by `sentences`."""
        x = self.attn_res.after(
            x, self.self_attn.forward_packed(self.attn_res.before(x), sentences, sentences)
        )
        return self.ffn_res.after(x, self.ffn(self.ffn_res.before(x)))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.self_attn = _attention(cfg, self_attention=True)
        self.self_res = _residual(cfg)
        self.cross_attn = _attention(cfg, self_attention=False)
        self.cross_res = _residual(cfg)
        self.ffn = _feed_forward(cfg)
        self.ffn_res = _residual(cfg)

    def forward(
        self,
        x: Tensor,
        self_mask: Tensor | None,
        is_causal: bool,
        cache: SelfCache | None,
        memory_kv: KVCache,
        src_mask: Tensor,
        scores: ScorePair,
        group: int = 1,
        attended: list[Tensor] | None = None,
    ) -> tuple[Tensor, SelfCache | None, ScorePair]:
        """`scores`: RealFormer's raw self- and cross-attention scores of the layer below (None,
        None without RealFormer or in the first layer); `group`: hypotheses per memory row;
        `attended`, where given, receives the encoder-decoder attention probabilities (B, h, T, S)
        (`MultiHeadAttention.cross_weights`), padded positions masked."""
        self_scores, cross_scores = scores
        out, cache, self_scores = self.self_attn(
            self.self_res.before(x), self_mask, cache=cache, is_causal=is_causal, prev_scores=self_scores
        )
        x = self.self_res.after(x, out)
        query = self.cross_res.before(x)
        if attended is not None:
            attended.append(self.cross_attn.cross_weights(query, memory_kv, src_mask, cross_scores, group))
        out, _, cross_scores = self.cross_attn(
            query, src_mask, memory_kv=memory_kv, prev_scores=cross_scores, group=group
        )
        x = self.cross_res.after(x, out)
        x = self.ffn_res.after(x, self.ffn(self.ffn_res.before(x)))
        return x, cache, (self_scores, cross_scores)

    def forward_packed(self, x: Tensor, sentences: Packing, memory: Tensor, sources: Packing) -> Tensor:
        """The layer over packed target tokens (N, d_model) laid out by `sentences`, attending to
        the packed encoder output `memory` laid out by `sources`."""
        out = self.self_attn.forward_packed(self.self_res.before(x), sentences, sentences, causal=True)
        x = self.self_res.after(x, out)
        out = self.cross_attn.forward_packed(self.cross_res.before(x), sentences, sources, memory)
        x = self.cross_res.after(x, out)
        return self.ffn_res.after(x, self.ffn(self.ffn_res.before(x)))
