"""`nmt shortlist`: learn a vocabulary shortlist from a parallel corpus and store it with a model.

Any checkpoint can have one: trained, averaged, fine-tuned or imported. The corpus is read as
text and split into pieces by the checkpoint's own tokenizers, so the shortlist's ids are the
model's whatever produced it. `nmt translate --shortlist` (and `serve`, and the API's
`shortlist=True`) then decodes over it; `nmt export` writes it as CTranslate2's vocabulary map.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

from nmt_cli import checkpoint
from nmt_cli.data.shortlist import Shortlist, coverage, learn
from nmt_cli.data.spm import processors
from nmt_cli.data.text import check_readable, count_lines, iter_lines
from nmt_cli.errors import InputError
from nmt_cli.files import not_an_input, output_target
from nmt_cli.report import Reporter

Pairs = list[tuple[np.ndarray, np.ndarray]]
FEW_PAIRS = 1000  # fewer pairs than this rarely show a piece's translations
FREQUENT_DEFAULT = 100  # `nmt shortlist --frequent`'s default


def run(
    model: Path,
    train: Path,
    output: Path,
    languages: tuple[str | None, str | None],
    candidates: int,
    frequent: int,
    max_pairs: int,
    valid: Path | None,
    quiet: bool,
) -> Shortlist:
    reporter = Reporter(quiet)
    if candidates < 1 or frequent < 0 or max_pairs < 1:
        raise InputError("--candidates and --max-pairs must be at least 1, --frequent at least 0")
    output_target(output, "--output")  # before the work: a directory or a missing parent is refused
    ckpt = checkpoint.load(model)
    cfg = ckpt.run_config(model).model
    src, tgt = _languages(languages, ckpt.languages, model)
    corpora = [
        Path(f"{prefix}.{lang}") for prefix in (train, valid) if prefix is not None for lang in (src, tgt)
    ]
    for prefix, option in ((train, "--train"), *(((valid, "--valid"),) if valid is not None else ())):
        for lang in (src, tgt):  # before the work: nothing is written for a missing corpus
            check_readable(Path(f"{prefix}.{lang}"), f"{option} {prefix}.{lang}")
    not_an_input(output, [model, *corpora], "--output")
    candidates = _at_most_the_vocabulary(candidates, "--candidates", cfg.tgt_vocab_size, reporter)
    frequent = _at_most_the_vocabulary(frequent, "--frequent", cfg.tgt_vocab_size, reporter)
    encoders = processors(ckpt.spm, ckpt.tokenizers)
    pairs = _read(train, src, tgt, encoders, max_pairs, reporter, cfg.max_positions - 1)
    if not pairs:
        raise InputError(f"--train {train}: no sentence pair with text on both sides")
    # Read before the work too: a --valid with unequal sides or bad UTF-8 is refused, not
    # reported (exit 2) after the checkpoint is written.
    held_out = (
        _read(valid, src, tgt, encoders, max_pairs, reporter, cfg.max_positions - 1)
        if valid is not None
        else None
    )
    shortlist = learn(
        pairs,
        cfg.src_vocab_size,
        cfg.tgt_vocab_size,
        candidates,
        frequent,
        rounds=lambda steps: reporter.progress(steps, "learning (IBM Model 1)", unit=" rounds"),
    )
    if len(pairs) < FEW_PAIRS or frequent == 0:
        plural = "" if len(pairs) == 1 else "s"
        why = f"learned from {len(pairs):,} pair{plural}" if len(pairs) < FEW_PAIRS else "--frequent 0"
        reporter.warn(
            f"{why}: a shortlist this thin can leave out the pieces a translation needs; learn it "
            f"from the training corpus (thousands of pairs) with --frequent {FREQUENT_DEFAULT} or more"
        )
    ckpt.shortlist = shortlist.to_dict()
    checkpoint.save(ckpt, output, "--output")
    reporter.info(
        f"shortlist of {candidates} candidates a source piece and {frequent} frequent pieces, learned from "
        f"{len(pairs):,} pairs of {train}, stored in {output}"
    )
    if held_out is not None:
        share, size = coverage(shortlist, held_out)
        reporter.info(
            f"coverage on {valid}: {share:.2%} of the reference pieces are in their sentence's "
            f"shortlist, of {size:.0f} pieces a sentence on average"
        )
    return shortlist


def _languages(
    given: tuple[str | None, str | None], recorded: tuple[str, str] | None, model: Path
) -> tuple[str, str]:
    src, tgt = given
    if src is None or tgt is None:
        if recorded is None:
            raise InputError(f"{model} records no languages: give --src and --tgt (the corpus's suffixes)")
        src, tgt = src or recorded[0], tgt or recorded[1]
    if recorded is not None and (src == recorded[1] or tgt == recorded[0]):
        # Suffixes that name the model's other side: a shortlist of the opposite direction.
        raise InputError(
            f"--src {src} --tgt {tgt}: {model} translates {recorded[0]} into {recorded[1]}; give "
            f"--src {recorded[0]} --tgt {recorded[1]}"
        )
    return src, tgt


def _at_most_the_vocabulary(count: int, option: str, vocab_size: int, reporter: Reporter) -> int:
    if count <= vocab_size:
        return count
    reporter.warn(f"{option} {count}: the target vocabulary has {vocab_size}; taking that")
    return vocab_size


def _read(
    prefix: Path, src: str, tgt: str, encoders: tuple, max_pairs: int, reporter: Reporter, longest: int
) -> Pairs:
    """Up to `max_pairs` pairs of PREFIX.src and PREFIX.tgt as ids, each side cut to `longest` pieces
    (a source's most: the model's positions less the end of sentence); pairs with an empty side left out."""
    paths = (Path(f"{prefix}.{src}"), Path(f"{prefix}.{tgt}"))
    counts = [count_lines(path, f"{prefix}.{lang}") for path, lang in zip(paths, (src, tgt), strict=True)]
    if counts[0] != counts[1]:
        raise InputError(
            f"{paths[0]} has {counts[0]:,} lines and {paths[1]} {counts[1]:,}: a parallel corpus has one "
            "line per sentence on each side"
        )
    pairs: Pairs = []
    with reporter.bar(f"reading {prefix}", total=min(counts[0], max_pairs), unit=" lines") as bar:
        for source, target in _lines(paths):
            if len(pairs) == max_pairs:
                break
            bar.update(1)
            if source.strip() and target.strip():
                # Cut as translation cuts a source: learning costs the product of a pair's lengths,
                # so one pair of 30,000-character lines took a minute and 2.4 GB.
                pairs.append(
                    (
                        np.asarray(encoders[0].encode(source.strip())[:longest], np.int64),
                        np.asarray(encoders[1].encode(target.strip())[:longest], np.int64),
                    )
                )
    return pairs


def _lines(paths: tuple[Path, Path]) -> Iterator[tuple[str, str]]:
    yield from zip(iter_lines(paths[0], str(paths[0])), iter_lines(paths[1], str(paths[1])), strict=True)
