"""Checkpoints loaded for decoding: ensembles checked to agree, models converted once for the
precision they decode in, and the default precision for a device. What is loaded is a plain value
(`Loaded`), which the Translator is made from."""

from __future__ import annotations

import platform
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import torch
from sentencepiece import SentencePieceProcessor
from torch import nn

from nmt_cli import checkpoint
from nmt_cli.config import DecodeConfig, ModelConfig
from nmt_cli.data.shortlist import Shortlist
from nmt_cli.data.spm import processors
from nmt_cli.data.tokenizer import MosesBpe
from nmt_cli.decoding import int8
from nmt_cli.decoding.ensemble import Ensemble
from nmt_cli.device import cpu_has_amx, cpu_has_fast_bf16
from nmt_cli.errors import InputError, SettingError
from nmt_cli.model import Transformer
from nmt_cli.ranges import problem_with
from nmt_cli.user_settings import DecodeOverrides

PRECISIONS = ("fp32", "bf16", "fp16", "int8")
"""fp32 as trained; bf16 and fp16 (GPU): weights cast once at load (attention softmax and output
log-probabilities stay float32); int8: every linear layer, the output projection included, with
int8 weights per output channel and activations per row (`decoding.int8`; CPU only), so that a
line's output does not depend on the lines batched with it."""


def default_precision(device: torch.device) -> str:
    """The fastest precision that keeps quality on `device` (see bench/decode_vs_ctranslate2.py)."""
    if device.type == "cuda":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    # On x86, fbgemm's int8 is ahead of fp32 and of bf16 done with AVX512-BF16 alone, within
    # 0.3 BLEU of fp32; with AMX, bf16 is ahead of int8 (docs/benchmarks.md). Elsewhere int8 has
    # no tuned kernel: bf16 where the hardware has it, else fp32.
    if platform.machine().lower() in ("x86_64", "amd64"):
        return "bf16" if cpu_has_amx() else "int8"
    return "bf16" if cpu_has_fast_bf16() else "fp32"


def check_decoding_precision(precision: object, device: torch.device) -> None:
    """A SettingError naming the precision (`--precision`, `precision=`) unless it decodes on `device`."""
    problem = problem_with(PRECISIONS, precision)
    if problem is None and precision == "fp16" and device.type != "cuda":
        problem = "is for GPU decoding; on CPU use bf16 or int8"
    if problem is None and precision == "int8" and device.type != "cpu":
        problem = f"is for CPU decoding; on {device} use bf16 or fp16"
    if problem is not None:
        raise SettingError("precision", precision, problem)


@dataclass(eq=False)  # one object per loaded model: equal to itself, hashable
class Loaded:
    """Checkpoints loaded as one ensemble, ready to decode: what a Translator is made of."""

    ensemble: Ensemble
    decode: DecodeConfig
    """The recipe's [decode] settings with the load-time overrides applied."""
    src_spm: SentencePieceProcessor | MosesBpe
    """Source text -> ids: the sentencepiece model, or an imported model's Moses + BPE."""
    tgt_spm: SentencePieceProcessor | MosesBpe
    device: torch.device
    precision: str
    languages: tuple[str, str] | None
    """(source, target) of the training corpus; None for checkpoints that do not record it."""
    shortlist: Shortlist | None
    """The vocabulary shortlist stored with the (first) checkpoint; None when it has none."""
    source: Path
    """The (first) checkpoint, for messages."""


def load_models(
    paths: list[Path],
    device: torch.device,
    precision: str,
    overrides: DecodeOverrides = DecodeOverrides(),
) -> Loaded:
    """Load one or more checkpoints as an ensemble; they must share the target vocabulary."""
    check_decoding_precision(precision, device)
    return _ensemble([(path, checkpoint.load(path)) for path in paths], device, precision, overrides)


def load_model_groups(
    paths: list[Path], device: torch.device, precision: str, overrides: DecodeOverrides = DecodeOverrides()
) -> list[tuple[Loaded, list[Path]]]:
    """One ensemble per language pair that the checkpoints record, with its checkpoints, in the
    order of first appearance; checkpoints of the same pair form an ensemble. Checkpoints that
    record no languages (an older nmt's) can only be served alone or with each other: nothing
    would route to them."""
    check_decoding_precision(precision, device)
    pairs: dict[tuple[str, str] | None, list[tuple[Path, checkpoint.Checkpoint]]] = {}
    for path in paths:
        ckpt = checkpoint.load(path)
        pairs.setdefault(ckpt.languages, []).append((path, ckpt))
    if None in pairs and len(pairs) > 1:
        path = pairs[None][0][0]
        raise InputError(
            f"checkpoint {path}: records no languages, so requests cannot be routed to it beside "
            "other language pairs; serve it on its own"
        )
    return [
        (_ensemble(group, device, precision, overrides), [path for path, _ in group])
        for group in pairs.values()
    ]


def _ensemble(
    loaded: list[tuple[Path, checkpoint.Checkpoint]],
    device: torch.device,
    precision: str,
    overrides: DecodeOverrides,
) -> Loaded:
    paths = [path for path, _ in loaded]
    models, spm_models, tokenizers, cfg, direction, shortlist = [], None, None, None, None, None
    for path, ckpt in loaded:
        run_cfg = ckpt.run_config(path)
        if spm_models is None:
            spm_models, tokenizers, cfg = ckpt.spm, ckpt.tokenizers, run_cfg
            if ckpt.shortlist is not None:
                sizes = (run_cfg.model.src_vocab_size, run_cfg.model.tgt_vocab_size)
                shortlist = Shortlist.from_dict(ckpt.shortlist, *sizes, f"checkpoint {path}").to(device)
        elif ckpt.spm != spm_models or ckpt.tokenizers != tokenizers:
            raise InputError(
                f"cannot ensemble {paths[0]} and {path}: they were trained with different "
                "sentencepiece models"
            )
        direction = checkpoint.one_direction(direction, ckpt, path, "ensemble")
        model = model_of(run_cfg.model, ckpt.model, path)
        models.append(for_decoding(model.eval().to(device), precision))
    assert cfg is not None and spm_models is not None
    src_spm, tgt_spm = _processors(spm_models, tokenizers, paths[0])
    return Loaded(
        ensemble=Ensemble(models),
        decode=overrides.apply(cfg.decode),
        src_spm=src_spm,
        tgt_spm=tgt_spm,
        device=device,
        precision=precision,
        languages=direction[1] if direction else None,
        shortlist=shortlist,
        source=paths[0],
    )


def model_of(cfg: ModelConfig, weights: dict[str, torch.Tensor], path: Path) -> Transformer:
    """The model that checkpoint `path`'s `weights` make under its config `cfg`; one line naming
    the first weight that does not fit (a file put together by hand, or with another config)."""
    if isinstance(weights, dict) and all(isinstance(t, torch.Tensor) for t in weights.values()):
        # Numbered checkpoints may hold the training precision's weights; decoding casts as asked.
        weights = checkpoint.mapped(weights, _fp32)
    try:
        return Transformer.holding(cfg, weights)
    except (RuntimeError, TypeError) as err:
        # Found only once loading failed: building the model the config describes a second time
        # would cost every start.
        misfit = _misfit(cfg, weights)
        if misfit is None:
            raise
        raise _unusable(path, misfit) from err


def _fp32(tensor: torch.Tensor) -> torch.Tensor:
    """A bf16 or fp16 weight as the fp32 one the model holds; anything else as it is."""
    return tensor.float() if tensor.dtype in (torch.bfloat16, torch.float16) else tensor


def _misfit(cfg: ModelConfig, weights: object) -> str | None:
    """The first difference between `weights` and the weights of the model `cfg` describes."""
    if not isinstance(weights, dict):
        return f"its weights are a {type(weights).__name__}, not a table of tensors"
    with torch.device("meta"):
        expected = Transformer(cfg, initialize=False).state_dict()
    for name, want in expected.items():
        have = weights.get(name)
        if have is None:
            return f"weight {name} is missing"
        if not isinstance(have, torch.Tensor) or not have.is_floating_point():
            kind = have.dtype if isinstance(have, torch.Tensor) else type(have).__name__
            return f"weight {name} is {kind}, not a floating-point tensor"
        if have.shape != want.shape:
            return f"weight {name} has shape {tuple(have.shape)}, the config needs {tuple(want.shape)}"
    extra = [name for name in weights if name not in expected]
    return f"weight {extra[0]} is not one of the model its config describes" if extra else None


def _processors(
    spm_models: dict[str, bytes], tokenizers: dict[str, Any] | None, path: Path
) -> tuple[Any, Any]:
    """The checkpoint's text <-> ids converters (`spm.processors`); one line for bytes that are
    not a model (sentencepiece says only "INTERNAL: ... ParseFromArray" and its source line)."""
    try:
        return processors(spm_models, tokenizers)
    except InputError:
        raise  # already one line, such as the extra that a Moses + BPE model needs
    except (RuntimeError, ValueError, KeyError, TypeError):
        raise _unusable(path, "its sentencepiece models cannot be read") from None


def _unusable(path: Path, problem: str) -> InputError:
    return InputError(f"checkpoint {path}: not a usable nmt checkpoint ({problem}){checkpoint.NOT_OURS}")


def for_decoding(model: Transformer, precision: str) -> Transformer:
    """The model in the form that decodes fastest at `precision`, converted once at load: per-step
    casts (autocast) cost more than the arithmetic they save at decoding's small batches."""
    if precision in ("bf16", "fp16"):
        return model.to(torch.bfloat16 if precision == "bf16" else torch.float16)
    if precision != "int8":
        return model
    if model.output_proj is None:
        # A projection of its own that shares the embedding matrix, so that it is quantized too:
        # it holds most of a small model's arithmetic per step.
        # Made on the meta device: drawing initial weights only to replace them took 30 ms of
        # every start with a 32,000-piece vocabulary.
        tied = nn.Linear(model.cfg.d_model, model.cfg.tgt_vocab_size, bias=False, device="meta")
        tied.weight = model.tgt_embed.tokens.weight
        model.output_proj = tied
    return cast(Transformer, int8.quantize(model))
