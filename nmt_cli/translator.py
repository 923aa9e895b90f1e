"""Translation as a library: checkpoints loaded as an ensemble with their sentencepiece models,
and lists of raw strings in, (text, score) hypotheses out. `nmt translate`, `nmt attend` and the
benchmarks share it. No printing and no files besides the checkpoints it loads. Imports torch,
numpy, `checkpoint`, `config`, the model, search, `data.spm` and `errors`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from sentencepiece import SentencePieceProcessor

from nmt_cli import checkpoint
from nmt_cli.config import DecodeConfig, DecodeOverrides
from nmt_cli.data import spm
from nmt_cli.errors import InputError
from nmt_cli.model import Transformer
from nmt_cli.search import Ensemble, translate_sentences
from nmt_cli.training.precision import autocast


@dataclass
class Translator:
    """Loaded models with their sentencepiece processors and decode settings."""

    ensemble: Ensemble
    decode: DecodeConfig
    src_spm: SentencePieceProcessor
    tgt_spm: SentencePieceProcessor
    device: torch.device
    precision: str
    truncated: int = 0

    @property
    def max_source(self) -> int:
        return self.ensemble.max_positions - 1  # room for EOS

    def translate(self, lines: list[str], batch_tokens: int, nbest: int = 1) -> list[list[tuple[str, float]]]:
        """(text, score) hypotheses for each line; an empty line gets one empty hypothesis."""
        ids = []
        for line in lines:
            pieces = self.src_spm.encode(line.strip()) if line.strip() else []
            if len(pieces) > self.max_source:
                pieces = pieces[: self.max_source]
                self.truncated += 1
            ids.append(np.asarray(pieces, dtype=np.int64))
        todo = [i for i, x in enumerate(ids) if len(x)]
        results: list[list[tuple[str, float]]] = [[("", 0.0)] for _ in lines]
        with autocast(self.device, self.precision):
            hyps = translate_sentences(
                self.ensemble, [ids[i] for i in todo], self.decode, batch_tokens, self.device, nbest
            )
        for i, sentence in zip(todo, hyps, strict=True):
            results[i] = [(self.tgt_spm.decode(h.tokens), h.score) for h in sentence] or [("", 0.0)]
        return results


def load_translator(
    paths: list[Path],
    device: torch.device,
    precision: str,
    overrides: DecodeOverrides = DecodeOverrides(),
) -> Translator:
    """Load one or more checkpoints as an ensemble; they must share the target vocabulary."""
    models, spm_models, cfg = [], None, None
    for path in paths:
        ckpt = checkpoint.load(path)
        run_cfg = ckpt.run_config(path)
        if spm_models is None:
            spm_models, cfg = ckpt.spm, run_cfg
        elif ckpt.spm != spm_models:
            raise InputError(
                f"cannot ensemble {paths[0]} and {path}: they were trained with different "
                "sentencepiece models"
            )
        model = Transformer(run_cfg.model)
        model.load_state_dict(ckpt.model)
        models.append(model.eval().to(device))
    assert cfg is not None and spm_models is not None
    return Translator(
        Ensemble(models),
        overrides.apply(cfg.decode, "translate options"),
        spm.load_processor(spm_models["src"]),
        spm.load_processor(spm_models["tgt"]),
        device,
        precision,
    )
