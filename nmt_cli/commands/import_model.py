"""`nmt import`: a model trained by fairseq or Hugging Face's Marian (OPUS-MT) as an ordinary nmt
checkpoint, which translate, serve, export, average and `train --init-from` then take as it is."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import torch

from nmt_cli import checkpoint, recipe
from nmt_cli.config import RunConfig
from nmt_cli.errors import InputError, NmtError, RunFailure, optional_import_failure
from nmt_cli.files import not_an_input, output_target
from nmt_cli.importing import fairseq, marian
from nmt_cli.importing.imported import Imported
from nmt_cli.model import Transformer
from nmt_cli.report import Reporter

HUB_PREFIX = "hf:"
HUB_NAME = re.compile(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*")  # the hub's ORGANISATION/MODEL
LANGUAGE = re.compile(r"[A-Za-z]{2,3}(?:[_-][A-Za-z0-9]{1,8})*")  # en, deu, pt_BR, zh-Hant


def run(
    source: str, output: Path, quiet: bool, languages: tuple[str | None, str | None] = (None, None)
) -> None:
    """`languages`: --src and --tgt, for a model that does not name its languages."""
    reporter = Reporter(quiet)
    if (languages[0] is None) != (languages[1] is None):
        raise InputError("--src and --tgt go together: give both, or neither")
    given = (languages[0], languages[1]) if languages[0] is not None and languages[1] is not None else None
    for code in given or ():
        if not LANGUAGE.fullmatch(code):
            raise InputError(f"--src/--tgt {code}: not a language code (en, deu, pt_BR)")
    path = _local(source, reporter)
    output_target(output, "--output")  # before the work: a directory or a missing parent is refused
    not_an_input(output, _inputs(path), "--output")
    imported = _read_fitting(path, given)
    config = recipe.to_dict(RunConfig(model=imported.model, decode=imported.decode))
    try:  # the checks every command makes of a checkpoint's settings, made before it is written
        recipe.from_dict(config, f"{path}: the model's settings:")
    except InputError as err:
        raise InputError(f"{err}; nmt cannot run such a model") from None
    check_weights(imported, path)
    for code in imported.languages or ():
        if not LANGUAGE.fullmatch(code):
            raise InputError(
                f"{path}: its language {code!r} is not a language code (en, deu, pt_BR): the server "
                "routes requests by these codes"
            )
    model = Transformer(imported.model)
    missing, unexpected = model.load_state_dict(imported.weights, strict=False)
    if missing or unexpected:  # the readers fill every tensor: a mismatch is nmt's bug
        raise RunFailure(f"{path}: import left {missing[:3]} unset and {unexpected[:3]} unused")
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


def _read_fitting(path: Path, languages: tuple[str, str] | None) -> Imported:
    """`read`, with a model whose files do not fit together refused as an InputError."""
    try:
        return read(path, languages)
    except (
        ValueError,
        TypeError,
        KeyError,
        IndexError,
        ZeroDivisionError,
        RuntimeError,
        UnicodeError,
    ) as err:
        # A foreign model's files that contradict each other (a tensor of another size than its
        # settings say, a setting of the wrong type) fail wherever the reader meets them.
        first = (str(err).strip().splitlines() or [""])[0][:300]
        raise InputError(
            f"{path}: cannot import: its files do not fit together ({type(err).__name__}: {first})"
        ) from None


def check_weights(imported: Imported, path: Path) -> None:
    """Every tensor in the shape the model's settings give it, and finite: one InputError naming
    every tensor that is not (a model whose files disagree with each other, or was damaged)."""
    with torch.device("meta"):
        expected = Transformer(imported.model, initialize=False).state_dict()
    problems = []
    for name, tensor in imported.weights.items():
        want = expected.get(name)
        if want is not None and tuple(tensor.shape) != tuple(want.shape):
            problems.append(f"{name} is {list(tensor.shape)}, the settings give {list(want.shape)}")
        elif tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            problems.append(f"{name} holds NaN or infinite values")
    if problems:
        shown = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more" if len(problems) > 5 else "")
        raise InputError(f"{path}: cannot import: {shown}")


def _inputs(path: Path) -> list[Path]:
    """Every file the import of `path` may read: a Marian directory's own files (an earlier
    import's output beside them is none), any file of a fairseq directory (it may hold several
    checkpoints), a fairseq checkpoint and the files beside it that it reads."""
    try:
        if marian.looks_like(path):
            return [path, *(path / name for name in marian.FILES)]
        return [path, *(path.iterdir() if path.is_dir() else fairseq.companions(path))]
    except FileNotFoundError:
        return [path]  # `read` names what is missing
    except OSError as err:  # a name too long, a directory that may not be read
        raise InputError(f"{path}: cannot read it ({err.strerror or err})") from None


def read(path: Path, languages: tuple[str, str] | None = None) -> Imported:
    """The model at `path`, by the files that say which toolkit wrote it; `languages` (--src,
    --tgt) for a model that names none, and must agree with one that does."""
    if not path.exists():
        raise InputError(f"{path}: no such file or directory")
    if marian.looks_like(path):
        imported = marian.read(path)
    elif fairseq.looks_like(path):
        imported = fairseq.read(path, languages)
    else:
        raise InputError(
            f"{path}: neither a Hugging Face Marian directory (config.json with model_type marian) nor a "
            "fairseq checkpoint with its dict.*.txt beside it"
        )
    if languages is not None and imported.languages not in (None, languages):
        raise InputError(
            f"--src {languages[0]} --tgt {languages[1]}: {path} translates {'-'.join(imported.languages)}; "
            "leave --src and --tgt out"
        )
    return dataclasses.replace(imported, languages=imported.languages or languages)


def _local(source: str, reporter: Reporter) -> Path:
    """`source` as a local path; `hf:ORG/NAME` is downloaded with huggingface_hub, if installed."""
    if not source.startswith(HUB_PREFIX):
        return Path(source)
    name = source[len(HUB_PREFIX) :]
    if not HUB_NAME.fullmatch(name) or ".." in name:
        raise InputError(f"{source}: not a Hugging Face model name; write hf:ORGANISATION/MODEL")
    try:
        from huggingface_hub import snapshot_download
    except ImportError as err:
        missing = (
            f'{source}: downloading needs huggingface_hub (pip install "nmt-cli[import]"); or download '
            "the model yourself and give its directory"
        )
        raise optional_import_failure(err, missing, "huggingface_hub") from None
    reporter.info(f"downloading {source[len(HUB_PREFIX) :]} from the Hugging Face hub")
    try:
        return Path(snapshot_download(source[len(HUB_PREFIX) :]))
    except Exception as err:  # noqa: BLE001 - the hub client's errors, whose classes move between versions
        raise _not_downloaded(source, err) from None


def _not_downloaded(source: str, err: Exception) -> NmtError:
    """One line for a download that failed (the hub client's own message is a paragraph)."""
    kind = type(err).__name__  # by name: huggingface_hub has moved these classes between modules
    if kind in ("RepositoryNotFoundError", "GatedRepoError", "RevisionNotFoundError"):
        return InputError(f"{source}: no such model on the Hugging Face hub, or one that needs a login")
    if kind == "LocalEntryNotFoundError":
        return RunFailure(
            f"{source}: cannot download it: the hub cannot be reached and the model is not in the local "
            "cache; download it where there is a network and give its directory"
        )
    first = str(err).strip().splitlines()[0] if str(err).strip() else kind
    return RunFailure(
        f"{source}: downloading failed ({first[:200]}); try again, or give a downloaded directory"
    )
