"""Whether the data of `nmt train` reads text as the checkpoint it continues does (resumed, or
--init-from): the same languages, sentencepiece models and tokenizers. Equal vocabulary sizes are
not enough: another model's ids mean other pieces, and a corpus that split `>>deu<<` into pieces
teaches a multilingual model to read its language codes otherwise."""

from __future__ import annotations

from pathlib import Path

from nmt_cli import checkpoint
from nmt_cli.data import corpus, spm, tokenizer
from nmt_cli.errors import InputError


def check_vocabulary(
    data: Path,
    meta: corpus.CorpusMeta,
    spm_models: tuple[bytes, bytes],
    tokenizers: spm.Tokenizers | None,
    resume: tuple[Path, checkpoint.Checkpoint] | None,
    init: tuple[Path, checkpoint.Checkpoint] | None,
) -> None:
    """Refuse --data for the run's last checkpoint `resume` or the --init-from one `init` (each
    with its path) where they read text differently; one line says what to do."""
    languages = (meta.src, meta.tgt)
    if resume is not None:
        last, ckpt = resume
        if ckpt.languages not in (None, languages):
            raise InputError(
                f"cannot resume {last}: the run translates {'-'.join(ckpt.languages)} and --data "
                f"{data} is {'-'.join(languages)}; resume with the data the run was trained on, or use "
                "a new --out"
            )
        if (ckpt.spm["src"], ckpt.spm["tgt"]) != spm_models:
            raise InputError(
                f"cannot resume {last}: --data {data} was prepared with another sentencepiece model, so "
                "its ids mean other pieces; resume with the data the run was trained on, or use a new --out"
            )
        if (ckpt.tokenizers or None) != tokenizers:
            raise InputError(
                f"cannot resume {last}: --data {data} {_differently(ckpt.tokenizers, tokenizers, 'run')}; "
                f"prepare it again with `nmt prepare --spm-from {last}`, or use a new --out"
            )
    if init is not None:
        _check_start(data, meta, spm_models, tokenizers, *init)


def _check_start(
    data: Path,
    meta: corpus.CorpusMeta,
    spm_models: tuple[bytes, bytes],
    tokenizers: spm.Tokenizers | None,
    path: Path,
    init: checkpoint.Checkpoint,
) -> None:
    languages = (meta.src, meta.tgt)
    if (init.spm["src"], init.spm["tgt"]) != spm_models:
        if init.languages == languages[::-1]:  # separate vocabularies, swapped by --spm-from
            raise InputError(
                f"--init-from {path}: it translates {'-'.join(init.languages)} with separate "
                f"vocabularies, and --data {data} is {'-'.join(languages)}: its encoder cannot read "
                f"{meta.src}; start from a {'-'.join(languages)} checkpoint"
            )
        raise InputError(
            f"--init-from {path}: --data {data} was prepared with another sentencepiece model, so its "
            f"ids mean other pieces; prepare it with `nmt prepare --spm-from {path}`"
        )
    if (init.tokenizers or None) != tokenizers:
        raise InputError(
            f"--init-from {path}: --data {data} {_differently(init.tokenizers, tokenizers, 'model')}; "
            f"prepare it with `nmt prepare --spm-from {path}`"
        )


def _differently(theirs: spm.Tokenizers | None, data: spm.Tokenizers | None, whose: str) -> str:
    """How the data reads text otherwise than the checkpoint, in words (corpora and checkpoints
    written before they recorded tokenizers record none)."""
    return f"was prepared reading {_reading(data)}, and the {whose} reads {_reading(theirs)}"


def _reading(tokenizers: spm.Tokenizers | None) -> str:
    if any(spec.get("kind") == tokenizer.LANGUAGE_CODES for spec in (tokenizers or {}).values()):
        return "a leading language code (>>deu<<) as one piece"
    return "language codes (>>deu<<) as ordinary text"
