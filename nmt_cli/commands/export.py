"""`nmt export`: a checkpoint as a model directory another engine loads: CTranslate2's, or
Hugging Face's Marian (`--format hf-marian`, which transformers' MarianMTModel and
MarianTokenizer load).

The directory is built under a temporary name beside OUT and renamed at the end, so OUT is
either absent or complete. For CTranslate2, the sentencepiece models travel with it: `spm.model`
for a joint vocabulary, `src.spm.model` and `tgt.spm.model` otherwise; `nmt.json`, the length
limits to pass to CTranslate2's translate_batch; and for a checkpoint with a shortlist (`nmt
shortlist`), `vmap.txt`, CTranslate2's vocabulary map of the same candidates (`use_vmap=True`).
A Hugging Face Marian export holds the files `exporting.hf_marian` lists.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nmt_cli import checkpoint
from nmt_cli.config import DecodeConfig, ModelConfig
from nmt_cli.data import spm, tokenizer
from nmt_cli.data.shortlist import Shortlist
from nmt_cli.decoding import loading
from nmt_cli.errors import InputError, optional_import_failure
from nmt_cli.exporting import hf_marian
from nmt_cli.exporting.ctranslate2 import SPECIAL_PIECES, transformer_spec, unsupported
from nmt_cli.files import hidden_name, own_descriptor, write_failure
from nmt_cli.report import Reporter

FORMATS = ("ctranslate2", "hf-marian")
QUANTIZATIONS = ("none", "int8", "int8_float32", "int8_bfloat16", "int16", "float16", "bfloat16")
EXTRA = "pip install 'nmt-cli[ctranslate2]'"
HF_EXTRA = "pip install 'nmt-cli[import]'"  # safetensors, which reading Marian models needs too
# What an export directory holds: CTranslate2's files (of any version) and our sentencepiece models.
EXPORT_FILES = {
    "model.bin",
    "config.json",
    *(f"{side}vocabulary.{ext}" for side in ("", "shared_", "source_", "target_") for ext in ("json", "txt")),
    "spm.model",
    "bpecodes",
    "src.spm.model",
    "tgt.spm.model",
    "nmt.json",
    "vmap.txt",
}
CTRANSLATE2_REQUIRED = ("model.bin", "config.json")
LIMITS_FILE = "nmt.json"
VMAP_FILE = "vmap.txt"  # the name CTranslate2 loads a vocabulary map from


def limits(cfg: ModelConfig, decode: DecodeConfig) -> dict[str, dict[str, Any]]:
    """What CTranslate2's translate_batch needs to stop where nmt stops, as its options, and the
    rule behind them. Its position table ends at max_positions, and CTranslate2 fails a whole batch
    on a longer source (max_input_length counts the end-of-sentence token, as nmt does). nmt ends a
    translation of n pieces at int(a * n + b) pieces and a forced EOS, within the positions
    (`decoding.search.max_lengths`); max_decoding_length counts the pieces before EOS, and
    CTranslate2 stops there without one: the same pieces. It is one number for a whole batch, so
    for a model whose limit grows with the source (decode.max_len_a > 0) it is the limit of the
    longest source, and "decode" gives a and b to set it line by line."""
    longest = cfg.max_positions - 1  # pieces before EOS that the positions hold
    pieces = min(int(decode.max_len_a * longest + decode.max_len_b), longest)
    return {
        "translate_batch": {
            "max_input_length": cfg.max_positions,
            "max_decoding_length": pieces,
            "min_decoding_length": decode.min_len,
        },
        "decode": {"max_len_a": decode.max_len_a, "max_len_b": decode.max_len_b},
    }


def run(model: Path, fmt: str, out: Path, quantization: str, force: bool, quiet: bool) -> None:
    reporter = Reporter(quiet)
    if fmt not in FORMATS:
        raise InputError(f"--format {fmt}: unknown format; use {', '.join(FORMATS)}")
    if quantization not in QUANTIZATIONS:
        raise InputError(f"--quantization {quantization}: use one of {', '.join(QUANTIZATIONS)}")
    if fmt == "hf-marian":
        if quantization != "none":
            raise InputError(
                f"--quantization {quantization}: --format hf-marian writes float32 weights; leave "
                "--quantization out"
            )
        _export_hf_marian(model, out, force, reporter)
        return
    target = _target(out, force, EXPORT_FILES, CTRANSLATE2_REQUIRED, "CTranslate2")
    _import_ctranslate2()

    ckpt = checkpoint.load(model)
    config = ckpt.run_config(model)
    cfg = config.model
    reason = unsupported(cfg)
    if reason is not None:
        raise InputError(f"{model}: cannot export to CTranslate2: {reason}")
    net = loading.model_of(cfg, ckpt.model, model)
    pieces = (_pieces(ckpt.spm["src"], model), _pieces(ckpt.spm["tgt"], model))
    spec = transformer_spec(net, pieces)
    shortlist = (
        Shortlist.from_dict(ckpt.shortlist, cfg.src_vocab_size, cfg.tgt_vocab_size, str(model))
        if ckpt.shortlist is not None
        else None
    )

    def fill(staging: Path) -> None:
        write_model(spec, staging, quantization)
        _write_companions(staging, ckpt.spm, limits(cfg, config.decode))
        if shortlist is not None:
            (staging / VMAP_FILE).write_text(vocabulary_map(shortlist, *pieces), encoding="utf-8")

    _staged(target, out, fill)
    weights = "float32" if quantization == "none" else quantization  # the spec holds float32 arrays
    reporter.info(f"exported {model} to {out} (CTranslate2, weights {weights})")
    if shortlist is not None:
        reporter.info(
            f"its shortlist is {out / VMAP_FILE}: CTranslate2 decodes over it with "
            "translate_batch(..., use_vmap=True)"
        )


def _export_hf_marian(model: Path, out: Path, force: bool, reporter: Reporter) -> None:
    """`--format hf-marian`: the model as transformers' MarianMTModel, its tokenizer and its
    search settings (`exporting.hf_marian`)."""
    target = _target(out, force, set(hf_marian.FILES), hf_marian.REQUIRED, "Hugging Face Marian")
    _import_safetensors()
    ckpt = checkpoint.load(model)
    config = ckpt.run_config(model)
    cfg, decode = config.model, config.decode
    models = (ckpt.spm["src"], ckpt.spm["tgt"])
    moses = tokenizer.is_serialized(models[0])
    reason = hf_marian.unsupported(cfg, ckpt.shortlist is not None, moses)
    if reason is not None:
        raise InputError(f"{model}: cannot export to Hugging Face Marian: {reason}")
    pieces = (_pieces(models[0], model), _pieces(models[1], model))
    net = loading.model_of(cfg, ckpt.model, model)
    shared = net.src_embed.tokens is net.tgt_embed.tokens
    separate = not cfg.joint_vocab or pieces[0] != pieces[1]  # one id table, or one a side
    state = net.state_dict()
    if cfg.positions == "sinusoidal":  # nmt's interleaved layout, reordered to Marian's
        state = hf_marian.to_halves(state, hf_marian.halves_order(cfg.d_model))
    weights = hf_marian.tensors(state, cfg, shared)
    configs = (
        hf_marian.model_config(cfg, shared),
        hf_marian.generation_config(cfg, decode),
        hf_marian.tokenizer_config(separate, ckpt.languages, cfg.max_positions),
    )

    # An imported Marian model: its rows and ids back in the order of the files it came from.
    weights, configs, pieces = hf_marian.in_original_order(weights, configs, pieces, ckpt.imported_from)

    def fill(staging: Path) -> None:
        staging.mkdir()
        hf_marian.write(staging, weights, configs, models, pieces)

    _staged(target, out, fill)
    reporter.info(f"exported {model} to {out} (Hugging Face Marian, weights float32)")
    if decode.lenpen_style == "gnmt" and decode.lenpen != 0 and decode.beam > 1:
        reporter.warn(
            f"decode.lenpen_style = gnmt: transformers has no ((5 + |Y|) / 6)^alpha; generate divides "
            f"by |Y|^{decode.lenpen:g} (`nmt translate --lenpen-style fairseq` decodes as it does)"
        )
    if decode.max_len_a > 0:
        reporter.info(
            f"generate has one max_length for every source: {configs[1]['max_length']}, this model's "
            f"limit for its longest source ({decode.max_len_a:g} x source + {decode.max_len_b})"
        )


def _staged(target: Path, out: Path, fill: Callable[[Path], None]) -> None:
    """The export written by `fill` into a directory (that it creates) of our own beside the
    target, then renamed into place: the target is either absent, the old export or the complete
    new one, and nothing else is ever deleted."""
    try:
        holder = Path(tempfile.mkdtemp(prefix=hidden_name(target.name, ".tmp-", spare=8), dir=target.parent))
    except OSError as err:
        raise write_failure(err, f"--output {out}", "--output") from None
    try:
        staging = holder / "export"
        fill(staging)
        _swap(staging, target, holder / "replaced")
    except OSError as err:
        raise write_failure(err, f"--output {out}", "--output") from None
    finally:
        _put_back(holder / "replaced", target)
        shutil.rmtree(holder, ignore_errors=True)


def _import_safetensors() -> None:
    try:
        import safetensors.torch  # noqa: F401
    except ImportError as err:
        missing = (
            f"export to Hugging Face Marian needs the safetensors package, an optional extra: {HF_EXTRA}"
        )
        raise optional_import_failure(err, missing, "safetensors") from None


def _import_ctranslate2() -> None:
    try:
        import ctranslate2  # noqa: F401
    except ImportError as err:
        # Ctrl-C or SIGTERM while its extension initializes reaches us as an ImportError
        # ("initialization failed", pybind11's wrapping): optional_import_failure gives the stop.
        missing = f"export to CTranslate2 needs the ctranslate2 package, an optional extra: {EXTRA}"
        raise optional_import_failure(err, missing, "ctranslate2") from None


def _write_companions(staging: Path, models: dict[str, bytes], lengths: dict[str, Any]) -> None:
    """The tokenizer files and nmt.json beside CTranslate2's own."""
    src_spm, tgt_spm = models["src"], models["tgt"]
    if tokenizer.is_serialized(src_spm):  # Moses + BPE: the codes, for the user's own tokenizer
        (staging / "bpecodes").write_text(tokenizer.deserialized(src_spm).codes, encoding="utf-8")
    elif src_spm == tgt_spm:
        (staging / "spm.model").write_bytes(src_spm)
    else:
        (staging / "src.spm.model").write_bytes(src_spm)
        (staging / "tgt.spm.model").write_bytes(tgt_spm)
    (staging / LIMITS_FILE).write_text(json.dumps(lengths, indent=2) + "\n")


def _swap(staging: Path, target: Path, aside: Path) -> None:
    """Rename `staging` to `target`, an earlier export (checked by _target) first moved `aside`."""
    if target.exists():
        os.replace(target, aside)
    os.replace(staging, target)


def _put_back(aside: Path, target: Path) -> None:
    """The old export back in place when the new one did not take its place: Ctrl-C (or any
    error) between _swap's two renames must not leave the old one to be deleted with the rest."""
    if os.path.lexists(aside) and not os.path.lexists(target):
        os.replace(aside, target)


def vocabulary_map(shortlist: Shortlist, src_pieces: list[str], tgt_pieces: list[str]) -> str:
    """CTranslate2's vocabulary map: a line `<source piece>\t<target pieces>` for each source piece
    with candidates, and first the pieces every batch gets, under the empty key."""
    lines = ["\t" + " ".join(tgt_pieces[i] for i in shortlist.frequent.tolist())]
    for piece, row in zip(src_pieces, shortlist.candidates.tolist(), strict=True):
        kept = [tgt_pieces[i] for i in row if i >= 0]
        if kept:
            lines.append(piece + "\t" + " ".join(kept))
    return "\n".join(lines) + "\n"


def _pieces(model_bytes: bytes, path: Path) -> list[str]:
    processor = spm.load_processor(model_bytes)
    pieces = [processor.id_to_piece(i) for i in range(processor.get_piece_size())]
    if tuple(pieces[: len(SPECIAL_PIECES)]) != SPECIAL_PIECES:
        raise InputError(
            f"{path}: the vocabulary's first pieces are {pieces[:4]}, not {list(SPECIAL_PIECES)}; "
            "it was not written by `nmt prepare`"
        )
    return pieces


def write_model(spec: Any, out_dir: Path, quantization: str) -> None:
    """Validate, quantize and save a CTranslate2 spec as a model directory at `out_dir` (which
    must not exist), through CTranslate2's own Converter."""
    from ctranslate2.converters import Converter

    class _Filled(Converter):  # the Converter API: _load() returns the spec to save
        def _load(self) -> Any:
            return spec

    _Filled().convert(str(out_dir), quantization=None if quantization == "none" else quantization)


def _target(out: Path, force: bool, ours: set[str], required: tuple[str, ...], kind: str) -> Path:
    """The directory to write (a link followed): new, or with --force an earlier export of this
    `kind` (files among `ours`, the `required` ones there), which alone is ever replaced; anything
    else there is refused before any work."""
    if own_descriptor(out) is not None:  # /dev/stdout and the like: a stream, never a directory
        raise InputError(f"--output {out}: a stream of this process, not a directory; name a directory")
    target = Path(os.path.realpath(out))
    try:
        found = os.lstat(target)
    except (FileNotFoundError, NotADirectoryError):  # not there yet; a parent that is a file is named below
        found = None
    except OSError as err:  # a name too long, a directory that may not be searched
        raise write_failure(err, f"--output {out}", "--output") from None
    if found is not None and stat.S_ISLNK(found.st_mode):  # what realpath could not resolve: a loop
        raise InputError(
            f"--output {out}: a symbolic link that leads nowhere (a loop); choose another --output"
        )
    if not target.parent.is_dir():
        where = "is a file, not a directory" if target.parent.exists() else "does not exist"
        raise InputError(f"--output {out}: directory {target.parent} {where}")
    if found is None:
        return target
    if not target.is_dir():
        kind = "a file" if target.is_file() else "a device, a FIFO or a socket"
        raise InputError(
            f"--output {out}: is {kind}, not a directory; export writes a model directory: choose "
            "another --output"
        )
    if not force:
        raise InputError(f"--output {out}: already exists; remove it, choose another, or add --force")
    try:
        entries = {entry.name for entry in target.iterdir()}
        # A name of ours that is not a regular file (a directory vmap.txt/, a link) is the user's.
        not_files = sorted(name for name in entries if not stat.S_ISREG(os.lstat(target / name).st_mode))
    except OSError as err:  # a directory we may not read is not one we may replace
        raise write_failure(err, f"--output {out}", "--output") from None
    strangers = sorted(entries - ours)
    if strangers or not_files or not set(required) <= entries:
        what = (
            f"it holds {strangers[0]}"
            if strangers
            else f"its {not_files[0]} is not a file"
            if not_files
            else f"it has no {' and '.join(required)}"
        )
        raise InputError(
            f"--output {out}: not a {kind} export ({what}); --force replaces only those: choose "
            "another --output"
        )
    return target
