"""What every reader returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from nmt_cli.config import DecodeConfig, ModelConfig


@dataclass
class Imported:
    model: ModelConfig
    """The architecture in nmt's terms, vocabulary sizes included."""
    weights: dict[str, torch.Tensor]
    """nmt's state dict: nmt's names, rows in nmt's id order."""
    spm: dict[str, bytes]
    """"src" and "tgt" sentencepiece models renumbered to those ids."""
    languages: tuple[str, str] | None
    decode: DecodeConfig = field(default_factory=DecodeConfig)
    """The toolkit's own decoding defaults, so that `nmt translate` without options decodes as it does."""
    origin: dict[str, Any] = field(default_factory=dict)
    """Where the model came from, recorded in the checkpoint."""
    tokenizers: dict[str, dict[str, Any]] | None = None
    """How the model reads text besides `spm`, by side (Checkpoint.tokenizers)."""
