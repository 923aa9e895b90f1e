"""The sentencepiece vocabulary of `nmt prepare`: learned on a sample of the training corpora,
or taken from a prepared corpus or a checkpoint (`--spm-from`), with tags kept whole.

"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np
from sentencepiece import SentencePieceProcessor

from nmt_cli.data import corpus, spm, text
from nmt_cli.errors import InputError
from nmt_cli.report import Reporter

SEED = 1  # fixed: the vocabulary sample, hence the whole corpus, is reproducible
UTF8_HINT = "; fix the encoding or pass --errors replace to carry on"
CHUNK = 8192  # pairs per encoding task: large enough to amortize pickling, small in memory
SPECIAL_PIECES = ("<pad>", "<unk>", "<s>", "</s>")  # sentencepiece's names for the ids of special_ids
BARE_MODEL_MAX = 64 << 20  # larger --spm-from files are not tried as a sentencepiece model
_BYTE_PIECE = re.compile(r"<0x[0-9A-Fa-f]{2}>")  # byte fallback's pieces


def existing_models(path: Path, src: str, tgt: str) -> tuple[tuple[bytes, bytes], spm.Tokenizers | None]:
    """The (src, tgt) sentencepiece models of --spm-from, a prepared corpus or a checkpoint, of this
    direction or the other, with the tokenizers it reads text with besides them (an imported
    multilingual Marian model's language codes), by side. A checkpoint written before checkpoints
    recorded their languages gives its models as they are, source for source."""
    _refuse_near_misses(path)
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

        try:
            ckpt = checkpoint.load(path)
        except InputError as err:
            raise InputError(f"--spm-from: {err}") from None
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


def _refuse_near_misses(path: Path) -> None:
    """Say what to give instead of what a user of other toolkits may point --spm-from at: a run
    directory, or a bare sentencepiece model (nmt's vocabularies travel with their languages)."""
    if path.is_dir() and not (path / corpus.META).exists() and (path / "checkpoints").is_dir():
        raise InputError(
            f"--spm-from {path}: a run directory, not a prepared corpus; give one of its checkpoints, "
            f"e.g. {path / 'checkpoints' / 'checkpoint_last.pt'}"
        )
    if not path.is_file() or path.stat().st_size > BARE_MODEL_MAX:
        return
    try:
        with path.open("rb") as stream:
            if stream.read(2) == b"PK":  # a zip archive, as torch writes checkpoints
                return
        spm.load_processor(path.read_bytes())
    except (OSError, RuntimeError, InputError):
        return  # not a sentencepiece model: the checkpoint reader says what it is
    corpus_dir = (
        path.parent if (path.parent / corpus.META).is_file() else "a directory written by `nmt prepare`"
    )
    raise InputError(
        f"--spm-from {path}: a sentencepiece model alone; give {corpus_dir} or a checkpoint (.pt), "
        "which hold the model with its languages"
    )


def check_tag_names(tags: Iterable[str]) -> None:
    """Refuse, before any work, a tag that cannot be a piece of its own: one with a space, a comma
    (they separate sentencepiece's user_defined_symbols) or its "▁", or the name of a special or
    byte piece, which would put the id of padding or of the end of a sentence before every tagged
    source (and wherever the text holds that name)."""
    for tag in filter(None, tags):
        if any(c.isspace() or c in ",\u2581" for c in tag):
            raise InputError(
                f"--train-tag / --reserve {tag!r}: a tag is one word without spaces or commas (or "
                "\u2581), e.g. <BT>"
            )
        if tag in SPECIAL_PIECES or _BYTE_PIECE.fullmatch(tag):
            raise InputError(
                f"--train-tag / --reserve {tag}: the name of one of sentencepiece's own pieces "
                f"({', '.join(SPECIAL_PIECES)}, <0x00> to <0xFF>); choose another tag, e.g. <BT>"
            )


def check_tags(processor: SentencePieceProcessor, tags: list[str], spm_from: str | None) -> None:
    """A tag must stay one piece, or the model would see it spelled out like any other word."""
    for tag in filter(None, tags):
        piece = processor.piece_to_id(tag)
        if piece == processor.unk_id() or piece not in processor.encode(tag):
            if spm_from is None:  # learned with the tag as a user symbol, yet the text splits it
                raise InputError(
                    f"tag {tag}: the vocabulary learned does not keep it as one piece; choose "
                    "another tag, e.g. <BT>"
                )
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
        # Tags precede source sentences only; --reserve keeps its tags in both models, as
        # --spm-from swaps them for a corpus of the other direction.
        symbols = reserved if side == 0 else list(options.get("reserve", []))
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
                line = text.corpus_line(raws[side][i], str(paths[side]), first + i, errors, UTF8_HINT)
                if line.strip():
                    yield line
        taken += len(draws)
        first += len(raws[0])
        bar.update(len(raws[0]))
    bar.close()
