"""`nmt prepare`: learn a sentencepiece BPE model and binarize a parallel corpus.

Checks every input and the output directory before writing anything, learns the
vocabulary on a sample, encodes in `workers` processes chunk by chunk (memory does not
grow with the corpus), filters train pairs the way Moses' clean-corpus-n.perl does, and
publishes the result atomically with meta.json last. A re-run with the same inputs and
options reuses the finished corpus. Several training corpora go one after the other into the
train split, each optionally tagged; --spm-from encodes with an existing vocabulary instead of
learning one.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from nmt_cli import __version__
from nmt_cli.data import corpus, corpus_owner, corpus_writer, spm, text, vocabulary
from nmt_cli.data.binarize import REASONS, encode_part
from nmt_cli.data.vocabulary import SEED
from nmt_cli.errors import InputError, RunFailure
from nmt_cli.locking import not_the_working_directory
from nmt_cli.ranges import Allowed, Range, check_each
from nmt_cli.report import Reporter
from nmt_cli.user_settings import PrepareConfig

MAX_VOCAB = 1_000_000  # sentencepiece's ids are int32; vocabularies in use stay well below
# The values each option may take, declared as the decode settings' are (`ranges`).
BOUNDS: dict[str, Allowed] = {
    "vocab_size": Range(int, 8, MAX_VOCAB),
    "character_coverage": Range(float, 0, 1, above=True),
    "normalization": spm.NORMALIZATIONS,
    **dict.fromkeys(("spm_sample", "max_len", "workers"), Range(int, 1)),
    "max_ratio": Range(float, 1),
    "errors": text.ERRORS,
}


def run(cfg: PrepareConfig, quiet: bool = False) -> None:
    reporter = Reporter(quiet)
    src, tgt, out, workers = cfg.src, cfg.tgt, Path(cfg.out), cfg.workers
    not_the_working_directory(out, "--out")
    options = _content_options(cfg)
    _check_options(cfg)
    models = _use_given_vocabulary(cfg, options)
    sources = _count_sources(cfg)
    created = corpus_writer.check_out_dir(out)
    corpus_owner.refuse_foreign(out)
    fingerprint = corpus_writer.fingerprint({"train": sum(sources.corpora, ()), **sources.inputs}, options)
    meta = corpus_writer.find_reusable(out, fingerprint)
    if meta is not None:
        reporter.info(f"reusing {out}: inputs and options unchanged since it was prepared")
        _summary(reporter, meta)
        return
    started = time.monotonic()
    staging = _start(out, created)
    try:
        meta = _prepare(staging, sources, models, src, tgt, options, workers, reporter)
        meta.fingerprint = fingerprint
        corpus_writer.publish(staging, out, meta)
    except BaseException as err:  # Ctrl-C included: a failed run leaves nothing behind
        corpus_writer.discard_staging(staging)
        corpus_writer.remove_created(out, created)
        explained = _explained(err, out)
        if explained is None:
            raise
        raise explained from None
    reporter.info(f"prepared {out} in {time.monotonic() - started:.1f}s")
    _summary(reporter, meta)


def _content_options(cfg: PrepareConfig) -> dict:
    """The options that decide the corpus's content; with the inputs, they make its fingerprint."""
    options = dict(
        vocab_size=cfg.vocab_size,
        joint=cfg.joint,
        character_coverage=cfg.character_coverage,
        byte_fallback=cfg.byte_fallback,
        normalization=cfg.normalization,
        spm_sample=cfg.spm_sample,
        max_len=cfg.max_len,
        max_ratio=cfg.max_ratio,
        errors=cfg.errors,
        seed=SEED,
    )
    # Only when given, so that corpora prepared before these options existed are still reused.
    options.update({k: list(v) for k, v in (("train_tags", cfg.train_tags), ("reserve", cfg.reserve)) if v})
    return options


def _use_given_vocabulary(cfg: PrepareConfig, options: dict) -> tuple[bytes, bytes] | None:
    """The models of --spm-from, None without it. Their checksums replace in `options` the options
    that learn a vocabulary."""
    if cfg.spm_from is None:
        return None
    models, tokenizers = vocabulary.existing_models(Path(cfg.spm_from), cfg.src, cfg.tgt)
    sizes = [spm.load_processor(m).get_piece_size() for m in models]
    options.update(vocab_size=max(sizes), joint=models[0] == models[1], spm_from=str(cfg.spm_from))
    options["spm_sha256"] = [spm.sha256(m) for m in models]
    if tokenizers:  # the text is read as that model reads it; train copies them into its checkpoints
        options["tokenizers"] = tokenizers
    return models


def _count_sources(cfg: PrepareConfig) -> Sources:
    """Each input's pair of files, checked and counted: valid and test, then the training corpora."""
    src, tgt = cfg.src, cfg.tgt
    corpora = [(Path(f"{p}.{src}"), Path(f"{p}.{tgt}")) for p in cfg.train]
    inputs = {
        split: (Path(f"{p}.{src}"), Path(f"{p}.{tgt}"))
        for split, p in (("valid", cfg.valid), ("test", cfg.test))
        if p
    }
    lines = {split: _count_pairs(split, *paths) for split, paths in inputs.items()}
    corpus_lines = [_count_pairs("train", *paths) for paths in corpora]
    return Sources(corpora, corpus_lines, inputs, lines)


def _explained(err: BaseException, out: Path) -> RunFailure | None:
    """A failed run's error with where it happened and what to do, for those that lack it."""
    if isinstance(err, spm.WorkerDied):
        return RunFailure(
            f"{err}; nothing was written to --out {out}; run again, with fewer --workers if memory ran short"
        )
    if isinstance(err, OSError):  # say where and what to do, not just "No space left on device"
        where = f" ({err.filename})" if err.filename else ""
        return RunFailure(
            f"--out {out}: cannot write the prepared corpus: {err.strerror or err}{where}; no corpus "
            "was made; free some disk space or choose another --out, then run again"
        )
    return None


@dataclass(frozen=True)
class Sources:
    """The input files and their line counts: the training corpora, then valid and test."""

    corpora: list[tuple[Path, Path]]
    corpus_lines: list[int]
    inputs: dict[str, tuple[Path, Path]]
    lines: dict[str, int]


def _start(out: Path, created: Path | None) -> Path:
    """Create `out` if needed and a staging directory inside it."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        return corpus_writer.make_staging(out)
    except OSError as err:
        corpus_writer.remove_created(out, created)
        raise InputError(f"--out {out}: cannot write there ({err.strerror})") from None


def _check_options(cfg: PrepareConfig) -> None:
    """The rules between options, then each option's bounds (a SettingError, worded as an option)."""
    src, tgt = cfg.src, cfg.tgt
    checks = [
        (
            src != tgt and "/" not in src + tgt and "." not in src + tgt,
            f"--src {src!r} and --tgt {tgt!r} must be two different plain language codes",
        ),
        (len(cfg.train) >= 1, "--train: give at least one training corpus"),
        (
            len(cfg.train_tags) in (0, len(cfg.train)),
            f"--train-tag: given {len(cfg.train_tags)} times for {len(cfg.train)} --train corpora; give "
            'one per --train, in the same order ("" for an untagged corpus)',
        ),
    ]
    for ok, message in checks:
        if not ok:
            raise InputError(message)
    vocabulary.check_tag_names((*cfg.train_tags, *cfg.reserve))
    check_each(BOUNDS, cfg)


def _count_pairs(split: str, src_path: Path, tgt_path: Path) -> int:
    _refuse_a_file_for_a_prefix(split, src_path, tgt_path)
    for path in (src_path, tgt_path):
        # A pipe could be read once only, and prepare reads every file twice (count, encode).
        if path.exists() and not path.is_dir() and not path.is_file():
            raise InputError(f"{path}: not a regular file (a pipe or a device); give a text file")
    n_src, n_tgt = text.count_lines(src_path), text.count_lines(tgt_path)
    if n_src != n_tgt:
        raise InputError(
            f"{split} corpus is not parallel: {src_path} has {n_src} lines, {tgt_path} has "
            f"{n_tgt}; they must match line for line"
        )
    if n_src == 0:
        raise InputError(f"{split} corpus is empty: {src_path} and {tgt_path} have no lines")
    return n_src


def _refuse_a_file_for_a_prefix(split: str, src_path: Path, tgt_path: Path) -> None:
    """--train corpus/train.en, a file as Marian and OpenNMT name them, for the prefix corpus/train."""
    given = Path(str(src_path)[: -len(src_path.suffix)])
    if src_path.exists() or not given.is_file() or given.suffix not in (src_path.suffix, tgt_path.suffix):
        return
    prefix = given.with_suffix("")
    raise InputError(
        f"--{split} {given}: give the prefix of the files, {prefix} (for {prefix}{src_path.suffix} and "
        f"{prefix}{tgt_path.suffix})"
    )


def _prepare(
    staging: Path,
    sources: Sources,
    models: tuple[bytes, bytes] | None,
    src: str,
    tgt: str,
    options: dict,
    workers: int,
    reporter: Reporter,
) -> corpus.CorpusMeta:
    """Learn the vocabulary (unless given), then encode every split into `staging`; returns
    meta.json's content."""
    tags = options.get("train_tags") or [""] * len(sources.corpora)
    if models is None:
        reserved = list(dict.fromkeys(t for t in (*options.get("reserve", []), *tags) if t))
        models = vocabulary.learn(sources.corpora, sources.corpus_lines, options, reserved, reporter)
    names = _write_models(staging, models, src, tgt)
    tokenizers = options.get("tokenizers")
    src_processor = spm.processors({"src": models[0], "tgt": models[1]}, tokenizers)[0]
    vocabulary.check_tags(src_processor, [*tags, *options.get("reserve", [])], options.get("spm_from"))
    sizes = [spm.load_processor(m).get_piece_size() for m in models]
    dtype = corpus_writer.token_dtype(max(sizes))
    parts = {
        "train": [
            (paths, n, tag) for paths, n, tag in zip(sources.corpora, sources.corpus_lines, tags, strict=True)
        ],
        **{split: [(paths, sources.lines[split], "")] for split, paths in sources.inputs.items()},
    }
    splits, flagged, corpora = {}, {}, []
    with spm.ParallelEncoder(models, workers, tokenizers) as encoder:
        for split, split_parts in parts.items():
            writers = [corpus_writer.SideWriter(staging, split, lang, dtype) for lang in (src, tgt)]
            flagged[split] = dict.fromkeys(REASONS, 0)
            for paths, n_pairs, tag in split_parts:
                before = writers[0].sentences
                part_flagged = encode_part(encoder, writers, split, paths, n_pairs, options, tag, reporter)
                for reason, count in part_flagged.items():
                    flagged[split][reason] += count
                if split == "train":
                    pairs = writers[0].sentences - before
                    corpora.append({"src": str(paths[0]), "tgt": str(paths[1]), "pairs": pairs, "tag": tag})
            for writer in writers:
                writer.close()
            splits[split] = {
                "pairs": writers[0].sentences,
                "src_tokens": writers[0].total,
                "tgt_tokens": writers[1].total,
            }
    _report_filtered(splits["train"]["pairs"], flagged, reporter)
    all_inputs = {"train": sources.corpora[0], **sources.inputs}
    return corpus.CorpusMeta(
        src=src,
        tgt=tgt,
        joint=models[0] == models[1],
        dtype=dtype,
        vocab_size={"src": sizes[0], "tgt": sizes[1]},
        spm=names,
        spm_sha256={"src": spm.sha256(models[0]), "tgt": spm.sha256(models[1])},
        special_ids={"pad": 0, "unk": 1, "bos": 2, "eos": 3},
        splits=splits,
        dropped=flagged["train"],
        flagged={s: f for s, f in flagged.items() if s != "train"},
        options=options,
        inputs={split: {"src": str(p[0]), "tgt": str(p[1])} for split, p in all_inputs.items()},
        files={p.name: p.stat().st_size for p in staging.iterdir()},
        nmt_version=__version__,
        corpora=corpora,
    )


def _write_models(staging: Path, models: tuple[bytes, bytes], src: str, tgt: str) -> dict[str, str]:
    """Write the sentencepiece models into `staging`, one file when they are the same; returns
    each side's file name."""
    if models[0] == models[1]:
        names = {"src": "spm.model", "tgt": "spm.model"}
    else:
        names = {"src": f"spm.{src}.model", "tgt": f"spm.{tgt}.model"}
    for side, model in zip(("src", "tgt"), models, strict=True):
        (staging / names[side]).write_bytes(model)
    return names


def _report_filtered(train_pairs: int, flagged: dict[str, dict[str, int]], reporter: Reporter) -> None:
    """Refuse a training set filtered to nothing; warn of flagged valid and test pairs (kept)."""
    if train_pairs == 0:
        reasons = ", ".join(f"{k.replace('_', ' ')}: {v}" for k, v in flagged["train"].items())
        raise InputError(
            f"every training pair was filtered ({reasons}); check the corpus or raise --max-len / --max-ratio"
        )
    for split in ("valid", "test"):
        kept = {k: v for k, v in flagged.get(split, {}).items() if v}
        if kept:
            what = ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in kept.items())
            reporter.warn(f"{split}: kept all pairs, among them {what} (only train is filtered)")


def _summary(reporter: Reporter, meta: corpus.CorpusMeta) -> None:
    rows = []
    for split, counts in meta.splits.items():
        dropped = sum(meta.dropped.values()) if split == "train" else 0
        rows.append([split, counts["pairs"], counts["src_tokens"], counts["tgt_tokens"], dropped])
    reporter.table(
        f"{meta.src}-{meta.tgt}: vocabulary {meta.vocab_size['src']:,}"
        f"{' joint' if meta.joint else ' / ' + format(meta.vocab_size['tgt'], ',')}, "
        f"{meta.dtype}",
        ["split", "pairs", f"{meta.src} tokens", f"{meta.tgt} tokens", "dropped"],
        rows,
    )
    reasons = ", ".join(f"{k.replace('_', ' ')} {v:,}" for k, v in meta.dropped.items())
    reporter.info(f"dropped from train: {reasons}")
    if len(meta.corpora) > 1:
        for i, part in enumerate(meta.corpora, 1):
            tag = f", tagged {part['tag']}" if part["tag"] else ""
            reporter.info(f"train corpus {i}: {part['src']}: {part['pairs']:,} pairs{tag}")
