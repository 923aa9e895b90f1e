"""What fairseq's and Hugging Face's Marian Transformers share, in nmt's terms: how their sizes
become ModelConfig's, and their encoder and decoder layers under the names both use
(`self_attn.q_proj`, `encoder_attn`, `fc1`, `final_layer_norm`...) as nmt's state dict."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypedDict

import torch

from nmt_cli.config import ModelConfig

Getter = Callable[[str], torch.Tensor]
"""A tensor of the imported checkpoint by name; raises InputError when it is missing."""


class Sizes(TypedDict):
    encoder_layers: int
    decoder_layers: int
    d_model: int
    d_ff: int
    heads: int
    d_k: int
    d_v: int


def sizes(encoder_layers: int, decoder_layers: int, d_model: int, d_ff: int, heads: int) -> Sizes:
    """ModelConfig's sizes of an imported Transformer: fairseq and Marian split d_model evenly
    among the heads for queries, keys and values alike."""
    each = d_model // heads
    return Sizes(
        encoder_layers=encoder_layers, decoder_layers=decoder_layers, d_model=d_model, d_ff=d_ff,
        heads=heads, d_k=each, d_v=each,
    )  # fmt: skip


def stacks(get: Getter, cfg: ModelConfig, encoder: str, decoder: str) -> dict[str, torch.Tensor]:
    """nmt's layer weights from the layers under the prefixes `encoder` and `decoder` (e.g.
    "encoder.layers", "model.decoder.layers"). nmt's self-attention projects Q, K and V with one
    matrix, and cross-attention K and V with one: their rows are stacked in that order."""
    out: dict[str, torch.Tensor] = {}
    for i in range(cfg.encoder_layers):
        them, us = f"{encoder}.{i}", f"encoder.{i}"
        out |= _self_attention(get, f"{us}.self_attn", f"{them}.self_attn")
        out |= norm(get, f"{us}.attn_res.norm", f"{them}.self_attn_layer_norm")
        out |= _feed_forward(get, us, them)
    for i in range(cfg.decoder_layers):
        them, us = f"{decoder}.{i}", f"decoder.{i}"
        cross = f"{them}.encoder_attn"
        out |= _self_attention(get, f"{us}.self_attn", f"{them}.self_attn")
        out |= norm(get, f"{us}.self_res.norm", f"{them}.self_attn_layer_norm")
        out |= linear(get, f"{us}.cross_attn.q_proj", f"{cross}.q_proj")
        out |= linear(get, f"{us}.cross_attn.kv_proj", f"{cross}.k_proj", f"{cross}.v_proj")
        out |= linear(get, f"{us}.cross_attn.out_proj", f"{cross}.out_proj")
        out |= norm(get, f"{us}.cross_res.norm", f"{them}.encoder_attn_layer_norm")
        out |= _feed_forward(get, us, them)
    return out


def linear(get: Getter, ours: str, *names: str) -> dict[str, torch.Tensor]:
    """One nmt linear layer from one or more of theirs, rows stacked in the order given."""
    return {
        f"{ours}.weight": torch.cat([get(f"{name}.weight") for name in names]),
        f"{ours}.bias": torch.cat([get(f"{name}.bias") for name in names]),
    }


def norm(get: Getter, ours: str, name: str) -> dict[str, torch.Tensor]:
    return {f"{ours}.weight": get(f"{name}.weight"), f"{ours}.bias": get(f"{name}.bias")}


def _self_attention(get: Getter, ours: str, name: str) -> dict[str, torch.Tensor]:
    projections = (f"{name}.q_proj", f"{name}.k_proj", f"{name}.v_proj")
    return linear(get, f"{ours}.qkv_proj", *projections) | linear(get, f"{ours}.out_proj", f"{name}.out_proj")


def _feed_forward(get: Getter, ours: str, name: str) -> dict[str, torch.Tensor]:
    return (
        linear(get, f"{ours}.ffn.linear1", f"{name}.fc1")
        | linear(get, f"{ours}.ffn.linear2", f"{name}.fc2")
        | norm(get, f"{ours}.ffn_res.norm", f"{name}.final_layer_norm")
    )
