"""An nmt Transformer as a CTranslate2 model, built with CTranslate2's own spec API.

CTranslate2 describes a model as a tree of specs whose variables are filled with weights; its
`Converter` then validates, quantizes and saves the tree. This module fills that tree from a
model's state dict: both engines then decode the same weights. What the spec cannot express
(RealFormer scores, restricted attention, unequal head widths) is refused in one line naming the
recipe key. Imports numpy, torch, `config`, `errors`, `model.layers`; ctranslate2 on call.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from torch import Tensor

from nmt_cli.config import ModelConfig
from nmt_cli.errors import InputError
from nmt_cli.model.layers import sinusoidal_table

QUANTIZATIONS = ("none", "int8", "int8_float32", "int8_bfloat16", "int16", "float16", "bfloat16")

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


def write_model(
    cfg: ModelConfig,
    weights: dict[str, Tensor],
    pieces: tuple[list[str], list[str]],
    out_dir: Path,
    quantization: str,
) -> None:
    """Save a CTranslate2 model directory at `out_dir` (which must not exist); `pieces` are the
    source and target vocabularies, in id order."""
    reason = unsupported(cfg)
    if reason is not None:
        raise InputError(f"cannot export to CTranslate2: {reason}")
    from ctranslate2.converters import Converter

    spec = _transformer_spec(cfg, {k: v.detach().float().cpu().numpy() for k, v in weights.items()})
    spec.register_source_vocabulary(pieces[0])
    spec.register_target_vocabulary(pieces[1])

    class _Filled(Converter):  # the Converter API: _load() returns the spec to save
        def _load(self) -> Any:
            return spec

    _Filled().convert(str(out_dir), quantization=None if quantization == "none" else quantization)


def _transformer_spec(cfg: ModelConfig, w: dict[str, np.ndarray]) -> Any:
    from ctranslate2.specs import TransformerSpec, common_spec

    pre_norm = cfg.norm == "pre"
    spec = TransformerSpec.from_config(
        (cfg.encoder_layers, cfg.decoder_layers),
        cfg.heads,
        pre_norm=pre_norm,
        activation=common_spec.Activation.RELU,
    )
    # Source ids end in EOS and the target starts from BOS, as nmt's own batches do.
    spec.config.add_source_eos = True
    spec.config.decoder_start_token = SPECIAL_PIECES[2]
    spec.config.layer_norm_epsilon = 1e-5  # torch's LayerNorm default

    positions = _positions(cfg, w)
    enc, dec = spec.encoder, spec.decoder
    enc.embeddings[0].weight = w["src_embed.tokens.weight"]
    dec.embeddings.weight = w["tgt_embed.tokens.weight"]
    enc.scale_embeddings = dec.scale_embeddings = True  # x sqrt(d_model), §3.4
    enc.position_encodings.encodings = positions["src"]
    dec.position_encodings.encodings = positions["tgt"]
    proj = w.get("output_proj.weight", w["tgt_embed.tokens.weight"])  # tied unless it has its own
    dec.projection.weight = proj
    if pre_norm:
        _norm(enc.layer_norm, w, "encoder_norm")
        _norm(dec.layer_norm, w, "decoder_norm")

    for i, layer in enumerate(enc.layer):
        p = f"encoder.{i}."
        _linear(layer.self_attention.linear[0], w, p + "self_attn.qkv_proj")
        _linear(layer.self_attention.linear[1], w, p + "self_attn.out_proj")
        _norm(layer.self_attention.layer_norm, w, p + "attn_res.norm")
        _feed_forward(layer.ffn, w, p)
    for i, layer in enumerate(dec.layer):
        p = f"decoder.{i}."
        _linear(layer.self_attention.linear[0], w, p + "self_attn.qkv_proj")
        _linear(layer.self_attention.linear[1], w, p + "self_attn.out_proj")
        _norm(layer.self_attention.layer_norm, w, p + "self_res.norm")
        _linear(layer.attention.linear[0], w, p + "cross_attn.q_proj")
        _linear(layer.attention.linear[1], w, p + "cross_attn.kv_proj")
        _linear(layer.attention.linear[2], w, p + "cross_attn.out_proj")
        _norm(layer.attention.layer_norm, w, p + "cross_res.norm")
        _feed_forward(layer.ffn, w, p)
    return spec


def _positions(cfg: ModelConfig, w: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The position encodings each side adds, as a table CTranslate2 indexes by position."""
    if cfg.positions == "learned":
        return {"src": w["src_embed.positions.weight"], "tgt": w["tgt_embed.positions.weight"]}
    table = sinusoidal_table(cfg.max_positions, cfg.d_model).numpy()
    return {"src": table, "tgt": table}


def _linear(spec: Any, w: dict[str, np.ndarray], name: str) -> None:
    # nmt's fused projections stack Q, K, V (and K, V) rows in the order CTranslate2 expects.
    spec.weight = w[f"{name}.weight"]
    spec.bias = w[f"{name}.bias"]


def _norm(spec: Any, w: dict[str, np.ndarray], name: str) -> None:
    spec.gamma = w[f"{name}.weight"]
    spec.beta = w[f"{name}.bias"]


def _feed_forward(spec: Any, w: dict[str, np.ndarray], prefix: str) -> None:
    _linear(spec.linear_0, w, prefix + "ffn.linear1")
    _linear(spec.linear_1, w, prefix + "ffn.linear2")
    _norm(spec.layer_norm, w, prefix + "ffn_res.norm")
