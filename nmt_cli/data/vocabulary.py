"""The sentencepiece vocabulary of `nmt prepare`: learned on a sample of the training corpora,
or taken from a prepared corpus or a checkpoint (`--spm-from`), with tags kept whole.

"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
from sentencepiece import SentencePieceProcessor

from nmt_cli.data import corpus, spm, text
from nmt_cli.errors import InputError
from nmt_cli.report import Reporter

SEED = 1  # fixed: the vocabulary sample, hence the whole corpus, is reproducible
UTF8_HINT = "; fix the encoding or pass --errors replace to carry on"
CHUNK = 8192  # pairs per encoding task: large enough to amortize pickling, small in memory


def existing_models(path: Path, src: str, tgt: str) -> tuple[tuple[bytes, bytes], spm.Tokenizers | None]:
    """The (src, tgt) sentencepiece models of --spm-from, a prepared corpus or a checkpoint, of this
    direction or the other, with the tokenizers it reads text with besides them (an imported
    multilingual Marian model's language codes), by side. A checkpoint written before checkpoints
    recorded their languages gives its models as they are, source for source."""
    if path.is_dir():
        try:
            meta = corpus.load_meta(path)
        except InputError as err:
            raise InputError(f"--spm-from {err}") from None
        languages: tuple[str, str] | None = (meta.src, meta.tgt)
        models = spm.read_models(path, meta)
        tokenizers = spm.read_tokenizers(path, meta)
    elif not path.is_file():
        raise InputError(
            f"--spm-from {path}: not found; give a checkpoint (.pt) or a directory written by `nmt prepare`"
        )
    else:
        from nmt_cli import checkpoint  # imported on use: torch is slow to load

        ckpt = checkpoint.load(path)
        models, languages = (ckpt.spm["src"], ckpt.spm["tgt"]), ckpt.languages
        tokenizers = ckpt.tokenizers or None
    if languages == (tgt, src):
        other_side = {"src": "tgt", "tgt": "src"}
        swapped = {other_side[side]: spec for side, spec in (tokenizers or {}).items() if side in other_side}
        return (models[1], models[0]), swapped or None
    if models[0] == models[1] or languages is None or languages == (src, tgt):
        return models, tokenizers
    raise InputError(
        f"--spm-from {path}: its vocabularies are for {languages[0]} and {languages[1]}, not {src} and "
        f"{tgt}; give a corpus or checkpoint of these languages"
    )


def check_tags(processor: SentencePieceProcessor, tags: list[str], spm_from: str | None) -> None:
    """A tag must stay one piece, or the model would see it spelled out like any other word."""
    for tag in filter(None, tags):
        piece = processor.piece_to_id(tag)
        if piece == processor.unk_id() or piece not in processor.encode(tag):
            raise InputError(
                f"tag {tag}: not a piece of the sentencepiece model of --spm-from {spm_from}; prepare "
                f"the corpus that model was learned on with --reserve {tag}, or drop --spm-from"
            )


def learn(
    corpora: list[tuple[Path, Path]],
    counts: list[int],
    options: dict,
    reserved: list[str],
    reporter: Reporter,
) -> tuple[bytes, bytes]:
    """The (src, tgt) sentencepiece models: one joint model, or one per language. The sample is
    drawn from every training corpus in proportion to its size; `reserved` pieces stay whole."""
    common = dict(
        vocab_size=options["vocab_size"],
        character_coverage=options["character_coverage"],
        byte_fallback=options["byte_fallback"],
        normalization=options["normalization"],
        # sentencepiece records num_threads in the model: one thread keeps the model bytes (and
        # spm_sha256) the same whatever --workers is, at little cost (BPE merges run on one
        # thread anyway: 4.0 s vs 3.7 s with two on 1M sentences).
        threads=1,
    )
    total = sum(counts)
    what = " + ".join(str(p) for paths in corpora for p in paths)

    def sample(keep: int, only: int | None = None) -> Iterator[str]:
        for paths, n_pairs in zip(corpora, counts, strict=True):
            share = max(1, round(keep * n_pairs / total))
            yield from sample_lines(paths, n_pairs, share, options["errors"], reporter, only)

    if options["joint"]:
        # The sample counts sentences: a joint model sees both sides of half as many pairs.
        keep = max(1, options["spm_sample"] // 2)
        reporter.info(
            f"learning a joint BPE vocabulary of {options['vocab_size']} on {min(keep, total):,} pairs"
        )
        model = spm.train_spm(sample(keep), what=what, user_symbols=reserved, **common)
        return model, model
    models = []
    for side in (0, 1):
        names = " + ".join(str(paths[side]) for paths in corpora)
        reporter.info(f"learning a BPE vocabulary of {options['vocab_size']} for {names}")
        # Tags precede source sentences only.
        symbols = reserved if side == 0 else []
        models.append(
            spm.train_spm(sample(options["spm_sample"], side), what=names, user_symbols=symbols, **common)
        )
    return models[0], models[1]


def sample_lines(
    paths: tuple[Path, Path],
    n_pairs: int,
    keep: int,
    errors: str,
    reporter: Reporter,
    only: int | None = None,
) -> Iterator[str]:
    """Stream about `keep` pairs drawn uniformly at random (never more), skipping blank lines.
    Only the drawn lines are decoded here; the encoding pass checks all of them."""
    rng = np.random.default_rng(SEED)
    p = min(1.0, keep / n_pairs)
    sides = (0, 1) if only is None else (only,)
    taken, first = 0, 1
    bar = reporter.bar("reading the vocabulary sample", total=n_pairs, unit="pairs")
    for raws in text.raw_chunks(paths, CHUNK):
        draws = np.flatnonzero(rng.random(len(raws[0])) < p)[: keep - taken]
        for i in draws.tolist():
            for side in sides:
                line = text.decode_line(raws[side][i], str(paths[side]), first + i, errors, UTF8_HINT)
                if line.strip():
                    yield line
        taken += len(draws)
        first += len(raws[0])
        bar.update(len(raws[0]))
    bar.close()
