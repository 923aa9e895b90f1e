"""What one `nmt train` invocation works with: the model, the data and where the run is written."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch
from sentencepiece import SentencePieceProcessor

from nmt_cli.config import RunConfig
from nmt_cli.data.corpus import ParallelSplit
from nmt_cli.data.spm import Tokenizers
from nmt_cli.model import Transformer
from nmt_cli.report import Reporter
from nmt_cli.training.distributed import World


@dataclass
class Session:
    """What one `nmt train` invocation works with."""

    model: Transformer
    cfg: RunConfig
    train_data: ParallelSplit
    valid_data: ParallelSplit
    languages: tuple[str, str]
    """(source, target) of the corpus, recorded in every checkpoint."""
    run_dir: Path
    spm_models: dict[str, bytes]
    tokenizers: Tokenizers | None
    """How the data's text was read besides `spm_models` (an imported model's language codes):
    recorded in every checkpoint, as translation must read text alike."""
    device: torch.device
    reporter: Reporter
    tgt_processor: SentencePieceProcessor
    """The target side's, for validation BLEU."""
    world: World = field(default_factory=World)
    """This process's place among the torchrun processes (one process by default)."""
    corpus_sizes: list[int] = field(default_factory=list)
    """Pairs of each training corpus, in order (for train.corpus_weights)."""
    initial_optimizer: dict | None = None
    """Adam's state to start a new run with (`nmt train --init-from --keep-optimizer`)."""
