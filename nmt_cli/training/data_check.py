"""Whether the --data of `nmt train` suits the run's config, checked when the session opens,
before the run directory is made: one train.corpus_weights weight per training corpus, every
sentence within model.max_positions, and some training pair within train.max_tokens."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from nmt_cli.config import RunConfig
from nmt_cli.data import corpus
from nmt_cli.errors import InputError


def load_checked_splits(
    data: Path, meta: corpus.CorpusMeta, cfg: RunConfig
) -> tuple[corpus.ParallelSplit, corpus.ParallelSplit]:
    """The training and validation pairs of --data `data`, refused (one line says what to change)
    where they do not suit `cfg`."""
    _check_corpus_weights(cfg.train.corpus_weights, meta.corpus_sizes(), data)
    train_data, valid_data = corpus.load_split(data, "train"), corpus.load_split(data, "valid")
    for split, pairs in (("train", train_data), ("valid", valid_data)):
        _check_lengths(split, pairs, cfg.model.max_positions, data)
    _check_budget(train_data, cfg.train.max_tokens, data)
    return train_data, valid_data


def _check_lengths(split: str, pairs: corpus.ParallelSplit, max_positions: int, data: Path) -> None:
    """Every sentence must fit the model's positions with its EOS (or BOS): checked at the start,
    not found at the first validation after hours of training."""
    for side in (pairs.src, pairs.tgt):
        lengths = side.lengths()
        if len(lengths) and int(lengths.max()) + 1 > max_positions:
            line, longest = int(lengths.argmax()) + 1, int(lengths.max())
            fix = f"prepare it with --max-len {max_positions - 1}" if split == "train" else "shorten it"
            # Lengths are held in uint16, capped at corpus.MAX_LENGTH: a longer sentence shows as that.
            count = f"at least {longest:,}" if longest >= corpus.MAX_LENGTH else f"{longest:,}"
            raise InputError(
                f"--data {data}: {split} sentence {line:,} has {count} pieces, more than the "
                f"{max_positions - 1:,} that model.max_positions = {max_positions} holds with EOS; raise "
                f"model.max_positions or {fix}"
            )


def _check_budget(pairs: corpus.ParallelSplit, max_tokens: int, data: Path) -> None:
    """Some training pair must fit in a batch (its longer side with EOS or BOS): found here, before
    the run directory is made, not by the first batch."""
    if not len(pairs):
        return
    shortest = int(np.maximum(pairs.src.lengths(), pairs.tgt.lengths()).min()) + 1
    if shortest > max_tokens:
        raise InputError(
            f"train.max_tokens = {max_tokens}: no training pair of --data {data} fits in a batch (the "
            f"shortest needs {shortest} tokens); raise train.max_tokens"
        )


def _check_corpus_weights(weights: list[float], corpus_sizes: list[int], data: Path) -> None:
    if weights and len(weights) != len(corpus_sizes):
        raise InputError(
            f"train.corpus_weights has {len(weights)} weights but --data {data} has {len(corpus_sizes)} "
            "training corpora; give one weight per `nmt prepare --train`, in that order"
        )
    if any(w > 0 and n == 0 for w, n in zip(weights, corpus_sizes, strict=False)):
        raise InputError(
            f"train.corpus_weights gives a share to a corpus of --data {data} that kept no pairs; "
            "set its weight to 0"
        )
