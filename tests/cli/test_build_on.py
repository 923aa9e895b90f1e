"""Building on a trained model: `nmt prepare --spm-from` (a corpus or a checkpoint's vocabulary),
several tagged training corpora (`--train`, `--train-tag`, `--reserve`), `train.corpus_weights`,
and `nmt train --init-from` (fine-tuning: the checkpoint's weights, a fresh run, its refusals)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import (
    Corpus,
    TrainedRun,
    nmt,
    one_line_error,
    one_thread,
    prepare_args,
    refused,
    sentences,
    train_args,
    write_split,
)

from nmt_cli import checkpoint, recipe
from nmt_cli.config import RunConfig
from nmt_cli.data import corpus as corpus_io
from nmt_cli.data import spm, vocabulary
from nmt_cli.data.batching import collate, make_batches, weighted_epoch
from nmt_cli.model import Transformer
from nmt_cli.recipe import load_recipe
from nmt_cli.training.validate import valid_loss

TAG = "<BT>"
A_PAIRS, B_PAIRS = 300, 100


def _prepare(out: Path, *train: Path, valid: Path, extra: tuple[object, ...] = (), quiet: bool = True) -> int:
    """`nmt prepare` of copy corpora (later options in `extra` win)."""
    return nmt(*prepare_args(out, *train, valid=valid, quiet=quiet), *extra)


def _prepare_refused(
    capsys: pytest.CaptureFixture[str], out: Path, *train: Path, valid: Path, extra: tuple[object, ...]
) -> str:
    """The one line with which `nmt prepare` of copy corpora refuses `extra` (exit code 2), having
    written nothing to `out`."""
    capsys.readouterr()  # what came before is not this command's
    line = refused(capsys, *prepare_args(out, *train, valid=valid, quiet=False), *extra)
    assert not out.exists()
    return line


def _processor(data: Path, side: str = "src"):
    meta = corpus_io.load_meta(data)
    models = dict(zip(("src", "tgt"), spm.read_models(data, meta), strict=True))
    return spm.load_processor(models[side])


def _decoded(data: Path, split: str = "train", side: str = "src") -> list[str]:
    processor = _processor(data, side)
    pairs = corpus_io.load_split(data, split)
    array = pairs.src if side == "src" else pairs.tgt
    return [processor.decode(array[i].tolist()) for i in range(len(pairs))]


def _records(run_dir: Path, kind: str = "train") -> list[dict]:
    lines = (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    return [r for r in map(json.loads, lines) if r["type"] == kind]


def _no_learning(*args: object, **kwargs: object) -> None:
    raise AssertionError("--spm-from must not learn a vocabulary")


# --- fixtures: raw copy corpora and their prepared forms, once per module --------------------


class Raw:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.a_lines = sentences(A_PAIRS, seed=21)
        # At least two words: a tag adds pieces to the source, and a one-word tagged source
        # would fall to the length-ratio filter (see test_a_tag_does_not_decide_which_pairs_are_kept).
        self.b_lines = sentences(B_PAIRS, seed=22, min_words=2)
        self.valid_lines = sentences(20, seed=23)
        # A blank pair inside corpus A is dropped: B must begin after A's *kept* pairs.
        a_with_blank = [*self.a_lines[:5], "", *self.a_lines[5:]]
        write_split(self.a, a_with_blank, a_with_blank)
        write_split(self.b, self.b_lines, self.b_lines)
        write_split(self.valid, self.valid_lines, self.valid_lines)

    @property
    def a(self) -> Path:
        return self.root / "a"

    @property
    def b(self) -> Path:
        return self.root / "b"

    @property
    def valid(self) -> Path:
        return self.root / "valid"


@pytest.fixture(scope="module")
def raw(tmp_path_factory: pytest.TempPathFactory) -> Raw:
    root = tmp_path_factory.mktemp("build_on_raw")
    return Raw(root)


@pytest.fixture(scope="module")
def two(raw: Raw, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Corpora A then B, untagged."""
    out = tmp_path_factory.mktemp("two") / "data"
    assert _prepare(out, raw.a, raw.b, valid=raw.valid) == 0
    return out


@pytest.fixture(scope="module")
def tagged(raw: Raw, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Corpora A (untagged) then B (tagged <BT>), with a vocabulary learned on both."""
    out = tmp_path_factory.mktemp("tagged") / "data"
    assert _prepare(out, raw.a, raw.b, valid=raw.valid, extra=("--train-tag", "", "--train-tag", TAG)) == 0
    return out


@pytest.fixture(scope="module")
def fine(trained: TrainedRun, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """New copy-task sentences prepared with the trained checkpoint's vocabulary."""
    root = tmp_path_factory.mktemp("fine")
    lines, valid = sentences(300, seed=11), sentences(20, seed=12)
    write_split(root / "train", lines, lines)
    write_split(root / "valid", valid, valid)
    assert (
        _prepare(
            root / "data", root / "train", valid=root / "valid", extra=("--spm-from", trained.checkpoint)
        )
        == 0
    )
    return root / "data"


# --- 1. --spm-from -----------------------------------------------------------------------------


@pytest.mark.parametrize("source", ["data dir", "checkpoint"])
def test_spm_from_reuses_the_vocabulary_without_learning_one(
    source: str,
    corpus: Corpus,
    trained: TrainedRun,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(vocabulary, "learn", _no_learning)
    given = corpus.data if source == "data dir" else trained.checkpoint
    out = tmp_path / "data"
    # Other vocabulary options are ignored: the vocabulary is given.
    extra = ("--spm-from", given, "--vocab-size", 64)
    assert _prepare(out, corpus.raw / "train", valid=corpus.raw / "valid", extra=extra) == 0
    old, new = corpus_io.load_meta(corpus.data), corpus_io.load_meta(out)
    assert (out / "spm.model").read_bytes() == (corpus.data / "spm.model").read_bytes()
    if source == "checkpoint":
        ckpt = checkpoint.load(trained.checkpoint)
        assert (out / "spm.model").read_bytes() == ckpt.spm["src"] == ckpt.spm["tgt"]
    assert new.spm_sha256 == old.spm_sha256
    assert new.joint and new.vocab_size == old.vocab_size == {"src": 100, "tgt": 100}
    # The same text under the same vocabulary: the very same ids.
    for name in ("train.src.bin", "train.tgt.idx", "valid.tgt.bin"):
        assert (out / name).read_bytes() == (corpus.data / name).read_bytes(), name


def test_spm_from_a_joint_corpus_of_the_opposite_direction(
    corpus: Corpus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(vocabulary, "learn", _no_learning)
    out = tmp_path / "reverse"
    args = ["-q", "prepare", "--train", corpus.raw / "train", "--valid", corpus.raw / "valid"]
    args += ["--src", "tgt", "--tgt", "src", "--out", out, "--spm-from", corpus.data]
    assert nmt(*args) == 0
    meta = corpus_io.load_meta(out)
    assert (meta.src, meta.tgt, meta.joint) == ("tgt", "src", True)
    assert meta.spm_sha256 == corpus_io.load_meta(corpus.data).spm_sha256
    assert (out / "spm.model").read_bytes() == (corpus.data / "spm.model").read_bytes()
    # The source side (files *.tgt) of a copy corpus is the original's source, id for id.
    assert (out / "train.tgt.bin").read_bytes() == (corpus.data / "train.src.bin").read_bytes()


def _cased(root: Path) -> tuple[Path, list[str], list[str]]:
    """A corpus prepared with separate vocabularies: lower-case sources, upper-case targets."""
    lower = sentences(300, seed=31)
    upper = [line.upper() for line in lower]
    write_split(root / "train", lower, upper)
    write_split(root / "valid", lower[:20], upper[:20])
    forward = root / "forward"
    assert _prepare(forward, root / "train", valid=root / "valid", extra=("--no-joint",)) == 0
    assert corpus_io.load_meta(forward).joint is False
    return forward, lower, upper


def _prepare_backward(root: Path, spm_from: Path) -> int:
    args = ["-q", "prepare", "--train", root / "train", "--valid", root / "valid"]
    return nmt(*args, "--src", "tgt", "--tgt", "src", "--out", root / "backward", "--spm-from", spm_from)


def test_spm_from_a_separate_vocabulary_corpus_of_the_opposite_direction_swaps_the_models(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    forward, lower, upper = _cased(tmp_path)
    monkeypatch.setattr(vocabulary, "learn", _no_learning)
    assert _prepare_backward(tmp_path, forward) == 0
    backward = tmp_path / "backward"
    meta = corpus_io.load_meta(backward)
    assert meta.joint is False and meta.spm == {"src": "spm.tgt.model", "tgt": "spm.src.model"}
    # Each language keeps its own model: the upper-case one now encodes the source side.
    assert (backward / "spm.tgt.model").read_bytes() == (forward / "spm.tgt.model").read_bytes()
    assert (backward / "spm.src.model").read_bytes() == (forward / "spm.src.model").read_bytes()
    assert _decoded(backward, "train", "src") == upper
    assert _decoded(backward, "train", "tgt") == lower
    assert 1 not in corpus_io.load_split(backward, "train").src.tokens  # no <unk>


@pytest.mark.parametrize("recorded", [("src", "tgt"), None, ("en", "fr")], ids=["recorded", "old", "others"])
def test_spm_from_a_separate_vocabulary_checkpoint_goes_by_its_languages(
    recorded: tuple[str, str] | None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    forward, lower, upper = _cased(tmp_path)
    models = spm.read_models(forward, corpus_io.load_meta(forward))
    ckpt = tmp_path / "forward.pt"
    config = recipe.to_dict(RunConfig())
    given = checkpoint.Checkpoint("average", config, {}, {"src": models[0], "tgt": models[1]}, recorded)
    checkpoint.save(given, ckpt)
    monkeypatch.setattr(vocabulary, "learn", _no_learning)
    capsys.readouterr()
    code = _prepare_backward(tmp_path, ckpt)
    backward = tmp_path / "backward"
    if recorded == ("en", "fr"):
        assert code == 2
        line = one_line_error(capsys)
        assert "--spm-from" in line and "en and fr" in line and "not tgt and src" in line
        assert not backward.exists()
        return
    assert code == 0
    source_model = (backward / "spm.tgt.model").read_bytes()  # files are named by language
    if recorded is None:  # no languages to go by: taken as it is, its source model for --src
        assert source_model == models[0]
        assert 1 in corpus_io.load_split(backward, "train").src.tokens  # upper case under the lower model
    else:
        assert source_model == models[1]
        assert _decoded(backward, "train", "src") == upper and _decoded(backward, "train", "tgt") == lower


def test_spm_from_a_missing_path_fails_in_one_line(
    corpus: Corpus, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "data"
    missing = tmp_path / "nowhere.pt"
    capsys.readouterr()
    code = _prepare(out, corpus.raw / "train", valid=corpus.raw / "valid", extra=("--spm-from", missing))
    assert code == 2
    line = one_line_error(capsys)
    assert "--spm-from" in line and str(missing) in line and "not found" in line
    assert not out.exists()


def test_spm_from_a_run_directory_or_a_bare_sentencepiece_model_says_what_to_give(
    corpus: Corpus, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run directory was "not a prepared corpus; run `nmt prepare` first", and a corpus's
    spm.model "checkpoint ...: not an nmt checkpoint", without naming --spm-from."""
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    model = corpus.data / corpus_io.load_meta(corpus.data).spm["src"]
    lone = tmp_path / "lone.model"
    lone.write_bytes(model.read_bytes())
    expected = {
        run_dir: str(run_dir / "checkpoints" / "checkpoint_last.pt"),
        model: f"give {corpus.data} or a checkpoint",
        lone: "give a directory written by `nmt prepare` or a checkpoint",
    }
    for given, advice in expected.items():
        extra = ("--spm-from", given)
        line = _prepare_refused(
            capsys, tmp_path / "data", corpus.raw / "train", valid=corpus.raw / "valid", extra=extra
        )
        assert line.startswith(f"nmt: error: --spm-from {given}: ") and advice in line, line


# --- 2. several training corpora ----------------------------------------------------------------


def test_several_training_corpora_follow_one_another(two: Path, raw: Raw) -> None:
    meta = corpus_io.load_meta(two)
    assert [(c["src"], c["tgt"], c["pairs"], c["tag"]) for c in meta.corpora] == [
        (f"{raw.a}.src", f"{raw.a}.tgt", A_PAIRS, ""),  # the blank pair of A was dropped
        (f"{raw.b}.src", f"{raw.b}.tgt", B_PAIRS, ""),
    ]
    assert meta.corpus_sizes() == [A_PAIRS, B_PAIRS]
    assert (
        sum(meta.corpus_sizes()) == meta.splits["train"]["pairs"] == len(corpus_io.load_split(two, "train"))
    )
    assert meta.dropped["empty"] == 1
    decoded = _decoded(two, "train", "src")
    # Corpus B's pairs are the range after A's kept pairs, in order.
    assert decoded[A_PAIRS - 1] == raw.a_lines[-1] and decoded[A_PAIRS] == raw.b_lines[0]
    assert decoded[:A_PAIRS] == raw.a_lines
    assert decoded[A_PAIRS:] == raw.b_lines
    assert _decoded(two, "train", "tgt") == raw.a_lines + raw.b_lines


# --- 3. tags ------------------------------------------------------------------------------------


def _check_tagged(data: Path, tag_id: int, a_pairs: int, b_pairs: int) -> None:
    """Every source of corpus B, and none of A, holds the tag among its first two ids."""
    pairs = corpus_io.load_split(data, "train")
    assert len(pairs) == a_pairs + b_pairs
    for i in range(a_pairs):
        assert tag_id not in pairs.src[i].tolist(), i
    for i in range(a_pairs, a_pairs + b_pairs):
        assert tag_id in pairs.src[i][:2].tolist(), i
    for i in range(len(pairs)):
        assert tag_id not in pairs.tgt[i].tolist(), i  # tags precede source sentences only


def test_a_tagged_corpus_learns_the_tag_as_one_piece_and_tags_every_source(tagged: Path, raw: Raw) -> None:
    meta = corpus_io.load_meta(tagged)
    assert [(c["pairs"], c["tag"]) for c in meta.corpora] == [(A_PAIRS, ""), (B_PAIRS, TAG)]
    processor = _processor(tagged)
    tag_id = processor.piece_to_id(TAG)
    assert tag_id != processor.unk_id()
    assert TAG in processor.encode(TAG, out_type=str)
    assert tag_id in processor.encode(f"{TAG} apple")[:2]
    _check_tagged(tagged, tag_id, A_PAIRS, B_PAIRS)
    decoded = _decoded(tagged, "train", "src")
    assert decoded[:A_PAIRS] == raw.a_lines
    assert decoded[A_PAIRS:] == [f"{TAG} {line}" for line in raw.b_lines]
    assert _decoded(tagged, "train", "tgt") == raw.a_lines + raw.b_lines


def test_tags_reach_the_encoder(tagged: Path) -> None:
    tag_id = _processor(tagged).piece_to_id(TAG)
    pairs = corpus_io.load_split(tagged, "train")
    rows = [0, 1, A_PAIRS, A_PAIRS + 1, A_PAIRS + B_PAIRS - 1]
    batch = collate([pairs.src[i] for i in rows], [pairs.tgt[i] for i in rows])
    src = batch["src"]
    assert src.shape[0] == len(rows)
    assert not (src[:2] == tag_id).any()
    assert (src[2:, :2] == tag_id).any(dim=1).all()
    assert not (batch["tgt_in"] == tag_id).any() and not (batch["tgt_out"] == tag_id).any()
    # And the rows handed to training are those: make_batches over every pair keeps them all.
    lengths = pairs.src.lengths(), pairs.tgt.lengths()
    batches = make_batches(*lengths, max_tokens=512, seed=1, epoch=1)
    assert sorted(np.concatenate(batches).tolist()) == list(range(len(pairs)))


def test_train_tag_count_must_match_train(
    raw: Raw, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line = _prepare_refused(
        capsys, tmp_path / "data", raw.a, raw.b, valid=raw.valid, extra=("--train-tag", TAG)
    )
    assert "--train-tag" in line and "1 times for 2 --train" in line


def test_spm_from_a_vocabulary_without_the_tag_is_refused(
    raw: Raw, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Byte fallback: "<BT>" is spelled out in bytes, never <unk>.
    plain = tmp_path / "plain"
    extra = ("--vocab-size", 300, "--byte-fallback")
    assert _prepare(plain, raw.a, valid=raw.valid, extra=extra) == 0
    assert TAG not in _processor(plain).encode(TAG, out_type=str)
    extra = ("--train-tag", "", "--train-tag", TAG, "--spm-from", plain)
    line = _prepare_refused(capsys, tmp_path / "data", raw.a, raw.b, valid=raw.valid, extra=extra)
    assert f"tag {TAG}" in line and f"--reserve {TAG}" in line


def test_spm_from_a_vocabulary_without_the_tag_is_refused_without_byte_fallback(
    corpus: Corpus, raw: Raw, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Accepted, TAG would become <unk> in every tagged source (no byte fallback).
    extra = ("--train-tag", "", "--train-tag", TAG, "--spm-from", corpus.data)
    line = _prepare_refused(capsys, tmp_path / "data", raw.a, raw.b, valid=raw.valid, extra=extra)
    assert f"--reserve {TAG}" in line


def test_spm_from_a_vocabulary_learned_with_reserve_takes_the_tag(
    raw: Raw, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reserved = tmp_path / "reserved"
    assert _prepare(reserved, raw.a, valid=raw.valid, extra=("--reserve", TAG)) == 0
    processor = _processor(reserved)
    tag_id = processor.piece_to_id(TAG)
    assert tag_id != processor.unk_id() and TAG in processor.encode(TAG, out_type=str)
    assert tag_id not in corpus_io.load_split(reserved, "train").src.tokens  # reserved, not used
    monkeypatch.setattr(vocabulary, "learn", _no_learning)
    out = tmp_path / "data"
    extra = ("--train-tag", "", "--train-tag", TAG, "--spm-from", reserved)
    assert _prepare(out, raw.a, raw.b, valid=raw.valid, extra=extra) == 0
    assert (out / "spm.model").read_bytes() == (reserved / "spm.model").read_bytes()
    _check_tagged(out, tag_id, A_PAIRS, B_PAIRS)


def test_reserve_with_separate_vocabularies_serves_a_tagged_corpus_of_the_other_direction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--reserve kept the tag in the source model only: --spm-from it for the other direction was
    refused, advising the --reserve it had been given."""
    lower = sentences(300, seed=31)
    write_split(tmp_path / "a", lower, [line.upper() for line in lower])
    write_split(tmp_path / "valid", lower[:20], [line.upper() for line in lower[:20]])
    forward = tmp_path / "forward"
    extra = ("--no-joint", "--reserve", TAG)
    assert _prepare(forward, tmp_path / "a", valid=tmp_path / "valid", extra=extra) == 0
    assert not corpus_io.load_meta(forward).joint
    monkeypatch.setattr(vocabulary, "learn", _no_learning)
    extra = ("--train-tag", "", "--train-tag", TAG, "--spm-from", forward, "--src", "tgt", "--tgt", "src")
    backward = tmp_path / "backward"
    assert _prepare(backward, tmp_path / "a", tmp_path / "a", valid=tmp_path / "valid", extra=extra) == 0
    assert corpus_io.load_meta(backward).spm["src"] == "spm.tgt.model"
    _check_tagged(backward, _processor(backward).piece_to_id(TAG), 300, 300)


def _untagged_and_tagged(tagged: Path, folder: Path, lines: list[str], *extra: object) -> dict[str, Path]:
    """The same lines prepared with the vocabulary of `tagged`, without a tag and with TAG."""
    write_split(folder / "lines", lines, lines)
    write_split(folder / "valid", lines[:5], lines[:5])
    made = {}
    for tag in ("", TAG):
        made[tag] = folder / f"data{tag}"
        options = ("--train-tag", tag, "--spm-from", tagged, *extra)
        assert _prepare(made[tag], folder / "lines", valid=folder / "valid", extra=options) == 0
    return made


def test_a_tag_does_not_decide_which_pairs_are_kept(tagged: Path, tmp_path: Path) -> None:
    short = sentences(50, seed=41, min_words=1, max_words=3)
    made = _untagged_and_tagged(tagged, tmp_path, short)
    kept = {tag: corpus_io.load_meta(out).splits["train"]["pairs"] for tag, out in made.items()}
    assert kept[""] == len(short)
    assert kept[TAG] == len(short), f"tagging dropped {len(short) - kept[TAG]} of {len(short)} pairs"


def test_the_length_limit_counts_the_tag_as_the_model_reads_it(tagged: Path, tmp_path: Path) -> None:
    # nmt train's advice for a sentence over the model's positions is `prepare --max-len N`: a tag
    # let through beyond N would keep it over.
    lines = sentences(200, seed=43, min_words=1, max_words=8)
    made = _untagged_and_tagged(tagged, tmp_path, lines, "--max-len", 6)
    longest = {tag: int(corpus_io.load_split(out, "train").src.lengths().max()) for tag, out in made.items()}
    assert longest[""] == 6  # sentences at the limit exist, and with their tag they pass it
    assert longest[TAG] <= 6


# --- 4. weighted sampling -----------------------------------------------------------------------


@pytest.mark.parametrize("seed", [1, 7])
def test_weighted_epoch_draws_the_corpora_in_the_ratio_of_their_weights(seed: int) -> None:
    sizes, weights = [300, 100], [1.0, 3.0]
    epochs = [weighted_epoch(sizes, weights, seed, epoch) for epoch in (1, 2)]
    for pairs in epochs:
        assert len(pairs) == sum(sizes)  # an epoch keeps the corpora's total size
        assert pairs.min() >= 0 and pairs.max() < sum(sizes)
        first, second = pairs[pairs < 300], pairs[pairs >= 300]
        assert abs(len(second) / len(first) - 3.0) <= 0.03
        # The small corpus is repeated: every one of its pairs at least twice.
        counts = np.bincount(second - 300, minlength=100)
        assert counts.min() >= 2 and counts.sum() == len(second)
        # The large corpus gives a part drawn without repeats.
        assert len(np.unique(first)) == len(first) == 100
    # Deterministic for a resumed run, different from one epoch to the next.
    assert np.array_equal(epochs[0], weighted_epoch(sizes, weights, seed, 1))
    assert set(epochs[0][epochs[0] < 300].tolist()) != set(epochs[1][epochs[1] < 300].tolist())


def test_weighted_epoch_partial_passes_and_batches_keep_the_repeats() -> None:
    sizes, weights = [300, 100], [1.0, 1.0]
    pairs = weighted_epoch(sizes, weights, 3, 1)
    counts = np.bincount(pairs, minlength=400)
    assert (counts[300:] == 2).all()  # 200 of the small corpus: two whole passes
    assert counts[:300].sum() == 200 and counts[:300].max() == 1  # 200 of 300, no repeats
    lengths = np.random.default_rng(0).integers(1, 10, size=400).astype(np.uint16)
    batches = make_batches(lengths, lengths.copy(), 64, 3, 1, pairs=pairs)
    assert np.array_equal(np.sort(np.concatenate(batches)), np.sort(pairs))


def test_training_draws_from_the_corpora_by_train_corpus_weights(
    two: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nmt_cli.training import loop

    calls: list[tuple[list[int], list[float]]] = []

    def spy(sizes: list[int], weights: list[float], seed: int, epoch: int) -> np.ndarray:
        calls.append((list(sizes), list(weights)))
        return weighted_epoch(sizes, weights, seed, epoch)

    monkeypatch.setattr(loop, "weighted_epoch", spy)
    run_dir = tmp_path / "run"
    args = train_args(
        two, run_dir, "train.corpus_weights=[1, 3]", "train.max_updates=2", "train.valid_every_updates=0"
    )
    with one_thread():
        assert nmt(*args) == 0
    assert calls and calls[0] == ([A_PAIRS, B_PAIRS], [1.0, 3.0])
    assert load_recipe(run_dir / "config.toml").train.corpus_weights == [1.0, 3.0]
    assert [r["update"] for r in _records(run_dir)] == [2]


@pytest.mark.parametrize(
    "weights, said",
    [("[1]", "has 1 weights but"), ("[1, -1]", "must not be negative"), ("[0, 0]", "must be positive")],
)
def test_bad_corpus_weights_fail_in_one_line(
    weights: str, said: str, two: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    capsys.readouterr()
    line = refused(capsys, *train_args(two, run_dir, f"train.corpus_weights={weights}", quiet=False))
    assert "train.corpus_weights" in line and said in line
    assert not run_dir.exists()


# --- 5. fine-tuning: train --init-from ----------------------------------------------------------

ONE_BATCH = [
    "model.dropout=0.0",
    "train.max_updates=1",
    "train.log_every_updates=1",
    "train.max_tokens=100000",  # the whole train split is one batch
    "train.valid_every_updates=0",
    "train.save_every_updates=0",
]


def _init_from(data: Path, run_dir: Path, ckpt: Path, *overrides: str, quiet: bool = True) -> list[str]:
    return [*train_args(data, run_dir, *overrides, quiet=quiet), "--init-from", str(ckpt)]


def test_init_from_starts_a_new_run_from_the_checkpoint_weights(
    fine: Path, trained: TrainedRun, tmp_path: Path
) -> None:
    run_dir = tmp_path / "tuned"
    with one_thread():
        assert nmt(*_init_from(fine, run_dir, trained.checkpoint, *ONE_BATCH)) == 0
    [record] = _records(run_dir)
    assert record["update"] == 1 and record["epoch"] == 1
    assert record["lr"] == pytest.approx(5e-3 / 100)  # a fresh schedule: warm-up step 1 of 100
    payload = checkpoint.load(run_dir / "checkpoints" / "checkpoint_last.pt")
    assert payload.update == 1
    assert payload.spm == checkpoint.load(trained.checkpoint).spm

    # The first update's loss is the checkpoint model's loss on the new data.
    cfg = load_recipe(run_dir / "config.toml")
    model = Transformer(cfg.model)
    model.load_state_dict(checkpoint.load(trained.checkpoint).model)
    model.eval()
    train_split = corpus_io.load_split(fine, "train")
    assert (
        len(make_batches(train_split.src.lengths(), train_split.tgt.lengths(), cfg.train.max_tokens, 1, 1))
        == 1
    )
    with one_thread():
        expected = valid_loss(model, train_split, cfg, torch.device("cpu"))["loss"]
    assert record["loss"] == pytest.approx(expected, rel=1e-4)

    # From random weights the same first update is far worse.
    scratch = tmp_path / "scratch"
    with one_thread():
        assert nmt(*train_args(fine, scratch, *ONE_BATCH)) == 0
    [first] = _records(scratch)
    assert first["loss"] > expected + 2.0, (first["loss"], expected)


def test_init_from_data_of_another_sentencepiece_model_is_refused(
    trained: TrainedRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = [line.upper() for line in sentences(300, seed=7)]
    write_split(tmp_path / "train", other, other)
    write_split(tmp_path / "valid", other[:20], other[:20])
    data = tmp_path / "other"
    assert _prepare(data, tmp_path / "train", valid=tmp_path / "valid") == 0
    assert corpus_io.load_meta(data).vocab_size == {"src": 100, "tgt": 100}  # only the pieces differ
    run_dir = tmp_path / "run"
    capsys.readouterr()
    line = refused(capsys, *_init_from(data, run_dir, trained.checkpoint, *ONE_BATCH, quiet=False))
    assert "--init-from" in line and "another sentencepiece model" in line and "--spm-from" in line
    assert not run_dir.exists()


def test_a_run_refuses_to_resume_on_data_of_the_other_direction(
    corpus: Corpus, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A joint vocabulary fits both directions: only the recorded languages tell them apart."""
    reverse = tmp_path / "reverse"
    args = ["-q", "prepare", "--train", corpus.raw / "train", "--valid", corpus.raw / "valid"]
    assert nmt(*args, "--src", "tgt", "--tgt", "src", "--out", reverse, "--spm-from", corpus.data) == 0
    run_dir = tmp_path / "run"
    assert nmt(*train_args(corpus.data, run_dir, *ONE_BATCH, "train.save_every_updates=1")) == 0
    last = run_dir / "checkpoints" / "checkpoint_last.pt"
    before = last.read_bytes()
    capsys.readouterr()
    line = refused(capsys, *train_args(reverse, run_dir, *ONE_BATCH, "train.max_updates=2", quiet=False))
    assert "cannot resume" in line and "translates src-tgt" in line and "is tgt-src" in line
    assert last.read_bytes() == before


def test_init_from_a_separate_vocabulary_checkpoint_of_the_other_direction_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    forward, _, _ = _cased(tmp_path)
    assert nmt(*train_args(forward, tmp_path / "run", *ONE_BATCH, "train.save_every_updates=1")) == 0
    ckpt = tmp_path / "run" / "checkpoints" / "checkpoint_last.pt"
    assert _prepare_backward(tmp_path, ckpt) == 0  # its models, swapped to fit
    capsys.readouterr()
    line = refused(
        capsys, *_init_from(tmp_path / "backward", tmp_path / "tuned", ckpt, *ONE_BATCH, quiet=False)
    )
    assert "--init-from" in line and "translates src-tgt" in line and "encoder cannot read tgt" in line
    assert not (tmp_path / "tuned").exists()


def test_init_from_with_another_architecture_is_refused(
    fine: Path, trained: TrainedRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    capsys.readouterr()
    args = _init_from(fine, run_dir, trained.checkpoint, *ONE_BATCH, "model.d_ff=128", quiet=False)
    line = refused(capsys, *args)
    assert "model.d_ff" in line and "--init-from" in line and "128" in line
    assert not run_dir.exists()


def test_init_from_may_change_dropout(fine: Path, trained: TrainedRun, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    with one_thread():
        assert nmt(*_init_from(fine, run_dir, trained.checkpoint, *ONE_BATCH, "model.dropout=0.2")) == 0
    cfg = load_recipe(run_dir / "config.toml")
    base = checkpoint.load(trained.checkpoint).run_config(trained.checkpoint)
    assert cfg.model.dropout == 0.2 and base.model.dropout == 0.0
    assert (cfg.model.d_model, cfg.model.d_ff, cfg.model.heads) == (
        base.model.d_model,
        base.model.d_ff,
        base.model.heads,
    )


@pytest.fixture(scope="module")
def averaged(trained: TrainedRun, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("average") / "average.pt"
    assert nmt("-q", "average", "--run", trained.run_dir, "--last", 2, "-o", path) == 0
    assert checkpoint.load(path).train_state is None
    return path


@pytest.mark.parametrize("which", ["average", "best"])
def test_keep_optimizer_needs_a_checkpoint_with_optimizer_state(
    which: str,
    averaged: Path,
    fine: Path,
    trained: TrainedRun,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    ckpt = averaged if which == "average" else trained.run_dir / "checkpoints" / "checkpoint_best.pt"
    assert ckpt.is_file() and checkpoint.load(ckpt).train_state is None
    run_dir = tmp_path / "run"
    capsys.readouterr()
    line = refused(capsys, *_init_from(fine, run_dir, ckpt, *ONE_BATCH, quiet=False), "--keep-optimizer")
    assert "--init-from" in line and "no optimizer state" in line and "--reset-optimizer" in line
    assert not run_dir.exists()
    # Without Adam's moments it starts all the same.
    with one_thread():
        assert nmt(*_init_from(fine, run_dir, ckpt, *ONE_BATCH), "--reset-optimizer") == 0
    assert checkpoint.load(run_dir / "checkpoints" / "checkpoint_last.pt").update == 1


def _adam_steps(path: Path) -> set[float]:
    state = checkpoint.load(path).train_state
    assert state is not None
    return {float(s["step"]) for s in state.optimizer["state"].values()}


def test_keep_optimizer_carries_adams_moments_and_reset_does_not(
    fine: Path, trained: TrainedRun, tmp_path: Path
) -> None:
    assert _adam_steps(trained.checkpoint) == {float(trained.updates)}
    for flag, steps in (("--keep-optimizer", trained.updates + 1), ("--reset-optimizer", 1)):
        run_dir = tmp_path / flag.strip("-")
        with one_thread():
            assert nmt(*_init_from(fine, run_dir, trained.checkpoint, *ONE_BATCH), flag) == 0
        assert _adam_steps(run_dir / "checkpoints" / "checkpoint_last.pt") == {float(steps)}, flag


def test_rerunning_an_init_from_command_resumes_the_run(
    fine: Path, trained: TrainedRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    settings = [s for s in ONE_BATCH if not s.startswith("train.max_updates")]
    with one_thread():
        assert nmt(*_init_from(fine, run_dir, trained.checkpoint, *settings, "train.max_updates=2")) == 0
    at_two = checkpoint.load(run_dir / "checkpoints" / "checkpoint_2.pt").model
    capsys.readouterr()
    with one_thread():
        args = _init_from(fine, run_dir, trained.checkpoint, *settings, "train.max_updates=4", quiet=False)
        assert nmt(*args) == 0
    assert "resuming" in capsys.readouterr().err
    assert (run_dir / "checkpoints" / "checkpoint_4.pt").is_file()
    assert [r["update"] for r in _records(run_dir)] == [1, 2, 3, 4]  # continued, not started over
    last = run_dir / "checkpoints" / "checkpoint_last.pt"
    assert checkpoint.load(last).update == 4 and _adam_steps(last) == {4.0}
    moved = checkpoint.load(last).model
    assert any(not torch.equal(moved[name], at_two[name]) for name in at_two)


def test_weighted_epoch_keeps_the_total_when_shares_are_not_whole() -> None:
    for sizes, weights in (([300, 100], [1.0, 2.0]), ([7, 5, 3], [1.0, 1.0, 1.0]), ([10, 1], [0.0, 1.0])):
        pairs = weighted_epoch(sizes, weights, 1, 1)
        assert len(pairs) == sum(sizes), (sizes, weights)
    only_second = weighted_epoch([10, 1], [0.0, 1.0], 1, 1)
    assert set(only_second.tolist()) == {10}  # a weight of 0 leaves a corpus out


def test_keep_optimizer_without_init_from_is_refused(
    two: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    capsys.readouterr()
    assert "--init-from" in refused(capsys, *train_args(two, run_dir, quiet=False), "--keep-optimizer")
    assert not run_dir.exists()


def test_reserve_with_spm_from_must_name_a_piece_of_that_vocabulary(
    raw: Raw, two: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    extra = ("--reserve", TAG, "--spm-from", two)  # `two` was learned without the tag
    assert f"--reserve {TAG}" in _prepare_refused(
        capsys, tmp_path / "data", raw.a, valid=raw.valid, extra=extra
    )


def test_init_from_data_with_its_own_vocabulary_says_to_use_spm_from(
    trained: TrainedRun, raw: Raw, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Another vocabulary size is the usual mistake: the advice is --spm-from, not a model key."""
    data = tmp_path / "own"
    assert _prepare(data, raw.a, valid=raw.valid, extra=("--vocab-size", 150)) == 0
    run_dir = tmp_path / "run"
    capsys.readouterr()
    line = refused(capsys, *_init_from(data, run_dir, trained.checkpoint, *ONE_BATCH, quiet=False))
    assert "another sentencepiece model" in line and "--spm-from" in line and "vocab_size" not in line
    assert not run_dir.exists()


@pytest.mark.parametrize("tag", ["<BT,x>", "<B\tT>"])
def test_a_tag_with_a_comma_or_whitespace_is_refused(
    tag: str, raw: Raw, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    extra = ("--train-tag", "", "--train-tag", tag)
    line = _prepare_refused(capsys, tmp_path / "data", raw.a, raw.b, valid=raw.valid, extra=extra)
    assert "without spaces or commas" in line


@pytest.mark.parametrize("tag", ["</s>", "<pad>", "<unk>", "<s>", "<0x41>", "\u2581"])
def test_a_tag_named_as_a_special_piece_is_refused(
    tag: str, raw: Raw, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """ "</s>" or "<pad>" became the id of the end of a sentence or of padding before every tagged
    source; "<unk>" and "<0x41>" failed inside sentencepiece with exit 1; "▁" named --spm-from None."""
    for extra in (("--train-tag", "", "--train-tag", tag), ("--reserve", tag)):
        line = _prepare_refused(capsys, tmp_path / "data", raw.a, raw.b, valid=raw.valid, extra=extra)
        assert "--train-tag / --reserve" in line and "e.g. <BT>" in line
