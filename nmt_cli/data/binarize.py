"""Binarizing a corpus for `nmt prepare`: pairs of text lines encoded chunk by chunk in worker
processes, flagged (and, for train, filtered) the way Moses' clean-corpus-n.perl does, and
appended to the split's side writers."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from nmt_cli.data import corpus_writer, spm, text
from nmt_cli.data.vocabulary import CHUNK, UTF8_HINT
from nmt_cli.errors import RunFailure
from nmt_cli.report import Reporter

REASONS = ("empty", "too_long", "ratio")  # why a train pair is dropped, in order of precedence


def encode_chunk(task: tuple) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Decode, encode, flag and (for train, where `drop` is set) filter one chunk of pairs.

    Runs in a worker process. Returns the flat ids and lengths of the pairs kept on each
    side, and how many pairs of the chunk fall under each of REASONS. A tag's pieces go before
    each source sentence: the same ids as the text "<BT> A dog." typed to `nmt translate`. The
    length limit counts them, as the model reads them; the ratio judges the sentence alone.
    """
    names, first, raws, errors, (max_len, max_ratio), drop, tag = task
    encoded, blank = [], np.zeros(len(raws[0]), bool)
    for side, key in enumerate(("src", "tgt")):
        lines = [
            text.corpus_line(raw, names[side], first + i, errors, UTF8_HINT)
            for i, raw in enumerate(raws[side])
        ]
        blank |= np.fromiter((not line.strip() for line in lines), bool, count=len(lines))
        encoded.append(spm.encode_lines(spm.worker_processor(key), lines))
    (src_ids, src_len), (tgt_ids, tgt_len) = encoded
    pieces = np.asarray(spm.worker_processor("src").encode(tag) if tag else [], np.int32)
    reason = np.zeros(len(src_len), np.int64)
    # Moses clean-corpus-n.perl's tests, on pieces rather than words; the first reason wins.
    ratio = np.maximum(src_len, tgt_len) / np.maximum(np.minimum(src_len, tgt_len), 1)
    reason[ratio > max_ratio] = 3
    reason[(src_len + len(pieces) > max_len) | (tgt_len > max_len)] = 2
    reason[blank | (src_len == 0) | (tgt_len == 0)] = 1
    if tag:
        starts = np.repeat(np.cumsum(src_len) - src_len, len(pieces))
        src_ids = np.insert(src_ids, starts, np.tile(pieces, len(src_len)))
        src_len = src_len + len(pieces)
    if drop and reason.any():
        keep = reason == 0
        src_ids, tgt_ids = src_ids[np.repeat(keep, src_len)], tgt_ids[np.repeat(keep, tgt_len)]
        src_len, tgt_len = src_len[keep], tgt_len[keep]
    return src_ids, src_len, tgt_ids, tgt_len, np.bincount(reason, minlength=len(REASONS) + 1)[1:]


def encode_part(
    encoder: spm.ParallelEncoder,
    writers: list[corpus_writer.SideWriter],
    split: str,
    paths: tuple[Path, Path],
    n_pairs: int,
    options: dict,
    tag: str,
    reporter: Reporter,
) -> dict[str, int]:
    """Encode one corpus of a split through `writers`. Only train is filtered: dropping valid or
    test lines would misalign them with the references they are scored against. Returns its
    pairs by REASONS (dropped for train, kept but flagged otherwise)."""
    names = (str(paths[0]), str(paths[1]))
    limits, drop = (options["max_len"], options["max_ratio"]), split == "train"
    chunks = text.raw_chunks(paths, CHUNK)
    tasks = (
        (names, 1 + k * CHUNK, raws, options["errors"], limits, drop, tag) for k, raws in enumerate(chunks)
    )
    flagged, seen = np.zeros(len(REASONS), np.int64), 0
    bar = reporter.bar(f"encoding {split}", total=n_pairs, unit="pairs")
    for src_ids, src_len, tgt_ids, tgt_len, chunk_flagged in encoder.map(encode_chunk, tasks):
        writers[0].write(src_ids, src_len)
        writers[1].write(tgt_ids, tgt_len)
        flagged += chunk_flagged
        done = len(src_len) + (int(chunk_flagged.sum()) if drop else 0)
        seen += done
        bar.update(done)
    bar.close()
    if seen != n_pairs:
        raise RunFailure(
            f"{paths[0]}: read {seen} lines, counted {n_pairs} before; was it changed? Run again"
        )
    return {reason: int(count) for reason, count in zip(REASONS, flagged, strict=True)}
