"""`nmt export`: a checkpoint as a model directory another engine loads (CTranslate2 today).

The directory is built under a temporary name beside OUT and renamed at the end, so OUT is
either absent or complete. The sentencepiece models travel with it: `spm.model` for a joint
vocabulary, `src.spm.model` and `tgt.spm.model` otherwise.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

from nmt_cli import checkpoint
from nmt_cli.data import spm
from nmt_cli.errors import InputError
from nmt_cli.model.ctranslate2_spec import QUANTIZATIONS, SPECIAL_PIECES, unsupported, write_model
from nmt_cli.report import Reporter

FORMATS = ("ctranslate2",)
EXTRA = "pip install 'nmt-cli[ctranslate2]'"


def run(model: Path, fmt: str, out: Path, quantization: str, force: bool, quiet: bool) -> None:
    reporter = Reporter(quiet)
    if fmt not in FORMATS:
        raise InputError(f"--format {fmt}: unknown format; use {', '.join(FORMATS)}")
    if quantization not in QUANTIZATIONS:
        raise InputError(f"--quantization {quantization}: use one of {', '.join(QUANTIZATIONS)}")
    if out.exists() and not force:
        raise InputError(f"--output {out}: already exists; remove it, choose another, or add --force")
    if not out.parent.is_dir():
        raise InputError(f"--output {out}: directory {out.parent} does not exist")
    try:
        import ctranslate2  # noqa: F401
    except ImportError:
        raise InputError(
            f"export to CTranslate2 needs the ctranslate2 package, an optional extra: {EXTRA}"
        ) from None

    ckpt = checkpoint.load(model)
    cfg = ckpt.run_config(model).model
    reason = unsupported(cfg)
    if reason is not None:
        raise InputError(f"{model}: cannot export to CTranslate2: {reason}")
    src_spm, tgt_spm = ckpt.spm["src"], ckpt.spm["tgt"]
    src_pieces, tgt_pieces = _pieces(src_spm, model), _pieces(tgt_spm, model)

    staging = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        write_model(cfg, ckpt.model, (src_pieces, tgt_pieces), staging, quantization)
        if src_spm == tgt_spm:
            (staging / "spm.model").write_bytes(src_spm)
        else:
            (staging / "src.spm.model").write_bytes(src_spm)
            (staging / "tgt.spm.model").write_bytes(tgt_spm)
        if out.exists():
            shutil.rmtree(out) if out.is_dir() else out.unlink()
        os.replace(staging, out)
    finally:
        with contextlib.suppress(OSError):
            shutil.rmtree(staging)
    reporter.info(f"exported {model} to {out} (CTranslate2, weights {quantization})")


def _pieces(model_bytes: bytes, path: Path) -> list[str]:
    processor = spm.load_processor(model_bytes)
    pieces = [processor.id_to_piece(i) for i in range(processor.get_piece_size())]
    if tuple(pieces[: len(SPECIAL_PIECES)]) != SPECIAL_PIECES:
        raise InputError(
            f"{path}: the vocabulary's first pieces are {pieces[:4]}, not {list(SPECIAL_PIECES)}; "
            "it was not written by `nmt prepare`"
        )
    return pieces
