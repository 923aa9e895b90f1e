"""fairseq `transformer` checkpoints (post- or pre-norm, shared or separate embeddings) with
their dictionaries and sentencepiece model.

The checkpoint is read with torch's weights-only unpickler, which admits tensors and plain
containers; fairseq's config is an `argparse.Namespace` (older checkpoints) or dicts, and
Namespace is the one class added. fairseq itself is never imported.

fairseq's conventions, as nmt expresses them: dictionary ids <s> 0, <pad> 1, </s> 2, <unk> 3
(renumbered to nmt's pad 0, unk 1, bos 2, eos 3); sources end in </s> and the decoder starts from
</s> (`decoder_start = "eos"`); sinusoidal positions in halves counted from 2
("sinusoidal-fairseq"); embeddings scaled by sqrt(d) unless `no_scale_embedding`.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import torch

from nmt_cli.config import ACTIVATIONS, MAX_POSITIONS, DecodeConfig, ModelConfig
from nmt_cli.data import tokenizer
from nmt_cli.errors import InputError
from nmt_cli.importing import fairseq_weights
from nmt_cli.importing.imported import Imported
from nmt_cli.importing.layers import sizes
from nmt_cli.importing.vocabulary import renumber, renumbered_model

SPECIALS = {"<s>": "<s>", "<pad>": "<pad>", "</s>": "</s>", "<unk>": "<unk>"}
SPM_NAMES = ("spm.model", "sentencepiece.bpe.model", "sentencepiece.model")
BPE_NAMES = ("bpecodes", "code")


def looks_like(source: Path) -> bool:
    """A fairseq checkpoint file, or a directory with one and its dictionaries."""
    if source.is_dir():
        return any(source.glob("dict.*.txt")) and any(source.glob("*.pt"))
    return source.suffix == ".pt" and any(source.parent.glob("dict.*.txt"))


def companions(path: Path) -> list[Path]:
    """The files beside a checkpoint file that the import reads: its dictionaries and tokenizer."""
    folder = path.parent
    return [*folder.glob("dict.*.txt"), *(folder / name for name in (*SPM_NAMES, *BPE_NAMES))]


def read(source: Path, given: tuple[str, str] | None = None) -> Imported:
    """`given`: the languages of a checkpoint that names none (fairseq saves none for a run
    trained without --source-lang/--target-lang); they choose the dictionaries."""
    path = _checkpoint_file(source)
    folder = path.parent
    state = _load(path)
    args = _model_args(state, path)
    _refuse_multilingual(state, args, path)
    languages = _languages(state, args) or given
    if languages is None:
        found = sorted(p.name for p in folder.glob("dict.*.txt"))
        raise InputError(
            f"{path}: the checkpoint names no source and target language; give them with --src and "
            f"--tgt (the dictionaries beside it: {', '.join(found)})"
        )
    src_dict = _dictionary(folder / f"dict.{languages[0]}.txt")
    tgt_dict = _dictionary(folder / f"dict.{languages[1]}.txt")
    for side, lang, pieces in (("encoder", languages[0], src_dict), ("decoder", languages[1], tgt_dict)):
        rows = state["model"].get(f"{side}.embed_tokens.weight")
        if isinstance(rows, torch.Tensor) and rows.dim() == 2 and rows.shape[0] != len(pieces):
            # fairseq itself refuses such a pair (the embedding's size does not match the dictionary).
            raise InputError(
                f"{folder / f'dict.{lang}.txt'}: {len(pieces):,} symbols with fairseq's 4 specials, but "
                f"{path.name}'s {side} embeddings have {rows.shape[0]:,} rows; give the dictionary the "
                "model was trained with"
            )
    if args.get("share_all_embeddings") and src_dict != tgt_dict:
        # One embedding for both languages; fairseq: "--share-all-embeddings requires a joined dictionary".
        raise InputError(
            f"{path}: share_all_embeddings needs one dictionary for both languages, but "
            f"dict.{languages[0]}.txt and dict.{languages[1]}.txt differ; give the dictionaries the "
            "model was trained with"
        )
    spm_bytes, codes = _tokenization(folder, path)
    if codes is None:
        what = f"{folder} sentencepiece model"
        src, tgt = (renumber(d, SPECIALS, [spm_bytes], [what]) for d in (src_dict, tgt_dict))
        spm = {  # fairseq writes an unknown piece as its dictionary's <unk>
            "src": renumbered_model(spm_bytes, src.pieces, what, "<unk>"),
            "tgt": renumbered_model(spm_bytes, tgt.pieces, what, "<unk>"),
        }
    else:  # Moses and subword-nmt: the pieces are the dictionary's, the rest reads as <unk>
        src, tgt = renumber(src_dict, SPECIALS, []), renumber(tgt_dict, SPECIALS, [])
        spm = {
            "src": tokenizer.serialized(src.pieces, codes, languages[0]),
            "tgt": tokenizer.serialized(tgt.pieces, codes, languages[1]),
        }
    cfg = _config(args, path, len(src.pieces), len(tgt.pieces))
    cfg.output_bias = bool(tgt.never)
    weights = fairseq_weights.converted(fairseq_weights.upgraded(state["model"]), cfg, src, tgt, path)
    # fairseq-interactive's defaults: beam 5, score / |Y|^1 with |Y| counting </s>, 200 tokens.
    decode = DecodeConfig(beam=5, lenpen=1.0, lenpen_style="fairseq", max_len_a=0.0, max_len_b=200, min_len=1)
    origin = {"toolkit": "fairseq", "path": str(path.resolve()), "arch": str(args.get("arch", ""))}
    return Imported(cfg, weights, spm, languages, decode, origin)


def _checkpoint_file(source: Path) -> Path:
    if source.is_file():
        return source
    found = sorted(source.glob("*.pt"))
    preferred = [p for p in found if p.name in ("model.pt", "checkpoint_best.pt", "checkpoint_last.pt")]
    if len(found) == 1 or preferred:
        return (preferred or found)[0]
    raise InputError(f"{source}: {len(found)} checkpoints (.pt) inside; give the one to import")


def _load(path: Path) -> dict[str, Any]:
    try:
        with torch.serialization.safe_globals([argparse.Namespace]):
            state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - any unpickling failure of a foreign file
        first = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
        raise InputError(f"{path}: not a fairseq checkpoint that can be read safely: {first}") from None
    if not isinstance(state, dict) or not isinstance(state.get("model"), dict):
        raise InputError(f"{path}: not a fairseq checkpoint (no model weights inside)")
    for name, value in state["model"].items():
        if not isinstance(value, torch.Tensor):
            raise InputError(
                f"{path}: its weight {name} is a {type(value).__name__}, not a tensor; not a fairseq "
                "checkpoint nmt can read"
            )
    return state


def _as_dict(value: Any) -> dict[str, Any]:
    if isinstance(value, argparse.Namespace):
        return vars(value)
    return value if isinstance(value, dict) else {}


def _model_args(state: dict[str, Any], path: Path) -> dict[str, Any]:
    cfg = _as_dict(state.get("cfg"))
    args = _as_dict(cfg.get("model")) or _as_dict(state.get("args"))
    if not args:
        raise InputError(f"{path}: the checkpoint holds no model configuration (cfg.model or args)")
    return args


def _refuse_multilingual(state: dict[str, Any], args: dict[str, Any], path: Path) -> None:
    """fairseq's multilingual models prefix the source and start the decoder with language tokens
    (__de__) that nmt's import does not add: refused rather than imported to translate wrongly."""
    task = _as_dict(_as_dict(state.get("cfg")).get("task")) or _as_dict(state.get("args")) or args
    name = str(task.get("_name") or task.get("task") or "")
    langtok = any(
        task.get(key) for key in ("encoder_langtok", "decoder_langtok", "lang_tok_replacing_bos_eos")
    )
    if (
        name.startswith("translation_multi")
        or name == "multilingual_translation"
        or langtok
        or task.get("lang_pairs")
    ):
        raise InputError(
            f"{path}: a multilingual fairseq model (task {name or 'with language tokens'}); nmt imports "
            "one-pair translation models only"
        )


def _languages(state: dict[str, Any], args: dict[str, Any]) -> tuple[str, str] | None:
    task = _as_dict(_as_dict(state.get("cfg")).get("task")) or _as_dict(state.get("args")) or args
    src, tgt = task.get("source_lang"), task.get("target_lang")
    return (str(src), str(tgt)) if src and tgt else None


def _dictionary(path: Path) -> list[str]:
    """fairseq's Dictionary: four specials, then one `symbol count [#fairseq:overwrite]` a line,
    in UTF-8. A symbol listed twice is refused: fairseq refuses it too unless the line is marked
    #fairseq:overwrite, which gives the symbol a second row, and nmt's ids are one per piece."""
    try:
        lines = path.read_bytes().splitlines()  # at \n, \r\n and \r only, as fairseq reads it
    except OSError as err:
        raise InputError(f"{path}: cannot read the fairseq dictionary ({err.strerror})") from None
    pieces = ["<s>", "<pad>", "</s>", "<unk>"]
    first = dict.fromkeys(pieces, "among fairseq's specials")
    for number, raw in enumerate(lines, 1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise InputError(
                f"{path}:{number}: not UTF-8 (byte 0x{raw[err.start]:02x}); fairseq reads its "
                "dictionaries as UTF-8 text"
            ) from None
        fields = line.rstrip().rsplit(" ", 2 if line.rstrip().endswith("#fairseq:overwrite") else 1)
        if len(fields) < 2 or not fields[1].lstrip("-").isdigit():
            raise InputError(f"{path}:{number}: not a `symbol count` line of a fairseq dictionary")
        if fields[0] in first:
            raise InputError(
                f"{path}:{number}: the symbol {fields[0]!r} again (first {first[fields[0]]}); nmt "
                "imports a dictionary that lists each symbol once"
            )
        first[fields[0]] = f"on line {number}"
        pieces.append(fields[0])
    return pieces


def _tokenization(folder: Path, path: Path) -> tuple[bytes, str | None]:
    """The sentencepiece model beside the checkpoint, or else the subword-nmt BPE codes (the WMT
    models of "Scaling NMT", tokenized with Moses first): (spm bytes, None) or (b"", codes)."""
    for name in SPM_NAMES:
        if (folder / name).is_file():
            return (folder / name).read_bytes(), None
    for name in BPE_NAMES:
        if (folder / name).is_file():
            try:
                codes = (folder / name).read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as err:
                raise InputError(f"{folder / name}: cannot read the BPE codes ({err})") from None
            first = next(
                (line.split() for line in codes.splitlines() if line and not line.startswith("#")), []
            )
            if len(first) == 3 and first[2].isdigit():  # fastBPE's `a b count`; subword-nmt's is `a b`
                raise InputError(
                    f"{folder / name}: fastBPE codes (the WMT19 models'); nmt tokenizes with subword-nmt "
                    "codes or a sentencepiece model"
                )
            return b"", codes
    raise InputError(
        f"{folder}: no sentencepiece model ({', '.join(SPM_NAMES)}) or subword-nmt BPE codes "
        f"({', '.join(BPE_NAMES)}) beside {path.name}"
    )


# Options that change the architecture, off (None, False or 0) in the models nmt can hold;
# layers_to_keep prunes a LayerDrop model at load, which the import does not do.
REFUSED = (
    "adaptive_softmax_cutoff",
    "adaptive_input",
    "layernorm_embedding",
    "no_token_positional_embeddings",
    "cross_self_attention",
    "no_cross_attention",
    "encoder_layers_to_keep",
    "decoder_layers_to_keep",
)


def _config(args: dict[str, Any], path: Path, src_size: int, tgt_size: int) -> ModelConfig:
    def arg(name: str, default: Any = None) -> Any:
        return args.get(name, default)

    # Every setting nmt cannot hold, in one message (as CTranslate2's converters report them).
    problems = [
        f"fairseq's {name} = {arg(name)!r} has no counterpart in nmt's model"
        for name in REFUSED
        if arg(name) not in (None, False, 0, "")
    ]
    d = int(arg("encoder_embed_dim", 512))
    for name in ("decoder_embed_dim", "decoder_output_dim", "decoder_input_dim"):
        if int(arg(name, d)) != d:
            problems.append(f"{name} = {arg(name)} differs from encoder_embed_dim = {d}")
    if int(arg("encoder_ffn_embed_dim", 2048)) != int(arg("decoder_ffn_embed_dim", 2048)):
        problems.append("encoder and decoder feed-forward widths differ; nmt has one d_ff")
    heads = int(arg("encoder_attention_heads", 8))
    if int(arg("decoder_attention_heads", heads)) != heads:
        problems.append("encoder and decoder attention heads differ; nmt has one head count")
    elif heads < 1 or d % heads:
        problems.append(f"{heads} attention heads do not divide encoder_embed_dim = {d}")
    pre = bool(arg("encoder_normalize_before", False))
    if bool(arg("decoder_normalize_before", False)) != pre:
        problems.append("only one of the stacks is pre-norm; nmt has one model.norm")
    learned = bool(arg("encoder_learned_pos", False))
    if bool(arg("decoder_learned_pos", False)) != learned:
        problems.append("only one side has learned positions; nmt has one model.positions")
    activation = str(arg("activation_fn", "relu"))
    if activation not in ACTIVATIONS:
        problems.append(f"activation_fn = {arg('activation_fn')!r}; nmt has relu, gelu and swish")
    sides = (int(arg("max_source_positions", 1024)), int(arg("max_target_positions", 1024)))
    for name, value in zip(("max_source_positions", "max_target_positions"), sides, strict=True):
        if not 1 <= value <= MAX_POSITIONS:
            problems.append(f"{name} = {value:,}; nmt holds from 1 to {MAX_POSITIONS:,} positions")
    if problems:
        raise InputError(f"{path}: " + "; ".join(problems))
    share_all = bool(arg("share_all_embeddings", False))
    shared_out = share_all or bool(arg("share_decoder_input_output_embed", False))
    # nmt holds one max_positions: learned tables are cut to the shorter (each has at least that
    # many rows); sinusoidal ones are computed for the longer.
    positions = min(sides) if learned else max(sides)
    layers = (int(arg("encoder_layers", 6)), int(arg("decoder_layers", 6)))
    return ModelConfig(
        **sizes(*layers, d, int(arg("encoder_ffn_embed_dim", 2048)), heads),
        dropout=float(arg("dropout", 0.1)),
        attention_dropout=float(arg("attention_dropout", 0.0)),
        activation_dropout=float(arg("activation_dropout", 0.0) or arg("relu_dropout", 0.0) or 0.0),
        norm="pre" if pre else "post",
        positions="learned" if learned else "sinusoidal-fairseq",
        share_embeddings=shared_out,
        max_positions=positions,
        src_vocab_size=src_size,
        tgt_vocab_size=tgt_size,
        joint_vocab=share_all,  # with one dictionary (read checks)
        activation=activation,
        scale_embeddings=not bool(arg("no_scale_embedding", False)),
        decoder_start="eos",
    )
