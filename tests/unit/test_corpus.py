"""The binarized corpus: writer, memory-mapped reader, meta.json, atomic publication, and
the round trip text -> sentencepiece ids -> .bin/.idx -> memmap -> text."""

from __future__ import annotations

import json
import mmap
import os
import random
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pytest

from nmt_cli.data import corpus, corpus_writer, spm
from nmt_cli.errors import InputError, Terminated
from nmt_cli.special_ids import BOS_ID, EOS_ID, PAD_ID, UNK_ID

WORDS = (
    "der die das Hund läuft über Straße Mädchen groß klein Haus Katze schläft rot blau Brücke "
    "Привет мир кошка собака дом 你好 世界 猫 狗 مرحبا بالعالم Γειά σου κόσμε 🙂 🐕 naïve café"
).split()
TRICKY = [
    "Ein Hund 🐕 läuft über die Straße.",
    "Привет, мир! Как дела?",
    "你好，世界。猫在睡觉。",
    "مرحبا بالعالم",
    "Γειά σου κόσμε",
    "😀🎉👍🏽 emoji-only ✨",
    "naïve café — «Zitat» …",
    "ℌ𝔢𝔩𝔩𝔬 ǅ",
    "",
]


def sentences(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 9))) for _ in range(n)]


def learn_spm(lines: Iterable[str], vocab_size: int, what: str, byte_fallback: bool = False) -> bytes:
    """spm.train_spm's BPE model of `lines`: every character covered, text unnormalised, one thread."""
    return spm.train_spm(
        lines,
        vocab_size=vocab_size,
        character_coverage=1.0,
        byte_fallback=byte_fallback,
        normalization="identity",
        threads=1,
        what=what,
    )


def write_side(directory: Path, split: str, lang: str, arrays: list[list[int]], dtype: str) -> None:
    writer = corpus_writer.SideWriter(directory, split, lang, dtype)
    for start in range(0, len(arrays), 3):  # several chunks, as prepare writes them
        block = arrays[start : start + 3]
        flat = np.array([i for ids in block for i in ids], np.int32)
        writer.write(flat, np.array([len(ids) for ids in block], np.int64))
    writer.close()


def fake_meta(pairs: int, dtype: str = "uint16", **fields: object) -> dict:
    """A complete meta.json for a corpus of one train split; `fields` replace entries."""
    return {
        "format": 1,
        "src": "en",
        "tgt": "de",
        "joint": True,
        "dtype": dtype,
        "vocab_size": {"src": 400, "tgt": 400},
        "spm": {"src": "spm.model", "tgt": "spm.model"},
        "spm_sha256": {"src": "", "tgt": ""},
        "special_ids": {"pad": 0, "unk": 1, "bos": 2, "eos": 3},
        "splits": {"train": {"pairs": pairs}},
        "dropped": {},
        "flagged": {},
        "options": {},
        "inputs": {},
        "files": {},
        "nmt_version": "0.1.0",
        **fields,
    }


def test_writer_and_memmap_reader(tmp_path: Path) -> None:
    src = [[5, 6, 7], [], [8], [9, 10, 11, 12], [300]]
    tgt = [[4], [65535], [], [6, 6], [7, 8, 9]]
    write_side(tmp_path, "train", "en", src, "uint16")
    write_side(tmp_path, "train", "de", tgt, "uint16")
    vocab = {"src": 65536, "tgt": 65536}  # the largest uint16 id, 65535, is a piece
    (tmp_path / "meta.json").write_text(json.dumps(fake_meta(5, vocab_size=vocab)))
    split = corpus.load_split(tmp_path, "train")
    assert len(split) == len(split.src) == len(split.tgt) == 5
    for mapped in (split.src.tokens, split.src.offsets):  # views of the files, not copies
        assert isinstance(mapped.base, memoryview) and isinstance(mapped.base.obj, mmap.mmap)
    assert split.src.offsets[0] == 0 and split.src.offsets.dtype == np.int64
    assert split.src.lengths().tolist() == [3, 0, 1, 4, 1] and split.src.lengths().dtype == np.uint16
    assert [split.src[i].tolist() for i in range(5)] == src
    assert [split.tgt[i].tolist() for i in range(5)] == tgt
    assert split.src[-1].tolist() == src[-1]  # read from the file, as training does
    with pytest.raises(IndexError):
        split.src[5]


def test_empty_split_loads(tmp_path: Path) -> None:
    for lang in ("en", "de"):
        write_side(tmp_path, "train", lang, [[], []], "int32")
    (tmp_path / "meta.json").write_text(json.dumps(fake_meta(2, "int32")))
    split = corpus.load_split(tmp_path, "train")
    assert split.src.lengths().tolist() == [0, 0] and split.tgt[1].size == 0


def test_lengths_are_read_in_chunks_and_capped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sentences = [[5] * n for n in (3, 0, 7, 1, 2, 9, 4)] + [[6] * 70_000]
    write_side(tmp_path, "train", "en", sentences, "uint16")
    write_side(tmp_path, "train", "de", sentences, "uint16")
    (tmp_path / "meta.json").write_text(json.dumps(fake_meta(len(sentences))))
    monkeypatch.setattr(corpus, "OFFSETS_CHUNK", 3)  # chunk edges inside the split
    lengths = corpus.load_split(tmp_path, "train").src.lengths()
    assert lengths.tolist() == [3, 0, 7, 1, 2, 9, 4, corpus.MAX_LENGTH]


def test_token_dtype() -> None:
    assert corpus_writer.token_dtype(32000) == "uint16"
    assert corpus_writer.token_dtype(65536) == "uint16"
    assert corpus_writer.token_dtype(65537) == "int32"


def test_load_meta_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such directory"):
        corpus.load_meta(tmp_path / "missing")
    with pytest.raises(InputError, match=r"not a prepared corpus \(no meta.json\); run `nmt prepare` first"):
        corpus.load_meta(tmp_path)
    (tmp_path / "meta.json").write_text('{"format": 99}')
    with pytest.raises(InputError, match="format 99"):
        corpus.load_meta(tmp_path)
    (tmp_path / "meta.json").write_text("{cut sh")
    with pytest.raises(InputError, match="unreadable"):
        corpus.load_meta(tmp_path)


def test_damaged_corpus_is_an_input_error(tmp_path: Path) -> None:
    for lang in ("en", "de"):
        write_side(tmp_path, "train", lang, [[5, 6], [7]], "uint16")
    (tmp_path / "meta.json").write_text(json.dumps(fake_meta(2)))
    with (tmp_path / "train.de.bin").open("ab") as f:
        f.write(b"\0\0")
    with pytest.raises(InputError, match="offsets do not match"):
        corpus.load_split(tmp_path, "train")
    with pytest.raises(InputError, match="no 'test' split"):
        corpus.load_split(tmp_path, "test")


def test_publish_moves_files_then_writes_meta_and_drops_stale_ones(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "old.bin").write_bytes(b"old")
    (out / "keep.txt").write_text("a user's file")
    (out / "meta.json").write_text(json.dumps({"format": 1, "files": {"old.bin": 3, "../x": 1}}))
    stale = out / f"{corpus_writer.STAGING_PREFIX}999999999"  # a dead run's leftovers
    stale.mkdir()
    staging = corpus_writer.make_staging(out)
    assert not stale.exists() and staging.name == f"{corpus_writer.STAGING_PREFIX}{os.getpid()}"
    (staging / "train.en.bin").write_bytes(b"new")
    corpus_writer.publish(staging, out, corpus.CorpusMeta(**fake_meta(0, files={"train.en.bin": 3})))
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt", "meta.json", "train.en.bin"]
    assert json.loads((out / "meta.json").read_text())["files"] == {"train.en.bin": 3}


def test_round_trip_non_latin_and_emoji(tmp_path: Path) -> None:
    """encode -> binarize -> load -> decode gives the original text, also for scripts and
    emoji the model never saw (byte fallback)."""
    model = learn_spm(iter(sentences(300)), 400, "test corpus", byte_fallback=True)
    processor = spm.load_processor(model)
    assert [processor.pad_id(), processor.unk_id(), processor.bos_id(), processor.eos_id()] == [
        PAD_ID,
        UNK_ID,
        BOS_ID,
        EOS_ID,
    ]
    lines = TRICKY + sentences(20, seed=1)
    flat, lengths = spm.encode_lines(processor, lines)
    assert UNK_ID not in flat.tolist() and BOS_ID not in flat.tolist() and EOS_ID not in flat.tolist()
    writer = corpus_writer.SideWriter(
        tmp_path, "valid", "de", corpus_writer.token_dtype(processor.get_piece_size())
    )
    writer.write(flat, lengths)
    writer.close()
    array = corpus.load_array(tmp_path, "valid", "de", "uint16")
    assert [processor.decode(array[i].tolist()) for i in range(len(array))] == lines


def test_vocab_too_large_names_the_largest_that_works() -> None:
    with pytest.raises(
        InputError,
        match=r"--vocab-size 5000 is larger than tiny can support; the largest "
        r"that works is (\d+)",
    ) as info:
        learn_spm(iter(["a b c", "a b d"] * 5), 5000, "tiny")
    largest = int(info.value.args[0].rsplit(" ", 1)[1])
    model = learn_spm(iter(["a b c", "a b d"] * 5), largest, "tiny")
    assert spm.load_processor(model).get_piece_size() == largest


def test_errors_while_sampling_surface_unchanged() -> None:
    def bad():  # noqa: ANN202
        yield "a b c"
        raise InputError("x.en:2: invalid UTF-8")

    with pytest.raises(InputError, match="x.en:2: invalid UTF-8"):
        learn_spm(bad(), 50, "x")


def test_read_models_checks_checksums(tmp_path: Path) -> None:
    model = learn_spm(iter(sentences(100)), 100, "t")
    (tmp_path / "spm.model").write_bytes(model)
    meta = corpus.CorpusMeta(**fake_meta(0, spm_sha256={"src": spm.sha256(model), "tgt": spm.sha256(model)}))
    assert spm.read_models(tmp_path, meta) == (model, model)
    (tmp_path / "spm.model").write_bytes(model + b"x")
    with pytest.raises(InputError, match="checksum differs"):
        spm.read_models(tmp_path, meta)


def test_a_sentence_past_2_to_the_28_pairs_is_read_from_its_own_offset(tmp_path: Path) -> None:
    # Batches index sentences with int32; 8 * i of a numpy int32 wraps around from i = 2**28 on
    # (WMT with back-translation gets there). Sparse files: only the offsets read are written.
    i = 2**28 + 5
    tokens_path, idx_path = tmp_path / "train.src.bin", tmp_path / "train.src.idx"
    tokens_path.write_bytes(np.array([7, 8, 9, 10, 11], dtype=np.int32).tobytes())
    with idx_path.open("wb") as stream:
        stream.truncate(8 * (i + 2))
        stream.seek(8 * i)
        stream.write(np.array([2, 5], dtype=np.int64).tobytes())
    tokens = np.memmap(tokens_path, dtype=np.int32, mode="r")
    offsets = np.memmap(idx_path, dtype=np.int64, mode="r")
    side = corpus.TokenArray(tokens, offsets, (tokens_path, idx_path))
    assert side[np.int32(i)].tolist() == [9, 10, 11]
    assert side[i].tolist() == [9, 10, 11]


def test_a_token_id_beyond_the_vocabulary_is_an_input_error_where_it_is_read(tmp_path: Path) -> None:
    for lang in ("en", "de"):
        write_side(tmp_path, "train", lang, [[5, 6], [7, 400], [8]], "uint16")  # the vocabulary is 400
    (tmp_path / "meta.json").write_text(json.dumps(fake_meta(3)))
    pairs = corpus.load_split(tmp_path, "train")
    assert pairs.src[0].tolist() == [5, 6] and pairs.tgt[2].tolist() == [8]
    with pytest.raises(InputError, match="sentence 2 has id 400, beyond the vocabulary of 400"):
        pairs.src[1]


@pytest.mark.parametrize("dtype", ["float32", "bogus", "int64"])
def test_a_meta_json_with_another_token_type_is_an_input_error(tmp_path: Path, dtype: str) -> None:
    for lang in ("en", "de"):
        write_side(tmp_path, "train", lang, [[5, 6], [7]], "uint16")
    (tmp_path / "meta.json").write_text(json.dumps(fake_meta(2, dtype=dtype)))
    with pytest.raises(InputError, match="token dtype"):
        corpus.load_split(tmp_path, "train")


@pytest.mark.parametrize(
    ("name", "size"),
    [("train.de.idx", 2 * 8 + 3), ("train.de.idx", 7), ("train.en.bin", 3)],  # int64 offsets, uint16 ids
)
def test_a_file_cut_inside_a_value_is_an_input_error(tmp_path: Path, name: str, size: int) -> None:
    for lang in ("en", "de"):
        write_side(tmp_path, "train", lang, [[5, 6], [7], [8, 9]], "uint16")
    (tmp_path / "meta.json").write_text(json.dumps(fake_meta(3)))
    os.truncate(tmp_path / name, size)
    with pytest.raises(
        InputError, match=rf"{name}: {size} bytes, not a whole number .* run `nmt prepare` again"
    ):
        corpus.load_split(tmp_path, "train")


@pytest.mark.parametrize("stop", [KeyboardInterrupt, Terminated], ids=["SIGINT", "SIGTERM"])
def test_a_signal_while_sampling_surfaces_unchanged(stop: type[BaseException]) -> None:
    # A signal handler raises inside the iterator that sentencepiece's C++ loop reads from.
    def interrupted():  # noqa: ANN202
        yield from sentences(50)
        raise stop

    with pytest.raises(stop):
        learn_spm(interrupted(), 50, "x")
