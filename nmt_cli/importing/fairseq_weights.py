"""A fairseq transformer's state dict as nmt's: older layouts renamed as fairseq's own upgrade
renames them, each tensor put where nmt's model holds it (vocabularies renumbered), and tensors
the settings leave unused refused."""

from __future__ import annotations

import re
from pathlib import Path

import torch

from nmt_cli.config import ModelConfig
from nmt_cli.errors import InputError
from nmt_cli.importing.layers import norm, stacks
from nmt_cli.importing.vocabulary import Renumbering

# Layer norms by position in the layouts before fairseq 0.9, which fairseq still loads.
_OLD_NORMS = {
    "encoder": ("self_attn_layer_norm", "final_layer_norm"),
    "decoder": ("self_attn_layer_norm", "encoder_attn_layer_norm", "final_layer_norm"),
}


def upgraded(theirs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The state dict in fairseq 0.12's names, as fairseq's own upgrade makes it from the layout
    before 0.9: attention's stacked `in_proj_weight`/`in_proj_bias` split into q, k and v, a
    layer's `layer_norms.N` named by their position, and an output projection of its own
    (`decoder.embed_out`) named `decoder.output_projection.weight`."""
    out: dict[str, torch.Tensor] = {}
    for name, tensor in theirs.items():
        if name == "decoder.embed_out" and "decoder.output_projection.weight" not in theirs:
            name = "decoder.output_projection.weight"
        head, _, last = name.rpartition(".")
        if last in ("in_proj_weight", "in_proj_bias") and tensor.shape[0] % 3 == 0:
            kind = "weight" if last == "in_proj_weight" else "bias"
            for part, piece in zip(("q_proj", "k_proj", "v_proj"), tensor.chunk(3), strict=True):
                out[f"{head}.{part}.{kind}"] = piece
            continue
        parts = name.split(".")
        if len(parts) == 6 and parts[0] in _OLD_NORMS and parts[3] == "layer_norms" and parts[4].isdigit():
            names = _OLD_NORMS[parts[0]]
            if int(parts[4]) < len(names):
                name = ".".join([*parts[:3], names[int(parts[4])], parts[5]])
        out[name] = tensor
    return out


def converted(
    theirs: dict[str, torch.Tensor], cfg: ModelConfig, src: Renumbering, tgt: Renumbering, path: Path
) -> dict[str, torch.Tensor]:
    used: set[str] = set()

    def get(name: str) -> torch.Tensor:
        if name not in theirs:
            raise InputError(f"{path}: no {name} in the checkpoint; not a fairseq transformer of this shape")
        used.add(name)
        return theirs[name].float()

    out = {
        "src_embed.tokens.weight": src.take(get("encoder.embed_tokens.weight")),
        "tgt_embed.tokens.weight": tgt.take(get("decoder.embed_tokens.weight")),
    }
    if cfg.positions == "learned":
        # fairseq's learned positions also start at padding index + 1 = 2.
        for side, ours in (("encoder", "src_embed"), ("decoder", "tgt_embed")):
            out[f"{ours}.positions.weight"] = get(f"{side}.embed_positions.weight")[2 : 2 + cfg.max_positions]
    out |= stacks(get, cfg, "encoder.layers", "decoder.layers")
    if cfg.norm == "pre":
        out |= norm(get, "encoder_norm", "encoder.layer_norm")
        out |= norm(get, "decoder_norm", "decoder.layer_norm")
    if not cfg.share_embeddings:
        out["output_proj.weight"] = tgt.take(get("decoder.output_projection.weight"))
    if cfg.output_bias:
        out["output_bias"] = tgt.output_bias()
    if cfg.share_embeddings:
        used.add("decoder.output_projection.weight")  # the target embedding, tied
    _refuse_unused([name for name in theirs if name not in used], cfg, path)
    return out


# Tensors of fairseq's that hold no weights: version marks and the buffers of sinusoidal
# positions (`weights` before fairseq 0.9), which fairseq's own upgrade drops or remakes.
NOT_WEIGHTS = re.compile(
    r"(encoder|decoder)\.(version|embed_positions\._float_tensor|embed_positions\.weights)"
)


def _refuse_unused(unused: list[str], cfg: ModelConfig, path: Path) -> None:
    """Tensors the settings give no place (a layer more than encoder_layers says) mean that the
    settings and the weights disagree: fairseq's strict loading refuses such a checkpoint, and
    importing it would give another model than the one trained. Named by layer."""
    groups: dict[str, int] = {}
    for name in unused:
        if NOT_WEIGHTS.fullmatch(name):
            continue
        parts = name.split(".")
        key = ".".join(parts[:3]) + ".*" if len(parts) > 3 and parts[1] == "layers" else name
        groups[key] = groups.get(key, 0) + 1
    if groups:
        shown = [f"{key} ({count} tensors)" if count > 1 else key for key, count in groups.items()]
        more = f" and {len(shown) - 4} more" if len(shown) > 4 else ""
        raise InputError(
            f"{path}: its settings (encoder_layers = {cfg.encoder_layers}, decoder_layers = "
            f"{cfg.decoder_layers}) leave tensors unused: {', '.join(shown[:4])}{more}; the settings "
            "and the weights disagree, and fairseq refuses such a checkpoint too"
        )
