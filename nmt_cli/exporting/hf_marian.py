"""An nmt Transformer as a Hugging Face Marian model (`transformers.MarianMTModel`, OPUS-MT's format).

The reverse of `importing.marian`: nmt's state dict under transformers' names (`importing.layers`
lists both), separate Q, K and V projections where nmt fuses them, one id table per side read
from the model's own sentencepiece models (`vocab.json`, and `target_vocab.json` when the
vocabularies are separate), and a config that gives transformers' MarianMTModel the same
network: post-norm, sinusoidal positions from 0, the model's embedding scaling and tying, its
decoder start and its output bias (`final_logits_bias`).

Marian lays its positions out as all sines, then all cosines ("sinusoidal-halves"); nmt's own
models interleave them (the paper's §3.5). Both hold the same frequencies, so the exported
network is nmt's with the d_model coordinates reordered (`to_halves`): every weight that reads
or writes the residual stream is permuted alike, which changes no output but the rounding of sums.
config.json records that reordering, and whether nmt's model had an output bias (Marian always
has one: the export writes zeros where nmt had none), under "nmt_export"; `nmt import` reads it
to give back the original tensors, and transformers keeps the key without reading it. The other
way round, a model nmt imported from Hugging Face goes back to its files' row order and special
ids (`in_original_order`, from the order the import recorded).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from nmt_cli.config import DecodeConfig, ModelConfig
from nmt_cli.special_ids import BOS_ID, EOS_ID, PAD_ID, UNK_ID

FILES = (
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "source.spm",
    "target.spm",
    "vocab.json",
    "target_vocab.json",
    "tokenizer_config.json",
)
"""Every file an export may write: `nmt export --force` replaces a directory holding only these."""
REQUIRED = ("config.json", "model.safetensors")
ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "swish": "swish"}  # torch's exact GELU, as transformers'
POSITIONS = ("sinusoidal", "sinusoidal-halves")
NMT_EXPORT = "nmt_export"
"""config.json's key for what the export changed of nmt's network (see the module's docstring)."""

# nmt's weights by the role of the d_model axis in them: read from the residual stream (columns),
# written to it (rows), or elementwise over it. Names end so in `Transformer.state_dict()`.
_READ = (
    "tokens.weight",
    "output_proj.weight",
    "qkv_proj.weight",
    "q_proj.weight",
    "kv_proj.weight",
    "linear1.weight",
)
_WRITE = ("out_proj.weight", "out_proj.bias", "linear2.weight", "linear2.bias", "norm.weight", "norm.bias")


def unsupported(cfg: ModelConfig, shortlist: bool, moses: bool) -> str | None:
    """What transformers' MarianMTModel cannot hold of this model (naming the recipe key), or None."""
    window, positions = cfg.attention_window, cfg.positions
    heads_fit = cfg.d_k == cfg.d_v and cfg.heads * cfg.d_k == cfg.d_model
    reasons = [
        (cfg.residual_attention, "model.residual_attention = true: Marian has no RealFormer scores"),
        (window > 0, f"model.attention_window = {window}: Marian has no restricted attention"),
        (cfg.norm == "pre", 'model.norm = "pre": Marian in transformers is post-norm only'),
        (positions not in POSITIONS, f'model.positions = "{positions}": Marian has sinusoidal ones from 0'),
        (
            not heads_fit,
            f"model.d_k = {cfg.d_k}, model.d_v = {cfg.d_v}: Marian's heads are d_model / heads wide",
        ),
        (shortlist, "a vocabulary shortlist (`nmt shortlist`): export the checkpoint it was made from"),
        (moses, "a Moses + BPE tokenizer: MarianTokenizer reads sentencepiece models"),
    ]
    return next((reason for present, reason in reasons if present), None)


def halves_order(d_model: int) -> list[int]:
    """The interleaved coordinate each coordinate of Marian's layout holds: sines, then cosines."""
    return [*range(0, d_model, 2), *range(1, d_model, 2)]


def to_halves(state: dict[str, torch.Tensor], order: list[int]) -> dict[str, torch.Tensor]:
    """nmt's `state` with the residual stream's coordinates in `order` (`halves_order`; its
    inverse turns an export back): the same network in Marian's position layout."""
    out = {}
    for name, tensor in state.items():
        if name.endswith(_READ):
            out[name] = tensor[:, order]
        elif name.endswith(_WRITE):
            out[name] = tensor[order]
        else:
            out[name] = tensor
    return out


def tensors(state: dict[str, torch.Tensor], cfg: ModelConfig, shared: bool) -> dict[str, torch.Tensor]:
    """MarianMTModel's state dict from nmt's (already in Marian's position layout). `shared`: one
    embedding for both sides (`model.shared`), tied to the output as well."""
    out: dict[str, torch.Tensor] = {}
    if shared:
        out["model.shared.weight"] = state["src_embed.tokens.weight"]
    else:
        out["model.encoder.embed_tokens.weight"] = state["src_embed.tokens.weight"]
        out["model.decoder.embed_tokens.weight"] = state["tgt_embed.tokens.weight"]
    if "output_proj.weight" in state:
        out["lm_head.weight"] = state["output_proj.weight"]
    bias = state.get("output_bias", torch.zeros(cfg.tgt_vocab_size))
    out["final_logits_bias"] = bias.reshape(1, -1)
    for i in range(cfg.encoder_layers):
        out |= _self_attention(state, f"encoder.{i}", f"model.encoder.layers.{i}", "attn_res")
        out |= _feed_forward(state, f"encoder.{i}", f"model.encoder.layers.{i}")
    for i in range(cfg.decoder_layers):
        ours, theirs = f"decoder.{i}", f"model.decoder.layers.{i}"
        out |= _self_attention(state, ours, theirs, "self_res")
        cross = f"{theirs}.encoder_attn"
        out |= _linear(state, f"{ours}.cross_attn.q_proj", f"{cross}.q_proj")
        out |= _linear(state, f"{ours}.cross_attn.kv_proj", f"{cross}.k_proj", f"{cross}.v_proj")
        out |= _linear(state, f"{ours}.cross_attn.out_proj", f"{cross}.out_proj")
        out |= _norm(state, f"{ours}.cross_res.norm", f"{cross}_layer_norm")
        out |= _feed_forward(state, ours, theirs)
    # safetensors stores each tensor once and whole: no views into another's storage.
    return {name: tensor.detach().float().contiguous().clone() for name, tensor in out.items()}


def _linear(state: dict[str, torch.Tensor], ours: str, *names: str) -> dict[str, torch.Tensor]:
    """One nmt linear layer as one or more of theirs: its rows split evenly, in the order given."""
    weights = state[f"{ours}.weight"].chunk(len(names))
    biases = state[f"{ours}.bias"].chunk(len(names))
    out = {}
    for name, weight, bias in zip(names, weights, biases, strict=True):
        out[f"{name}.weight"], out[f"{name}.bias"] = weight, bias
    return out


def _norm(state: dict[str, torch.Tensor], ours: str, name: str) -> dict[str, torch.Tensor]:
    return {f"{name}.weight": state[f"{ours}.weight"], f"{name}.bias": state[f"{ours}.bias"]}


def _self_attention(
    state: dict[str, torch.Tensor], ours: str, theirs: str, residual: str
) -> dict[str, torch.Tensor]:
    name = f"{theirs}.self_attn"
    projections = (f"{name}.q_proj", f"{name}.k_proj", f"{name}.v_proj")
    return (
        _linear(state, f"{ours}.self_attn.qkv_proj", *projections)
        | _linear(state, f"{ours}.self_attn.out_proj", f"{name}.out_proj")
        | _norm(state, f"{ours}.{residual}.norm", f"{name}_layer_norm")
    )


def _feed_forward(state: dict[str, torch.Tensor], ours: str, theirs: str) -> dict[str, torch.Tensor]:
    return (
        _linear(state, f"{ours}.ffn.linear1", f"{theirs}.fc1")
        | _linear(state, f"{ours}.ffn.linear2", f"{theirs}.fc2")
        | _norm(state, f"{ours}.ffn_res.norm", f"{theirs}.final_layer_norm")
    )


def model_config(cfg: ModelConfig, shared: bool) -> dict[str, Any]:
    """config.json: MarianConfig's keys for this network (post-norm is Marian's only kind)."""
    return {
        "architectures": ["MarianMTModel"],
        "model_type": "marian",
        "vocab_size": cfg.src_vocab_size,
        "decoder_vocab_size": cfg.tgt_vocab_size,
        "share_encoder_decoder_embeddings": shared,
        "tie_word_embeddings": cfg.share_embeddings,
        "d_model": cfg.d_model,
        "encoder_layers": cfg.encoder_layers,
        "decoder_layers": cfg.decoder_layers,
        "encoder_attention_heads": cfg.heads,
        "decoder_attention_heads": cfg.heads,
        "encoder_ffn_dim": cfg.d_ff,
        "decoder_ffn_dim": cfg.d_ff,
        "activation_function": ACTIVATIONS[cfg.activation],
        "dropout": cfg.dropout,
        "attention_dropout": cfg.attention_dropout,
        "activation_dropout": cfg.activation_dropout,
        "max_position_embeddings": cfg.max_positions,
        "scale_embedding": cfg.scale_embeddings,
        "pad_token_id": PAD_ID,
        "eos_token_id": EOS_ID,
        "bos_token_id": BOS_ID,
        "decoder_start_token_id": cfg.start_id,
        "forced_eos_token_id": EOS_ID,
        "is_encoder_decoder": True,
        NMT_EXPORT: {
            "position_layout": "interleaved" if cfg.positions == "sinusoidal" else "halves",
            "output_bias": cfg.output_bias,
        },
    }


def generation_config(cfg: ModelConfig, decode: DecodeConfig) -> dict[str, Any]:
    """generation_config.json: nmt's search as generate's settings. generate's max_length counts
    the decoder's start token; it is one number for every source, so a limit that grows with the
    source (decode.max_len_a > 0) becomes the longest source's, as `nmt export` writes for
    CTranslate2. At that limit nmt forces </s> when it stops early (forced_eos_token_id), and ends
    a hypothesis as it stands otherwise, as generate does without it. nmt never outputs <pad> or
    <s>; generate is told so (bad_words_ids)."""
    longest = cfg.max_positions - 1  # source pieces before </s> that the positions hold
    limit = min(int(decode.max_len_a * longest) + decode.max_len_b + 1, cfg.max_positions)  # </s> in
    return {
        "decoder_start_token_id": cfg.start_id,
        "pad_token_id": PAD_ID,
        "eos_token_id": EOS_ID,
        "bos_token_id": BOS_ID,
        "forced_eos_token_id": EOS_ID if decode.early_stopping else None,
        "bad_words_ids": [[PAD_ID], [BOS_ID]],
        "num_beams": decode.beam,
        "length_penalty": decode.lenpen,
        "early_stopping": decode.early_stopping,
        "max_length": limit + 1,
        "min_length": decode.min_len + 1,
    }


def tokenizer_config(separate: bool, languages: tuple[str, str] | None, max_positions: int) -> dict[str, Any]:
    """tokenizer_config.json: MarianTokenizer's settings, nmt's special pieces among them."""
    pieces = ("<pad>", "<unk>", "<s>", "</s>")
    assert (PAD_ID, UNK_ID, BOS_ID, EOS_ID) == (0, 1, 2, 3), "the pieces above are in id order"
    return {
        "tokenizer_class": "MarianTokenizer",
        "separate_vocabs": separate,
        "source_lang": languages[0] if languages else None,
        "target_lang": languages[1] if languages else None,
        "pad_token": pieces[PAD_ID],
        "unk_token": pieces[UNK_ID],
        "eos_token": pieces[EOS_ID],
        "model_max_length": max_positions,
    }


def write(
    folder: Path,
    weights: dict[str, torch.Tensor],
    configs: tuple[dict[str, Any], dict[str, Any], dict[str, Any]],
    models: tuple[bytes, bytes],
    pieces: tuple[list[str], list[str]],
) -> None:
    """The export's files into the (new, empty) `folder`: the MarianMTModel `weights`, its
    config, generation and tokenizer configs (`configs`, in that order), and the source and
    target sentencepiece models with their id tables (`pieces`, nmt's pieces by id)."""
    from safetensors.torch import save_file

    save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})
    for name, content in zip(
        ("config.json", "generation_config.json", "tokenizer_config.json"), configs, strict=True
    ):
        (folder / name).write_text(json.dumps(content, indent=2) + "\n", encoding="utf-8")
    (folder / "source.spm").write_bytes(models[0])
    (folder / "target.spm").write_bytes(models[1])
    (folder / "vocab.json").write_text(_id_table(pieces[0]), encoding="utf-8")
    if configs[2]["separate_vocabs"]:
        (folder / "target_vocab.json").write_text(_id_table(pieces[1]), encoding="utf-8")


def _id_table(pieces: list[str]) -> str:
    """vocab.json: each piece's id, which in nmt's sentencepiece models is its place in the model."""
    return json.dumps({piece: i for i, piece in enumerate(pieces)}, ensure_ascii=False, indent=2) + "\n"


def in_original_order(
    weights: dict[str, torch.Tensor],
    configs: tuple[dict[str, Any], dict[str, Any], dict[str, Any]],
    pieces: tuple[list[str], list[str]],
    imported_from: dict[str, Any] | None,
) -> tuple[
    dict[str, torch.Tensor],
    tuple[dict[str, Any], dict[str, Any], dict[str, Any]],
    tuple[list[str], list[str]],
]:
    """An imported Hugging Face Marian model's export with its rows, id tables and special ids
    back in the order of the files it came from ("marian_rows", which `nmt import` records):
    the same tensors as those files. The rows nmt added (<s>, the pieces of the sentencepiece
    models the original table lacked, which it read as <unk>) are left out again. Anything
    else (nmt's own models, or a record that does not fit these weights) is returned as it is."""
    rows = (imported_from or {}).get("marian_rows")
    src, tgt = (rows.get("src"), rows.get("tgt")) if isinstance(rows, dict) else (None, None)
    if not (_fits(src, len(pieces[0])) and _fits(tgt, len(pieces[1]))):
        return weights, configs, pieces
    assert src is not None and tgt is not None  # _fits says so
    source, target = torch.tensor(src), torch.tensor(tgt)
    shared = "model.shared.weight" in weights
    if shared and src != tgt:  # one embedding serves both sides: one order
        return weights, configs, pieces
    by_side = {
        "model.shared.weight": source,
        "model.encoder.embed_tokens.weight": source,
        "model.decoder.embed_tokens.weight": target,
        "lm_head.weight": target,
    }
    out = {name: tensor[by_side[name]] if name in by_side else tensor for name, tensor in weights.items()}
    out["final_logits_bias"] = weights["final_logits_bias"][:, target]
    out = {name: tensor.contiguous() for name, tensor in out.items()}  # safetensors stores them whole
    ids = {nmt_id: i for i, nmt_id in enumerate(tgt)}  # the target side's special ids, as the files had them
    model, generation, tokenizer = (dict(config) for config in configs)
    model |= {"vocab_size": len(src), "decoder_vocab_size": len(tgt)}
    for config in (model, generation):
        for key in (
            "pad_token_id",
            "eos_token_id",
            "bos_token_id",
            "decoder_start_token_id",
            "forced_eos_token_id",
        ):
            if config.get(key) is not None:
                config[key] = ids.get(config[key])  # None for <s>, which Marian's tables lack
    generation["bad_words_ids"] = [[ids[i]] for (i,) in generation["bad_words_ids"] if i in ids]
    return out, (model, generation, tokenizer), ([pieces[0][i] for i in src], [pieces[1][i] for i in tgt])


def _fits(rows: object, size: int) -> bool:
    """A list of distinct nmt ids below `size`."""
    return (
        isinstance(rows, list)
        and all(isinstance(i, int) and 0 <= i < size for i in rows)
        and len(set(rows)) == len(rows)
    )
