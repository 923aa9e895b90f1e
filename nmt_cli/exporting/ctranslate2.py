"""An nmt Transformer as a CTranslate2 model, described with CTranslate2's own spec API.

CTranslate2 describes a model as a tree of specs whose variables are filled with weights; its
`Converter` then validates, quantizes and saves the tree (`nmt export` does that). This module
fills the tree from the model's modules, attribute by attribute as CTranslate2's own converters
do, so that a renamed layer fails here and in mypy, not in a saved model: both engines then decode
the same weights. What the spec cannot express (RealFormer scores, restricted attention, unequal
head widths) is named by `unsupported`. ctranslate2 is imported on call (an optional extra).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from torch import Tensor, nn

from nmt_cli.config import ModelConfig
from nmt_cli.model.attention import MultiHeadAttention
from nmt_cli.model.layers import Embedding, FeedForward
from nmt_cli.model.transformer import Transformer

SPECIAL_PIECES = ("<pad>", "<unk>", "<s>", "</s>")
"""The pieces of ids 0-3 (config.PAD_ID, UNK_ID, BOS_ID, EOS_ID), named as CTranslate2 expects."""


def unsupported(cfg: ModelConfig) -> str | None:
    """Why CTranslate2 cannot represent this model (naming the recipe key), or None."""
    if cfg.residual_attention:
        return "model.residual_attention = true (RealFormer scores): CTranslate2 has no residual attention"
    if cfg.attention_window > 0:
        return f"model.attention_window = {cfg.attention_window}: CTranslate2 has no restricted attention"
    if cfg.d_k != cfg.d_v:
        return f"model.d_k = {cfg.d_k} and model.d_v = {cfg.d_v}: CTranslate2 needs equal head widths"
    if cfg.heads * cfg.d_k != cfg.d_model:
        return (
            f"model.heads x model.d_k = {cfg.heads * cfg.d_k}, not model.d_model = {cfg.d_model}: "
            "CTranslate2 needs d_model = heads x d_k"
        )
    return None


def transformer_spec(model: Transformer, pieces: tuple[list[str], list[str]]) -> Any:
    """CTranslate2's TransformerSpec of `model` with its source and target vocabularies (`pieces`,
    in id order), ready for a Converter. Raises ValueError for what `unsupported` names."""
    cfg = model.cfg
    reason = unsupported(cfg)
    if reason is not None:
        raise ValueError(reason)
    from ctranslate2.specs import TransformerSpec, common_spec

    pre_norm = cfg.norm == "pre"
    activations = {
        "relu": common_spec.Activation.RELU,
        "gelu": common_spec.Activation.GELU,
        "swish": common_spec.Activation.SWISH,
    }
    spec = TransformerSpec.from_config(
        (cfg.encoder_layers, cfg.decoder_layers),
        cfg.heads,
        pre_norm=pre_norm,
        activation=activations[cfg.activation],
    )
    # Source ids end in EOS and the target starts from the model's start token, as nmt's batches do.
    spec.config.add_source_eos = True
    spec.config.decoder_start_token = SPECIAL_PIECES[cfg.start_id]
    spec.config.layer_norm_epsilon = 1e-5  # torch's LayerNorm default

    enc, dec = spec.encoder, spec.decoder
    enc.embeddings[0].weight = _array(model.src_embed.tokens.weight)
    dec.embeddings.weight = _array(model.tgt_embed.tokens.weight)
    enc.scale_embeddings = dec.scale_embeddings = cfg.scale_embeddings  # x sqrt(d_model), §3.4
    enc.position_encodings.encodings = _positions(model.src_embed)
    dec.position_encodings.encodings = _positions(model.tgt_embed)
    # The pre-softmax weights are the target embedding unless the model has a projection of its own.
    projection = model.output_proj.weight if model.output_proj is not None else model.tgt_embed.tokens.weight
    dec.projection.weight = _array(projection)
    if model.output_bias is not None:
        dec.projection.bias = _array(model.output_bias)
    if pre_norm:
        _norm(enc.layer_norm, model.encoder_norm)
        _norm(dec.layer_norm, model.decoder_norm)

    for ours, theirs in zip(model.encoder_layers, enc.layer, strict=True):
        _self_attention(theirs.self_attention, ours.self_attn)
        _norm(theirs.self_attention.layer_norm, ours.attn_res.norm)
        _feed_forward(theirs.ffn, ours.ffn, ours.ffn_res.norm)
    for block, theirs in zip(model.decoder_layers, dec.layer, strict=True):
        _self_attention(theirs.self_attention, block.self_attn)
        _norm(theirs.self_attention.layer_norm, block.self_res.norm)
        _linear(theirs.attention.linear[0], block.cross_attn.q_proj)
        _linear(theirs.attention.linear[1], block.cross_attn.kv_proj)
        _linear(theirs.attention.linear[2], block.cross_attn.out_proj)
        _norm(theirs.attention.layer_norm, block.cross_res.norm)
        _feed_forward(theirs.ffn, block.ffn, block.ffn_res.norm)
    spec.register_source_vocabulary(pieces[0])
    spec.register_target_vocabulary(pieces[1])
    return spec


def _array(weight: Tensor) -> np.ndarray:
    return weight.detach().float().cpu().numpy()


def _positions(embed: Embedding) -> np.ndarray:
    """The position encodings a side adds, as a table CTranslate2 indexes by position."""
    return _array(embed.positions.weight if embed.learned else embed.table)


def _self_attention(spec: Any, attention: MultiHeadAttention) -> None:
    # nmt's fused projection stacks the Q, K and V rows in the order CTranslate2 expects.
    _linear(spec.linear[0], attention.qkv_proj)
    _linear(spec.linear[1], attention.out_proj)


def _linear(spec: Any, linear: nn.Linear) -> None:
    spec.weight = _array(linear.weight)
    spec.bias = _array(linear.bias)


def _norm(spec: Any, norm: nn.LayerNorm | nn.Module) -> None:
    assert isinstance(norm, nn.LayerNorm), "pre-norm stacks end in a LayerNorm"
    spec.gamma = _array(norm.weight)
    spec.beta = _array(norm.bias)


def _feed_forward(spec: Any, ffn: FeedForward, norm: nn.LayerNorm) -> None:
    _linear(spec.linear_0, ffn.linear1)
    _linear(spec.linear_1, ffn.linear2)
    _norm(spec.layer_norm, norm)
