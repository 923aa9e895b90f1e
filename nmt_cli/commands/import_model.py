"""`nmt import`: a model trained by fairseq or Hugging Face's Marian (OPUS-MT) as an ordinary nmt
checkpoint, which translate, serve, export, average and `train --init-from` then take as it is."""

from __future__ import annotations

from pathlib import Path

from nmt_cli import checkpoint, recipe
from nmt_cli.config import RunConfig
from nmt_cli.errors import InputError, RunFailure
from nmt_cli.files import output_target
from nmt_cli.importing import fairseq, marian
from nmt_cli.importing.imported import Imported
from nmt_cli.model import Transformer
from nmt_cli.report import Reporter

HUB_PREFIX = "hf:"


def run(source: str, output: Path, quiet: bool) -> None:
    reporter = Reporter(quiet)
    path = _local(source, reporter)
    output_target(output, "--output")  # before the work: a directory or a missing parent is refused
    imported = read(path)
    model = Transformer(imported.model)
    missing, unexpected = model.load_state_dict(imported.weights, strict=False)
    if missing or unexpected:  # the readers fill every tensor: a mismatch is nmt's bug
        raise RunFailure(f"{path}: import left {missing[:3]} unset and {unexpected[:3]} unused")
    config = recipe.to_dict(RunConfig(model=imported.model, decode=imported.decode))
    ckpt = checkpoint.Checkpoint(
        kind="import",
        config=config,
        model=model.state_dict(),
        spm=imported.spm,
        languages=imported.languages,
        imported_from=imported.origin,
        tokenizers=imported.tokenizers,
    )
    checkpoint.save(ckpt, output, "--output")
    cfg = imported.model
    direction = "-".join(imported.languages) if imported.languages else "unknown languages"
    reporter.info(
        f"imported {imported.origin['toolkit']} model {path} ({direction}, {cfg.encoder_layers}+"
        f"{cfg.decoder_layers} layers, d_model {cfg.d_model}, vocabulary {cfg.src_vocab_size}/"
        f"{cfg.tgt_vocab_size}) into {output}"
    )


def read(path: Path) -> Imported:
    """The model at `path`, by the files that say which toolkit wrote it."""
    if not path.exists():
        raise InputError(f"{path}: no such file or directory")
    if marian.looks_like(path):
        return marian.read(path)
    if fairseq.looks_like(path):
        return fairseq.read(path)
    raise InputError(
        f"{path}: neither a Hugging Face Marian directory (config.json with model_type marian) nor a "
        "fairseq checkpoint with its dict.*.txt beside it"
    )


def _local(source: str, reporter: Reporter) -> Path:
    """`source` as a local path; `hf:ORG/NAME` is downloaded with huggingface_hub, if installed."""
    if not source.startswith(HUB_PREFIX):
        return Path(source)
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise InputError(
            f"{source}: downloading needs huggingface_hub (pip install huggingface_hub); or download "
            "the model yourself and give its directory"
        ) from None
    reporter.info(f"downloading {source[len(HUB_PREFIX) :]} from the Hugging Face hub")
    return Path(snapshot_download(source[len(HUB_PREFIX) :]))
