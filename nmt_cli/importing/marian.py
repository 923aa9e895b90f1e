"""Hugging Face Marian models (`MarianMTModel`: the OPUS-MT models) from a local directory:
`config.json`, `model.safetensors` or `pytorch_model.bin`, `source.spm`, `target.spm`,
`vocab.json` (and `target_vocab.json` when the vocabularies are separate).

Marian's conventions, as nmt expresses them: one id table for the pieces of both sentencepiece
models (</s> 0 and <unk> 1 in OPUS-MT, <pad> last; renumbered to nmt's order, with an unused row
for <s>, which Marian lacks; a <s> in every table is nmt's own, as in nmt's exports); the decoder
starts from the special that decoder_start_token_id names, <pad> in OPUS-MT (`decoder_start =
"pad"`), </s> or <s> otherwise; sinusoidal
positions from 0 with the sines in the first half ("sinusoidal-halves"); embeddings scaled by
sqrt(d) when `scale_embedding`; `final_logits_bias` on the output; swish in OPUS-MT's
feed-forward layers.

A directory nmt exported (`nmt export --format hf-marian`) says in config.json's "nmt_export" what
the export changed: nmt's own interleaved position layout, which the export reordered to Marian's
and the import orders back, and whether the model had an output bias at all. Its import gives
back the exported checkpoint's tensors.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from nmt_cli.config import MAX_POSITIONS, DecodeConfig, ModelConfig
from nmt_cli.data.tokenizer import LANGUAGE_CODES, LanguageCodes
from nmt_cli.errors import InputError, optional_import_failure
from nmt_cli.importing.imported import Imported
from nmt_cli.importing.layers import sizes, stacks
from nmt_cli.importing.round_trip import LAYOUTS, exported_by_nmt, interleaved, original_rows
from nmt_cli.importing.vocabulary import Renumbering, renumber, renumbered_model

ACTIVATIONS = {"swish": "swish", "silu": "swish", "gelu": "gelu", "relu": "relu"}
FILES = (
    "config.json",
    "generation_config.json",
    "tokenizer_config.json",
    "vocab.json",
    "target_vocab.json",
    "source.spm",
    "target.spm",
    "model.safetensors",
    "pytorch_model.bin",
)
"""Every file of a model directory that `read` may read: an output anywhere else in it is no input."""


def looks_like(source: Path) -> bool:
    config = source / "config.json"
    if not (source.is_dir() and config.is_file()):
        return False
    try:
        return json.loads(config.read_text(encoding="utf-8")).get("model_type") == "marian"
    except (OSError, ValueError, AttributeError):
        return False


def read(folder: Path) -> Imported:
    config = _json(folder / "config.json")
    tokenizer = (
        _json(folder / "tokenizer_config.json") if (folder / "tokenizer_config.json").is_file() else {}
    )
    separate = bool(tokenizer.get("separate_vocabs", False))
    src_ids = _vocabulary(folder / "vocab.json")
    tgt_ids = _vocabulary(folder / "target_vocab.json") if separate else src_ids
    specials = {
        "<pad>": str(tokenizer.get("pad_token", "<pad>")),
        "<unk>": str(tokenizer.get("unk_token", "<unk>")),
        "</s>": str(tokenizer.get("eos_token", "</s>")),
    }
    for name, piece in specials.items():
        if piece not in src_ids or piece not in tgt_ids:
            raise InputError(f"{folder}: the vocabulary has no {piece} ({name})")
    if "<s>" in src_ids and "<s>" in tgt_ids:  # an export of nmt's: its <s> is nmt's own, no piece
        specials["<s>"] = "<s>"
    source_spm, target_spm = _read(folder / "source.spm"), _read(folder / "target.spm")
    names = [str(folder / "source.spm"), str(folder / "target.spm")]
    if separate:
        src = renumber(src_ids, specials, [source_spm], names[:1])
        tgt = renumber(tgt_ids, specials, [target_spm], names[1:])
    else:  # one table for both sides: each model's pieces are in it
        src = tgt = renumber(src_ids, specials, [source_spm, target_spm], names)
    # The decoder may start from any special nmt has: <pad> (OPUS-MT), </s> or <s> (nmt's exports).
    named = {"<pad>": "pad", "</s>": "eos", "<s>": "bos"}
    starts = {name: tgt_ids.index(specials[piece]) for piece, name in named.items() if piece in specials}
    cfg = _config(config, folder, src, tgt, separate, starts)
    theirs = _tensors(folder)
    if cfg.positions == LAYOUTS["interleaved"]:
        theirs = interleaved(theirs, cfg.d_model)
    weights = _weights(theirs, cfg, config, src, tgt, folder)
    spm = {
        # generate's output decoded with skip_special_tokens, as OPUS-MT is used: <unk> is dropped.
        "src": renumbered_model(source_spm, src.pieces, f"{folder / 'source.spm'}", ""),
        "tgt": renumbered_model(target_spm, tgt.pieces, f"{folder / 'target.spm'}", ""),
    }
    decode = _decode(folder, config)
    languages = _languages(folder, tokenizer)
    # Multilingual models: a leading >>xx<< picks the target language, as MarianTokenizer reads it.
    coded = any(LanguageCodes.CODE.fullmatch(piece) for piece in src_ids)
    tokenizers = {"src": {"kind": LANGUAGE_CODES}} if coded else None
    origin = {
        "toolkit": "marian",
        "path": str(folder.resolve()),
        "name": str(config.get("_name_or_path", "")),
        # so that `nmt export --format hf-marian` gives back these files' tensors, rows in their order
        "marian_rows": {"src": original_rows(src), "tgt": original_rows(tgt)},
    }
    return Imported(cfg, weights, spm, languages, decode, origin, tokenizers)


def _decode(folder: Path, config: dict[str, Any]) -> DecodeConfig:
    """The search transformers' generate makes with the model: its beam, length penalty and length
    limit, from generation_config.json and config.json."""
    generation = (
        _json(folder / "generation_config.json") if (folder / "generation_config.json").is_file() else {}
    )
    # generation_config.json first, as transformers' generate reads them; config.json's otherwise.
    generate_keys = ("num_beams", "max_length", "length_penalty", "early_stopping")
    settings = {k: config[k] for k in generate_keys if k in config} | generation
    max_length = int(settings.get("max_length") or config.get("max_position_embeddings", 1024))
    if max_length < 3:  # the start token and </s> count: nothing would be left for a translation
        key = "max_length" if settings.get("max_length") else "max_position_embeddings"
        named = "generation_config.json" if key in generation else "config.json"
        raise InputError(
            f"{folder / named}: {key} = {max_length}: generate counts the start token and </s> in "
            "it, which leaves no room for a translation; nmt needs at least 3"
        )
    # generate's max_length counts the start token: max_length - 1 generated, </s> included.
    return DecodeConfig(
        beam=int(settings.get("num_beams") or 4),
        lenpen=float(settings.get("length_penalty", 1.0)),
        lenpen_style="fairseq",
        max_len_a=0.0,
        max_len_b=max(0, max_length - 2),
        min_len=1,
        # Unset in OPUS-MT's configs: generate then searches on while a hypothesis could improve.
        early_stopping=settings.get("early_stopping") is True,
    )


def _json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise InputError(f"{path}: cannot read ({err.strerror})") from None
    except ValueError as err:
        raise InputError(f"{path}: not valid JSON ({err})") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: not a JSON object")
    return data


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as err:
        raise InputError(f"{path}: cannot read the sentencepiece model ({err.strerror})") from None


def _vocabulary(path: Path) -> list[str]:
    """vocab.json's pieces by id; every id from 0 to the largest must be there once."""
    table = _json(path)
    if not all(isinstance(i, int) and not isinstance(i, bool) for i in table.values()):
        raise InputError(f"{path}: not a piece -> id table")
    if table and not 0 <= min(table.values()) <= max(table.values()) < len(table):
        raise InputError(f"{path}: the ids are not 0..N-1, each once (N = {len(table):,} pieces)")
    pieces: list[str | None] = [None] * (max(table.values(), default=-1) + 1)
    for piece, i in table.items():
        pieces[i] = piece
    if not pieces or any(piece is None for piece in pieces) or len(table) != len(pieces):
        raise InputError(f"{path}: the ids are not 0..N-1, each once")
    return [str(piece) for piece in pieces]


def _languages(folder: Path, tokenizer: dict[str, Any]) -> tuple[str, str] | None:
    src, tgt = tokenizer.get("source_lang"), tokenizer.get("target_lang")
    if isinstance(src, str) and isinstance(tgt, str) and src and tgt:
        return src, tgt
    parts = folder.resolve().name.split("-")  # opus-mt-en-de
    return (parts[-2], parts[-1]) if len(parts) >= 4 and parts[-4:-2] == ["opus", "mt"] else None


def _config(
    config: dict[str, Any],
    folder: Path,
    src: Renumbering,
    tgt: Renumbering,
    separate: bool,
    starts: dict[str, int],
) -> ModelConfig:
    def get(name: str, default: Any) -> Any:
        """A setting of config.json; one it leaves out has MarianConfig's default, as in transformers."""
        return config.get(name, default)

    where = folder / "config.json"
    problems = []  # every setting nmt cannot hold, in one message (as CTranslate2's converters)
    heads = int(get("encoder_attention_heads", 16))
    d = int(get("d_model", 1024))
    if int(get("decoder_attention_heads", 16)) != heads:
        problems.append("encoder and decoder attention heads differ; nmt has one head count")
    elif heads < 1 or d % heads:
        problems.append(f"{heads} attention heads do not divide d_model = {d}")
    if int(get("encoder_ffn_dim", 4096)) != int(get("decoder_ffn_dim", 4096)):
        problems.append("encoder and decoder feed-forward widths differ; nmt has one d_ff")
    activation = ACTIVATIONS.get(str(get("activation_function", "gelu")))
    if activation is None:
        problems.append(f"activation_function {get('activation_function', '')!r}: nmt has swish, gelu, relu")
    if (
        get("normalize_before", False)
        or get("add_final_layer_norm", False)
        or get("normalize_embedding", False)
    ):
        problems.append("pre-norm or extra layer norms; nmt imports Marian's post-norm models")
    start_id = int(get("decoder_start_token_id", starts["pad"]))
    start = next((name for name, i in starts.items() if i == start_id), None)
    if start is None:
        problems.append(
            "decoder_start_token_id is not the id of <pad>, </s> or <s>; nmt starts from one of them"
        )
    positions = int(get("max_position_embeddings", 1024))
    if not 1 <= positions <= MAX_POSITIONS:
        problems.append(f"max_position_embeddings = {positions:,}; nmt holds from 1 to {MAX_POSITIONS:,}")
    if problems or activation is None or start is None:
        raise InputError(f"{where}: " + "; ".join(problems))
    layout, output_bias = exported_by_nmt(config, where)
    layers = (int(get("encoder_layers", 12)), int(get("decoder_layers", 12)))
    return ModelConfig(
        **sizes(*layers, d, int(get("encoder_ffn_dim", 4096)), heads),
        dropout=float(get("dropout", 0.1)),
        attention_dropout=float(get("attention_dropout", 0.0)),
        activation_dropout=float(get("activation_dropout", 0.0)),
        norm="post",
        positions=layout,
        share_embeddings=bool(get("tie_word_embeddings", True)),
        max_positions=positions,
        src_vocab_size=len(src.pieces),
        tgt_vocab_size=len(tgt.pieces),
        joint_vocab=not separate and bool(get("share_encoder_decoder_embeddings", True)),
        activation=activation,
        scale_embeddings=bool(get("scale_embedding", False)),
        output_bias=output_bias,
        decoder_start=start,
    )


def _tensors(folder: Path) -> dict[str, torch.Tensor]:
    if (folder / "model.safetensors").is_file():
        try:
            from safetensors.torch import load_file
        except ImportError as err:
            missing = 'reading model.safetensors needs safetensors: pip install "nmt-cli[import]"'
            raise optional_import_failure(err, missing, "safetensors") from None
        try:
            return load_file(str(folder / "model.safetensors"))
        except Exception as err:  # noqa: BLE001 - safetensors' own error types
            raise InputError(f"{folder / 'model.safetensors'}: not readable ({err})") from None
    path = folder / "pytorch_model.bin"
    if not path.is_file():
        raise InputError(f"{folder}: no model.safetensors or pytorch_model.bin")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - any unpickling failure of a foreign file
        raise InputError(
            f"{path}: not a weights file that can be read safely ({type(err).__name__})"
        ) from None
    if not isinstance(state, dict):
        raise InputError(f"{path}: not a state dict")
    for name, value in state.items():
        if not isinstance(value, torch.Tensor):
            raise InputError(f"{path}: its weight {name} is a {type(value).__name__}, not a tensor")
    return state


def _weights(
    theirs: dict[str, torch.Tensor],
    cfg: ModelConfig,
    config: dict[str, Any],
    src: Renumbering,
    tgt: Renumbering,
    folder: Path,
) -> dict[str, torch.Tensor]:
    def get(*names: str) -> torch.Tensor:
        for name in names:
            if name in theirs:
                return theirs[name].float()
        raise InputError(f"{folder}: no {names[0]} in the weights; not a MarianMTModel of this shape")

    src_embed = get("model.encoder.embed_tokens.weight", "model.shared.weight")
    tgt_embed = get("model.decoder.embed_tokens.weight", "model.shared.weight")
    for side, table, embed in (("source", src, src_embed), ("target", tgt, tgt_embed)):
        if embed.dim() != 2 or table.largest_id() >= embed.shape[0]:
            # transformers indexes the embedding by the vocabulary's ids: it would fail the same way.
            raise InputError(
                f"{folder}: the {side} vocabulary has ids up to {table.largest_id():,}, but the embedding "
                f"has {embed.shape[0] if embed.dim() else 0:,} rows; give the vocab.json of these weights"
            )
    out = {
        "src_embed.tokens.weight": src.take(src_embed),
        "tgt_embed.tokens.weight": tgt.take(tgt_embed),
    }
    if cfg.output_bias:  # left out only for a model nmt exported without one
        out["output_bias"] = tgt.output_bias(get("final_logits_bias").reshape(-1))
    out |= stacks(get, cfg, "model.encoder.layers", "model.decoder.layers")
    if not cfg.share_embeddings:
        out["output_proj.weight"] = tgt.take(get("lm_head.weight"))
    return out
