"""`nmt prepare` end to end on tiny corpora: outputs, filtering, reuse, atomicity, and one
test per kind of bad input (exit 2, one line on stderr, nothing written)."""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from nmt_cli.cli.main import main
from nmt_cli.data import binarize, corpus, corpus_writer, spm, vocabulary
from nmt_cli.errors import InputError, Terminated

EN = "a dog cat man woman runs sleeps on the big small red blue street house bridge girl boy".split()
DE = (
    "ein Hund Katze Mann Frau läuft schläft auf der große kleine rote blaue Straße Haus Brücke Mädchen Junge"
).split()
VALID_EN = ["A dog runs.", "Привет, мир!", "你好，世界。", "😀🎉👍🏽 ✨", "", "naïve café — «quote» …"]
VALID_DE = ["Ein Hund läuft.", "Привет, мир!", "你好，世界。", "😀🎉👍🏽 ✨", "", "naïve Café — «Zitat» …"]
VOCAB = "400"  # byte fallback takes 256 pieces; the rest is learned in well under a second


def pairs(n: int, seed: int = 0) -> tuple[list[str], list[str]]:
    """Word-by-word 'translations', so length ratios stay near 1 and nothing is filtered."""
    rng = random.Random(seed)
    src, tgt = [], []
    for _ in range(n):
        idx = [rng.randrange(len(EN)) for _ in range(rng.randint(3, 10))]
        emoji = rng.choice(["", " 🙂", " 🐕"])
        src.append(" ".join(EN[i] for i in idx) + emoji)
        tgt.append(" ".join(DE[i] for i in idx) + emoji)
    return src, tgt


def write(prefix: Path, src: list[str], tgt: list[str], end: str = "\n") -> str:
    prefix.parent.mkdir(parents=True, exist_ok=True)
    Path(f"{prefix}.en").write_text("".join(line + end for line in src), encoding="utf-8")
    Path(f"{prefix}.de").write_text("".join(line + end for line in tgt), encoding="utf-8")
    return str(prefix)


@pytest.fixture
def data(tmp_path: Path) -> Path:
    write(tmp_path / "in" / "train", *pairs(300))
    write(tmp_path / "in" / "valid", VALID_EN, VALID_DE)
    write(tmp_path / "in" / "test", *pairs(20, seed=1))
    return tmp_path / "in"


def nmt(*args: object, quiet: bool = True) -> int:
    try:
        main([*(["-q"] if quiet else []), *map(str, args)])
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


def prepare(data: Path, out: Path, *extra: object, quiet: bool = True) -> int:
    return nmt(
        "prepare",
        "--train",
        data / "train",
        "--valid",
        data / "valid",
        "--src",
        "en",
        "--tgt",
        "de",
        "--out",
        out,
        "--vocab-size",
        VOCAB,
        *extra,
        quiet=quiet,
    )


def decode_split(out: Path, split: str) -> tuple[list[str], list[str]]:
    meta = corpus.load_meta(out)
    src_model, tgt_model = spm.read_models(out, meta)
    parallel = corpus.load_split(out, split)
    decode = [spm.load_processor(m).decode for m in (src_model, tgt_model)]
    return (
        [decode[0](parallel.src[i].tolist()) for i in range(len(parallel))],
        [decode[1](parallel.tgt[i].tolist()) for i in range(len(parallel))],
    )


def test_prepare_writes_the_contract_and_round_trips(data: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert prepare(data, out, "--test", data / "test") == 0
    meta = json.loads((out / "meta.json").read_text())
    assert meta["format"] == 1 and (meta["src"], meta["tgt"]) == ("en", "de") and meta["joint"] is True
    assert meta["dtype"] == "uint16" and meta["vocab_size"] == {"src": 400, "tgt": 400}
    assert meta["spm"] == {"src": "spm.model", "tgt": "spm.model"}
    assert meta["spm_sha256"]["src"] == spm.sha256((out / "spm.model").read_bytes())
    assert meta["splits"]["train"]["pairs"] == 300 and meta["splits"]["valid"]["pairs"] == len(VALID_EN)
    assert meta["dropped"] == {"empty": 0, "too_long": 0, "ratio": 0}
    assert meta["options"]["vocab_size"] == 400 and meta["options"]["max_len"] == 250
    for split in ("train", "valid", "test"):
        for lang in ("en", "de"):
            offsets = np.fromfile(out / f"{split}.{lang}.idx", np.int64)
            assert offsets[0] == 0 and len(offsets) == meta["splits"][split]["pairs"] + 1
            assert offsets[-1] == meta["splits"][split][f"{'src' if lang == 'en' else 'tgt'}_tokens"]
    assert decode_split(out, "train") == pairs(300)
    assert decode_split(out, "valid") == (VALID_EN, VALID_DE)  # empty pair kept, unseen scripts exact
    assert not [p for p in out.iterdir() if p.name.startswith(".")]


def test_rerun_reuses_and_option_change_redoes(data: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    assert prepare(data, out) == 0
    stamp = (out / "meta.json").stat().st_mtime_ns
    capsys.readouterr()
    assert prepare(data, out, quiet=False) == 0
    assert "reusing" in capsys.readouterr().err
    assert (out / "meta.json").stat().st_mtime_ns == stamp
    assert prepare(data, out, "--no-joint") == 0
    meta = corpus.load_meta(out)
    assert meta.joint is False and meta.spm == {"src": "spm.en.model", "tgt": "spm.de.model"}
    assert not (out / "spm.model").exists()  # the old joint model went with the old corpus
    assert decode_split(out, "valid") == (VALID_EN, VALID_DE)


def test_a_corpus_file_changed_in_place_is_made_again_not_reused(data: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    assert prepare(data, out) == 0
    bin_path = out / "train.en.bin"
    good = bin_path.read_bytes()
    with open(bin_path, "r+b") as damaged:  # the same size: only the bytes differ
        damaged.write(bytes(255 - b for b in good[:16]))
    later = (out / "meta.json").stat().st_mtime_ns + 1_000_000_000
    os.utime(bin_path, ns=(later, later))  # as a write after the run leaves it, on any clock
    capsys.readouterr()
    assert prepare(data, out, quiet=False) == 0
    assert "reusing" not in capsys.readouterr().err
    assert bin_path.read_bytes() == good


def test_workers_give_identical_files(data: Path, tmp_path: Path) -> None:
    assert prepare(data, tmp_path / "one") == 0
    assert prepare(data, tmp_path / "two", "--workers", "2") == 0
    for name in ("train.en.bin", "train.de.idx", "valid.de.bin", "spm.model"):
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes()


def test_filtering_counts_reasons_and_keeps_pairs_aligned(tmp_path: Path) -> None:
    src, tgt = pairs(200)
    src[3], tgt[3] = "", "ein Hund"
    src[7], tgt[7] = "a dog", "   "
    src[10], tgt[10] = "dog " * 40, "Hund " * 40
    src[20], tgt[20] = "a dog", "ein Hund läuft auf der großen roten Straße zum blauen Haus"
    prefix = write(tmp_path / "in" / "train", src, tgt)
    write(tmp_path / "in" / "valid", ["", "dog " * 40], ["x", "Hund " * 40])
    out = tmp_path / "out"
    assert prepare(tmp_path / "in", out, "--max-len", "30") == 0
    meta = corpus.load_meta(out)
    assert meta.dropped == {"empty": 2, "too_long": 1, "ratio": 1} and meta.splits["train"]["pairs"] == 196
    assert meta.splits["valid"]["pairs"] == 2 and meta.flagged["valid"]["too_long"] == 1
    kept = [i for i in range(200) if i not in (3, 7, 10, 20)]
    assert decode_split(out, "train") == ([src[i] for i in kept], [tgt[i] for i in kept])
    assert Path(prefix + ".en").exists()


def test_crlf_and_bom_are_handled(data: Path, tmp_path: Path) -> None:
    src, tgt = pairs(300)
    write(tmp_path / "crlf" / "train", ["\ufeff" + src[0], *src[1:]], tgt, end="\r\n")
    write(tmp_path / "crlf" / "valid", VALID_EN, VALID_DE, end="\r\n")
    assert prepare(tmp_path / "crlf", tmp_path / "a") == 0
    assert prepare(data, tmp_path / "b") == 0
    for name in ("train.en.bin", "train.de.bin", "valid.en.bin", "spm.model"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_spm_sample_caps_the_vocabulary_sample(data: Path, tmp_path: Path) -> None:
    assert prepare(data, tmp_path / "out", "--spm-sample", "200", "--vocab-size", "300") == 0
    assert corpus.load_meta(tmp_path / "out").options["spm_sample"] == 200


# --- bad input: exit 2, one line on stderr, nothing written ---------------------------------


def fails(capsys, data: Path, out: Path, *extra: object) -> str:
    capsys.readouterr()
    assert prepare(data, out, *extra) == 2
    err = capsys.readouterr().err
    assert err.startswith("nmt: error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    assert not out.exists(), sorted(p.name for p in out.rglob("*"))
    return err


def test_missing_file(capsys, data: Path, tmp_path: Path) -> None:
    (data / "valid.de").unlink()
    assert "valid.de: no such file" in fails(capsys, data, tmp_path / "out")


def test_a_file_given_for_a_prefix_says_which_prefix(capsys, data: Path, tmp_path: Path) -> None:
    """As Marian and OpenNMT take files: --valid in/valid.en said "in/valid.en.en: no such file"."""
    for option, name in (("--valid", "valid.en"), ("--test", "test.de")):
        err = fails(capsys, data, tmp_path / "out", option, data / name)
        prefix = data / name.split(".")[0]
        assert f"{option} {data / name}: give the prefix of the files, {prefix} " in err, err


def test_directory_given_as_a_file(capsys, data: Path, tmp_path: Path) -> None:
    (data / "valid.en").unlink()
    (data / "valid.en").mkdir()
    assert "valid.en: is a directory" in fails(capsys, data, tmp_path / "out")


def test_line_counts_differ(capsys, data: Path, tmp_path: Path) -> None:
    lines = (data / "train.de").read_text(encoding="utf-8").splitlines(keepends=True)
    (data / "train.de").write_text("".join(lines[:-1]), encoding="utf-8")
    err = fails(capsys, data, tmp_path / "out")
    assert "train.en has 300 lines" in err and "train.de has 299" in err


@pytest.mark.parametrize("where", ["train", "valid"])  # found while sampling / while encoding
def test_invalid_utf8_names_file_and_line(capsys, data: Path, tmp_path: Path, where: str) -> None:
    path = data / f"{where}.de"
    lines = path.read_bytes().split(b"\n")
    lines[2] = b"kaputt \xe4 hier"
    path.write_bytes(b"\n".join(lines))
    err = fails(capsys, data, tmp_path / "out")
    assert f"{where}.de:3: invalid UTF-8" in err and "--errors replace" in err
    assert prepare(data, tmp_path / "out", "--errors", "replace") == 0


def test_nul_byte(capsys, data: Path, tmp_path: Path) -> None:
    raw = (data / "train.en").read_bytes()
    (data / "train.en").write_bytes(raw.replace(b"\n", b"\x00\n", 5).replace(b"\x00\n", b"\n", 4))
    err = fails(capsys, data, tmp_path / "out")
    assert "train.en:5: NUL byte" in err and "--errors replace" in err
    # A stray NUL in a large corpus need not end the run: it becomes a space, as translate makes it.
    assert prepare(data, tmp_path / "out", "--errors", "replace") == 0
    # In a file's first line it is the sign of a UTF-16 or binary file, whatever --errors says.
    (data / "train.en").write_bytes(b"\x00" + raw)
    assert "train.en:1: NUL byte" in fails(capsys, data, tmp_path / "out2", "--errors", "replace")


def test_empty_corpus(capsys, data: Path, tmp_path: Path) -> None:
    write(data / "train", [], [])
    assert "train corpus is empty" in fails(capsys, data, tmp_path / "out")


def test_blank_corpus(capsys, data: Path, tmp_path: Path) -> None:
    write(data / "train", [""] * 5, [" "] * 5)
    assert "no non-empty lines" in fails(capsys, data, tmp_path / "out")


def test_every_pair_filtered(capsys, data: Path, tmp_path: Path) -> None:
    err = fails(capsys, data, tmp_path / "out", "--max-len", "1")
    assert "every training pair was filtered" in err and "too long: 300" in err


def test_vocab_too_large_says_the_largest_that_works(capsys, data: Path, tmp_path: Path) -> None:
    err = fails(capsys, data, tmp_path / "out", "--vocab-size", "20000")
    assert "--vocab-size 20000 is larger than" in err and "the largest that works is" in err
    largest = err.strip().rsplit(" ", 1)[1]
    assert prepare(data, tmp_path / "out", "--vocab-size", largest) == 0


def test_output_not_writable(capsys, data: Path, tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    assert "is not a directory" in fails(capsys, data, tmp_path / "file" / "out")


def test_output_dir_read_only(capsys, data: Path, tmp_path: Path, monkeypatch) -> None:
    read_only = tmp_path / "ro"
    read_only.mkdir(mode=0o500)
    if os.geteuid() == 0:  # root may write anywhere: pretend the permission bits hold
        real_access = os.access

        def access(path: object, mode: int) -> bool:
            return not (Path(str(path)) == read_only and mode & os.W_OK) and real_access(path, mode)

        monkeypatch.setattr(os, "access", access)
    assert "ro is not writable" in fails(capsys, data, read_only / "out")
    assert prepare(data, read_only) == 2
    assert "directory is not writable" in capsys.readouterr().err and not list(read_only.iterdir())


def test_failed_rerun_keeps_the_old_corpus(capsys, data: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert prepare(data, out) == 0
    before = sorted(p.name for p in out.iterdir())
    (data / "valid.en").write_bytes(b"\xff\n" * len(VALID_EN))
    assert prepare(data, out) == 2
    assert sorted(p.name for p in out.iterdir()) == before
    assert decode_split(out, "valid") == (VALID_EN, VALID_DE)


def test_interrupted_run_leaves_nothing_that_looks_like_data(data: Path, tmp_path: Path, monkeypatch) -> None:
    out = tmp_path / "out"
    out.mkdir()
    killed = out / f"{corpus_writer.STAGING_PREFIX}999999999"  # what a SIGKILLed run leaves
    killed.mkdir()
    (killed / "train.en.bin").write_bytes(b"partial")
    with pytest.raises(InputError, match="not a prepared corpus"):
        corpus.load_meta(out)

    def interrupt(self: corpus_writer.SideWriter) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(corpus_writer.SideWriter, "close", interrupt)
    assert prepare(data, out) == 130  # Typer turns Ctrl-C into exit 130
    assert list(out.iterdir()) == []  # the dead run's staging went too
    monkeypatch.undo()
    assert prepare(data, out) == 0 and len(corpus.load_split(out, "train")) == 300


def test_subprocess_exit_code_and_one_line(data: Path, tmp_path: Path) -> None:
    (data / "train.en").unlink()
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "nmt_cli",
            "prepare",
            "--train",
            str(data / "train"),
            "--valid",
            str(data / "valid"),
            "--src",
            "en",
            "--tgt",
            "de",
            "--out",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith("nmt: error: ") and result.stderr.count("\n") == 1
    assert "train.en: no such file" in result.stderr and not (tmp_path / "out").exists()


def test_a_vocabulary_size_sentencepiece_cannot_hold_is_one_line(capsys, data: Path, tmp_path: Path) -> None:
    line = fails(capsys, data, tmp_path / "out", "--vocab-size", 2**40)
    assert "--vocab-size 1099511627776: must be an integer from 8 to 1,000,000" in line


@pytest.mark.parametrize(
    "option, value, said",
    [
        ("--character-coverage", 0, "--character-coverage 0.0: must be a number above 0 and at most 1"),
        ("--max-ratio", 0.5, "--max-ratio 0.5: must be a number of at least 1"),
        ("--max-len", 0, "--max-len 0: must be an integer of at least 1"),
        ("--normalization", "nfd", '--normalization nfd: use "identity", "nmt_nfkc", "nfkc", "nmt_nfkc_cf"'),
    ],
)
def test_an_option_out_of_its_bounds_is_one_line_naming_them(
    capsys, data: Path, tmp_path: Path, option: str, value: object, said: str
) -> None:
    assert said in fails(capsys, data, tmp_path / "out", option, value)


@pytest.mark.parametrize(
    "files",
    [
        {"meta.json": '{"mine": 1}\n'},  # JSON, but not a corpus's meta.json
        {"spm.model": "my notes\n"},
        {"meta.json": "{cut sh", "notes.txt": "x"},
    ],
    ids=["foreign-meta", "foreign-spm-model", "unreadable-meta"],
)
def test_a_directory_of_other_files_is_refused_and_left_as_it_was(
    capsys, data: Path, tmp_path: Path, files: dict[str, str]
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    for name, content in files.items():
        (out / name).write_text(content)
    capsys.readouterr()
    assert prepare(data, out) == 2
    err = capsys.readouterr().err
    assert err.startswith("nmt: error: --out ") and err.count("\n") == 1
    assert "not a corpus written by `nmt prepare`; choose another directory or empty it" in err
    assert {p.name: p.read_text() for p in out.iterdir()} == files


def test_an_empty_directory_or_a_corpus_cut_short_while_published_is_written(
    data: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    assert prepare(data, out) == 0
    # What a run killed while it moved its files in leaves: no meta.json yet, the staging directory.
    (out / "meta.json").unlink()
    (out / f"{corpus_writer.STAGING_PREFIX}999999999").mkdir()
    assert prepare(data, out, "--no-joint") == 0
    assert corpus.load_meta(out).joint is False and len(corpus.load_split(out, "train")) == 300
    assert not [p.name for p in out.iterdir() if p.name.startswith(".")]
    # And what one whose last step failed leaves (its staging directory removed): the files alone.
    (out / "meta.json").unlink()
    assert prepare(data, out) == 0 and corpus.load_meta(out).joint is True
    # A directory that only a file system's or a desktop's bookkeeping is in counts as empty.
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    (fresh / ".DS_Store").write_bytes(b"\0")
    (fresh / "lost+found").mkdir()
    assert prepare(data, fresh) == 0


def test_a_killed_worker_fails_the_run_with_one_line_and_keeps_nothing(
    capsys, data: Path, tmp_path: Path, monkeypatch
) -> None:
    out = tmp_path / "out"
    monkeypatch.setattr(binarize, "CHUNK", 16)  # many tasks: some are in flight at the kill
    write = corpus_writer.SideWriter.write
    killed: list[object] = []  # the worker killed
    # Workers of an earlier test's pool (left to the collector) may still be alive: kill prepare's.
    others = set(multiprocessing.active_children())

    def write_after_killing_a_worker(
        self: corpus_writer.SideWriter, tokens: np.ndarray, lengths: np.ndarray
    ) -> None:
        if not killed:
            worker = next(c for c in multiprocessing.active_children() if c not in others)
            worker.kill()  # as the out-of-memory killer would
            worker.join(30)
            killed.append(worker)
        write(self, tokens, lengths)

    monkeypatch.setattr(corpus_writer.SideWriter, "write", write_after_killing_a_worker)
    capsys.readouterr()
    codes: list[int] = []
    run = threading.Thread(target=lambda: codes.append(prepare(data, out, "--workers", "2")), daemon=True)
    run.start()
    run.join(120)
    assert not run.is_alive(), "prepare hangs after a worker died"
    err = capsys.readouterr().err
    assert killed and codes == [1] and err.count("\n") == 1, err
    assert "nmt: error: an encoding worker process died" in err and "nothing was written" in err
    assert not out.exists()


@pytest.mark.parametrize(
    ("stop", "code", "said"),
    [
        (KeyboardInterrupt, 130, "nmt: error: interrupted"),
        (Terminated, 143, "nmt: error: terminated by SIGTERM"),
    ],
    ids=["SIGINT", "SIGTERM"],
)
def test_a_signal_while_the_vocabulary_is_learned_exits_as_interrupted(
    capsys, data: Path, tmp_path: Path, monkeypatch, stop: type[BaseException], code: int, said: str
) -> None:
    sample_lines = vocabulary.sample_lines

    def interrupted(*args: object, **kwargs: object) -> Iterator[str]:
        # A signal handler raises wherever Python runs: here, inside sentencepiece's reading loop.
        yield from list(sample_lines(*args, **kwargs))[:50]
        raise stop

    monkeypatch.setattr(vocabulary, "sample_lines", interrupted)
    capsys.readouterr()
    assert prepare(data, tmp_path / "out") == code
    err = capsys.readouterr().err
    assert err.startswith(said) and err.count("\n") == 1, err
    assert not (tmp_path / "out").exists()
