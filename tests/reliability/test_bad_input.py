"""Bad input for every command: each case gives one line on stderr ("nmt: error: ..."), exit 2 for
bad input and 1 for a runtime failure, no traceback, and nothing half-written; the cases that are
not errors (CRLF, BOM, invalid UTF-8 and NUL bytes for translate, a 100,000-character line) are
handled. Cases already tested elsewhere are not repeated here:

- prepare: missing file, directory, mismatched line counts, invalid UTF-8, NUL byte, empty and blank
  corpus, unwritable and read-only --out, CRLF + BOM, interruption (tests/cli/test_prepare.py)
- score: mismatched line counts, missing --ref, bad options (tests/cli/test_score.py)
- train: unknown key, wrong type and impossible value through --set, a changed model on resume
  (tests/cli/test_train.py); the same in recipe files, at load (tests/unit/test_recipes.py)
- translate: unwritable --output, missing model, CRLF, an over-long line (tests/cli/test_translate.py)
- average: checkpoints of different models or shapes (tests/cli/test_average.py)
- a damaged binarized corpus (tests/unit/test_corpus.py)
"""

from __future__ import annotations

import errno
import io
import random
import shutil
import zipfile
from pathlib import Path
from typing import Any

import pytest
import torch
from helpers import WORDS, Corpus, TrainedRun, nmt, prepare_args, train_args

from nmt_cli import checkpoint
from nmt_cli.data import corpus as corpus_io
from nmt_cli.data import corpus_writer

ENOSPC = OSError(errno.ENOSPC, "No space left on device")


def run(capsys: pytest.CaptureFixture[str], *args: object) -> tuple[int, str, str]:
    capsys.readouterr()
    code = nmt(*args)
    out, err = capsys.readouterr()
    return code, out, err


def one_line(err: str) -> str:
    """The single error line of stderr: no traceback, nothing else."""
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("nmt: error: "), err
    return lines[0]


def listing(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def long_line(chars: int = 100_000) -> str:
    """A single line of copy-task words, `chars` characters long."""
    words, size, i = [], 0, 0
    while size < chars:
        words.append(WORDS[i % len(WORDS)])
        size += len(words[-1]) + 1
        i += 1
    return " ".join(words)[:chars].rstrip()


def garbage(n: int, seed: int, newline: bool = True) -> bytes:
    """Random bytes; without newlines when `newline` is False (one long binary 'line')."""
    data = random.Random(seed).randbytes(n)
    return data if newline else data.replace(b"\n", b"\xff")


def expected_lines(data: bytes) -> int:
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


# --- prepare ----------------------------------------------------------------------------------------


def copy_raw(corpus: Corpus, root: Path) -> Path:
    raw = root / "raw"
    shutil.copytree(corpus.raw, raw)
    return raw


def test_prepare_binary_garbage_is_refused(corpus: Corpus, tmp_path: Path, capsys) -> None:
    raw = copy_raw(corpus, tmp_path)
    lines = (raw / "train.src").read_bytes().count(b"\n")
    rows = [garbage(80, seed=i, newline=False) for i in range(lines)]  # same line count as train.tgt
    (raw / "train.src").write_bytes(b"\n".join(rows) + b"\n")
    out = tmp_path / "out"
    code, _, err = run(capsys, *prepare_args(out, raw / "train", valid=raw / "valid"))
    assert code == 2
    line = one_line(err)
    assert "train.src:1:" in line and ("NUL byte" in line or "invalid UTF-8" in line)
    assert not out.exists()


def test_prepare_a_100k_character_line_is_dropped_not_fatal(corpus: Corpus, tmp_path: Path) -> None:
    raw = copy_raw(corpus, tmp_path)
    text = long_line()
    assert len(text) >= 99_990 and "\n" not in text
    for side in ("src", "tgt"):
        with (raw / f"train.{side}").open("a", encoding="utf-8") as stream:
            stream.write(text + "\n")
    out = tmp_path / "out"
    assert nmt(*prepare_args(out, raw / "train", valid=raw / "valid")) == 0
    meta = corpus_io.load_meta(out)
    assert meta.dropped["too_long"] == 1
    assert meta.splits["train"]["pairs"] == len(corpus_io.load_split(corpus.data, "train"))


def test_prepare_full_disk_while_binarizing(
    corpus: Corpus, tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ENOSPC in the middle of writing the binarized corpus: exit 1, one line, nothing left."""
    writes = []
    real_write = corpus_writer.SideWriter.write

    def write(self: corpus_writer.SideWriter, tokens, lengths) -> None:
        writes.append(1)
        if len(writes) > 1:
            raise ENOSPC
        real_write(self, tokens, lengths)

    monkeypatch.setattr(corpus_writer.SideWriter, "write", write)
    out = tmp_path / "new" / "out"
    code, _, err = run(capsys, *prepare_args(out, corpus.raw / "train", valid=corpus.raw / "valid"))
    assert code == 1
    line = one_line(err)
    assert "No space left on device" in line and str(out) in line
    assert not (tmp_path / "new").exists()


# --- score ------------------------------------------------------------------------------------------

REF = ["apple river stone", "green music", "paper tiger silver window"]


def score_files(root: Path, hyp: bytes, ref: bytes | None = None) -> tuple[Path, Path]:
    hyp_path, ref_path = root / "hyp.txt", root / "ref.txt"
    hyp_path.write_bytes(hyp)
    ref_path.write_bytes(ref if ref is not None else "".join(f"{x}\n" for x in REF).encode())
    return hyp_path, ref_path


@pytest.mark.parametrize(
    "case, hyp, ref, message",
    [
        ("empty files", b"", b"", "nothing to score"),
        ("invalid UTF-8", b"apple river stone\ngreen \xe4 music\npaper\n", None, "hyp.txt:2: invalid UTF-8"),
        ("NUL byte", b"apple\ngreen\x00music\npaper\n", None, "hyp.txt:2: NUL byte"),
        ("binary garbage", garbage(3000, seed=1), None, "hyp.txt:"),
        ("NUL in the reference", b"a\nb\nc\n", b"a\nb\x00\nc\n", "ref.txt:2: NUL byte"),
    ],
)
def test_score_bad_text(
    case: str, hyp: bytes, ref: bytes | None, message: str, tmp_path: Path, capsys
) -> None:
    hyp_path, ref_path = score_files(tmp_path, hyp, ref)
    code, out, err = run(capsys, "score", "--ref", ref_path, "--hyp", hyp_path)
    assert code == 2 and out == ""
    assert message in one_line(err)


@pytest.mark.parametrize("kind", ["missing", "directory"])
def test_score_hypotheses_not_a_file(kind: str, tmp_path: Path, capsys) -> None:
    _, ref_path = score_files(tmp_path, b"")
    hyp = tmp_path / "hyp.d"
    if kind == "directory":
        hyp.mkdir()
    code, out, err = run(capsys, "score", "--ref", ref_path, "--hyp", hyp)
    assert code == 2 and out == ""
    line = one_line(err)
    assert str(hyp) in line and ("no such file" in line if kind == "missing" else "is a directory" in line)


def test_score_crlf_bom_and_a_100k_character_line_are_handled(tmp_path: Path, capsys) -> None:
    lines = [*REF, long_line()]
    crlf = ("\ufeff" + "".join(f"{x}\r\n" for x in lines)).encode()
    hyp_path, ref_path = score_files(tmp_path, crlf, "".join(f"{x}\n" for x in lines).encode())
    code, out, err = run(capsys, "score", "--ref", ref_path, "--hyp", hyp_path)
    assert code == 0 and err == ""
    assert out.startswith("BLEU = 100.00 ")


# --- translate --------------------------------------------------------------------------------------


def translate_file(trained: TrainedRun, source: Path, target: Path, model: Path | None = None) -> list:
    return ["-q", "translate", "-m", model or trained.checkpoint, "-i", source, "-o", target, "--threads", 1]


@pytest.mark.parametrize("kind", ["missing", "directory"])
def test_translate_input_not_a_file(kind: str, trained: TrainedRun, tmp_path: Path, capsys) -> None:
    source = tmp_path / "in.txt"
    if kind == "directory":
        source.mkdir()
    target = tmp_path / "out.txt"
    code, _, err = run(capsys, *translate_file(trained, source, target))
    assert code == 2
    line = one_line(err)
    assert str(source) in line and ("no such file" in line if kind == "missing" else "is a directory" in line)
    assert not target.exists()


@pytest.mark.parametrize(
    "case, data",
    [
        ("empty file", b""),
        ("invalid UTF-8", b"apple river\nstone \xe4\xff cloud\n\xc3\ngreen\n"),
        ("NUL bytes", b"apple\x00river\n\x00\nstone cloud\x00\n"),
        ("CRLF and BOM", b"\xef\xbb\xbfapple river\r\n\r\nstone cloud\r\n"),
        ("a 100,000-character line", f"apple river\n{long_line()}\ngreen music\n".encode()),
        ("binary garbage", garbage(20_000, seed=3)),
    ],
)
def test_translate_handles_any_text(
    case: str, data: bytes, trained: TrainedRun, tmp_path: Path, capsys
) -> None:
    """Translation never refuses text: one output line per input line, in order."""
    source, target = tmp_path / "in.txt", tmp_path / "out.txt"
    source.write_bytes(data)
    code, _, err = run(capsys, *translate_file(trained, source, target))
    assert code == 0, err
    assert "Traceback" not in err
    text = target.read_text(encoding="utf-8")
    assert text.count("\n") == expected_lines(data)
    if case == "CRLF and BOM":
        assert text == "apple river\n\nstone cloud\n"
    if case == "a 100,000-character line":
        outputs = text.split("\n")
        assert outputs[0] == "apple river" and outputs[2] == "green music"
    assert listing(tmp_path) == ["in.txt", "out.txt"]


# --- checkpoints: translate, average and train (resume) ---------------------------------------------


def _overwrite_record(good: bytes, largest_tensor: bool) -> bytes:
    """The checkpoint with 64 bytes of one zip record overwritten: its pickled structure
    (data.pkl), or the data of its largest tensor."""
    with zipfile.ZipFile(io.BytesIO(good)) as archive:
        records = archive.infolist()
    if largest_tensor:
        info = max((i for i in records if "/data/" in i.filename), key=lambda i: i.file_size)
    else:
        info = next(i for i in records if i.filename.endswith("data.pkl"))
    header = info.header_offset  # the local header's extra field (alignment padding) is read from the file
    name_len = int.from_bytes(good[header + 26 : header + 28], "little")
    extra_len = int.from_bytes(good[header + 28 : header + 30], "little")
    start = header + 30 + name_len + extra_len + (info.file_size // 2 if largest_tensor else 2)
    damaged = bytearray(good)
    damaged[start : start + 64] = random.Random(5).randbytes(64)
    return bytes(damaged)


@pytest.fixture(scope="module")
def bad_checkpoints(trained: TrainedRun, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One file per way a checkpoint can be unusable."""
    root = tmp_path_factory.mktemp("bad_checkpoints")
    good = trained.checkpoint.read_bytes()
    payload = checkpoint.load(trained.checkpoint).to_dict()
    files = {
        "empty file": b"",
        "truncated": good[: len(good) // 2],
        "corrupted end": good[:-4096] + bytes(4096),
        "corrupted pickle": _overwrite_record(good, largest_tensor=False),
        "corrupted tensor": _overwrite_record(good, largest_tensor=True),
        "a text file": b"this is not a checkpoint\n",
        "binary garbage": garbage(4096, seed=4),
    }
    paths = {}
    for name, data in files.items():
        paths[name] = root / f"{name.replace(' ', '_')}.pt"
        paths[name].write_bytes(data)
    paths["a torch file that is not nmt's"] = root / "foreign.pt"
    torch.save({"weights": torch.zeros(3)}, paths["a torch file that is not nmt's"])
    paths["format version 99"] = root / "future.pt"
    torch.save({**payload, "format": 99}, paths["format version 99"])
    newer = {**payload, "config": {**payload["config"], "model": {**payload["config"]["model"], "moe": 8}}}
    paths["an unknown config key"] = root / "newer.pt"
    torch.save(newer, paths["an unknown config key"])
    paths["languages not a pair"] = root / "languages.pt"
    torch.save({**payload, "languages": "en-de"}, paths["languages not a pair"])
    paths["a directory"] = root / "dir.pt"
    paths["a directory"].mkdir()
    paths["missing"] = root / "missing.pt"
    paths["a name too long"] = root / ("x" * 300 + ".pt")
    paths["a loop of links"] = root / "loop.pt"
    paths["a loop of links"].symlink_to("loop.pt")
    return paths


CHECKPOINT_CASES = [
    "missing",
    "a name too long",
    "a loop of links",
    "a directory",
    "empty file",
    "truncated",
    "corrupted end",
    "corrupted pickle",
    "corrupted tensor",
    "a text file",
    "binary garbage",
    "a torch file that is not nmt's",
    "format version 99",
    "an unknown config key",
    "languages not a pair",
]
MESSAGES = {
    "a name too long": "cannot read it (File name too long)",
    "a loop of links": "cannot read it (Too many levels of symbolic links)",
    "corrupted tensor": "does not match its checksum",
    "format version 99": "format version 99",
    "an unknown config key": "model.moe",
    "languages not a pair": "languages",
}


@pytest.mark.parametrize("case", CHECKPOINT_CASES)
def test_translate_refuses_a_bad_checkpoint(
    case: str, bad_checkpoints: dict[str, Path], trained: TrainedRun, tmp_path: Path, capsys
) -> None:
    source, target = tmp_path / "in.txt", tmp_path / "out.txt"
    source.write_text("apple river\n", encoding="utf-8")
    model = bad_checkpoints[case]
    code, out, err = run(capsys, *translate_file(trained, source, target, model=model))
    assert code == 2 and out == ""
    line = one_line(err)
    assert str(model) in line and MESSAGES.get(case, "") in line
    assert listing(tmp_path) == ["in.txt"]


@pytest.mark.parametrize("case", [c for c in CHECKPOINT_CASES if c != "an unknown config key"])
def test_average_refuses_a_bad_checkpoint(
    case: str, bad_checkpoints: dict[str, Path], trained: TrainedRun, tmp_path: Path, capsys
) -> None:
    output = tmp_path / "avg.pt"
    model = bad_checkpoints[case]
    code, _, err = run(capsys, "-q", "average", trained.checkpoint, model, "-o", output)
    assert code == 2
    line = one_line(err)
    assert str(model) in line and MESSAGES.get(case, "") in line
    assert listing(tmp_path) == []


@pytest.mark.parametrize(
    "case",
    [
        c
        for c in CHECKPOINT_CASES
        if c not in ("missing", "a directory", "a name too long", "a loop of links")
    ],
)  # a run without checkpoint_last.pt starts afresh; the last two are names, not contents
def test_train_refuses_to_resume_from_a_bad_checkpoint(
    case: str, bad_checkpoints: dict[str, Path], corpus: Corpus, tmp_path: Path, capsys
) -> None:
    run_dir = tmp_path / "run"
    last = run_dir / "checkpoints" / "checkpoint_last.pt"
    last.parent.mkdir(parents=True)
    shutil.copyfile(bad_checkpoints[case], last)
    before = listing(run_dir)
    code, _, err = run(capsys, *train_args(corpus.data, run_dir, "train.max_updates=1"))
    assert code == 2
    line = one_line(err)
    assert str(last) in line and MESSAGES.get(case, "") in line
    assert listing(run_dir) == before


def test_average_output_not_writable(trained: TrainedRun, tmp_path: Path, capsys) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("", encoding="utf-8")
    for output in (not_a_dir / "avg.pt", tmp_path / "missing" / "avg.pt"):
        code, _, err = run(capsys, "-q", "average", trained.checkpoint, "-o", output)
        assert code == 2
        assert str(output) in one_line(err)
    assert listing(tmp_path) == ["file"]


def _full_disk_after(saves: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """torch.save succeeds `saves` times, then writes part of the file and fails with ENOSPC."""
    real_save = torch.save
    calls = []

    def save(obj: object, f: object, *args: object, **kwargs: object) -> None:
        calls.append(1)
        if len(calls) > saves:
            f.write(b"PK\x03\x04 half a checkpoint")  # type: ignore[attr-defined]
            raise ENOSPC
        real_save(obj, f, *args, **kwargs)

    monkeypatch.setattr(torch, "save", save)


class _FillingDisk:
    """A file that takes `room` bytes and then fails every write with ENOSPC, as a full disk does."""

    def __init__(self, stream: Any, room: int) -> None:
        self.stream, self.room = stream, room

    def write(self, data: bytes) -> int:
        if len(data) > self.room:
            raise OSError(errno.ENOSPC, "No space left on device")
        self.room -= len(data)
        return self.stream.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


@pytest.mark.parametrize("command", ["average", "shortlist", "import"])
def test_a_disk_filling_up_under_torchs_own_writer_is_one_line(
    command: str, trained: TrainedRun, corpus: Corpus, tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch's zip writer turns the failed write into a RuntimeError ("enforce fail at
    inline_container.cc"): still "No space left on device", exit 1, nothing left."""
    real_save = torch.save
    monkeypatch.setattr(torch, "save", lambda obj, f, *a, **k: real_save(obj, _FillingDisk(f, 4096), *a, **k))
    out = tmp_path / "out"
    out.mkdir()
    output = out / "model.pt"
    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "fairseq-multi30k-tiny" / "checkpoint.pt"
    args = {
        "average": ["average", trained.checkpoint, "-o", output],
        "shortlist": ["shortlist", "-m", trained.checkpoint, "--train", corpus.raw / "train", "-o", output],
        "import": ["import", fixture, "-o", output],
    }[command]
    code, _, err = run(capsys, "-q", *args)
    assert code == 1
    line = one_line(err)
    assert "No space left on device" in line and str(output) in line and "internal error" not in line
    assert listing(out) == []


def test_average_full_disk(trained: TrainedRun, tmp_path: Path, capsys, monkeypatch) -> None:
    _full_disk_after(0, monkeypatch)
    output = tmp_path / "avg.pt"
    code, _, err = run(capsys, "-q", "average", trained.checkpoint, "-o", output)
    assert code == 1
    line = one_line(err)
    assert "No space left on device" in line and str(output) in line
    assert listing(tmp_path) == []


def test_train_full_disk_while_writing_a_checkpoint(
    corpus: Corpus, tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ENOSPC while saving update 4: exit 1 in one line, the checkpoint of update 2 intact and last,
    no temporary file; once there is room again the run resumes from update 2."""
    run_dir = tmp_path / "run"
    args = train_args(
        corpus.data,
        run_dir,
        "train.max_updates=6",
        "train.save_every_updates=2",
        "train.valid_every_updates=0",
        "train.keep_last=10",
    )
    _full_disk_after(2, monkeypatch)  # a save writes the numbered checkpoint, then the last
    code, _, err = run(capsys, *args)
    assert code == 1
    line = one_line(err)
    assert "No space left on device" in line and "checkpoint_4.pt" in line
    ckpts = run_dir / "checkpoints"
    assert sorted(p.name for p in ckpts.iterdir() if p.suffix == ".pt") == [
        "checkpoint_2.pt",
        "checkpoint_last.pt",
    ]
    assert not [p for p in ckpts.iterdir() if p.name.startswith(".")]  # no temporary file
    assert checkpoint.load(ckpts / "checkpoint_last.pt").update == 2
    monkeypatch.undo()
    assert nmt(*args) == 0
    assert checkpoint.load(ckpts / "checkpoint_last.pt").update == 6


# --- train: data, recipe and run directory ----------------------------------------------------------


@pytest.mark.parametrize("kind", ["missing", "a file", "an empty directory", "garbage meta.json"])
def test_train_bad_data_directory(kind: str, tmp_path: Path, capsys) -> None:
    data = tmp_path / "data"
    if kind == "a file":
        data.write_text("x", encoding="utf-8")
    elif kind == "an empty directory":
        data.mkdir()
    elif kind == "garbage meta.json":
        data.mkdir()
        (data / "meta.json").write_bytes(garbage(500, seed=6))
    run_dir = tmp_path / "run"
    code, _, err = run(capsys, *train_args(data, run_dir, "train.max_updates=1"))
    assert code == 2
    line = one_line(err)
    assert str(data) in line and "nmt prepare" in line
    assert not run_dir.exists()


RECIPES = {
    "unknown key": ("[model]\nd_modle = 32\n", "model.d_modle"),
    "wrong type": ('[train]\nupdate_freq = "two"\n', "train.update_freq"),  # a key train_args does not --set
    "impossible value": ("[decode]\nbeam = 0\n", "decode.beam"),
    "unknown section": ("[optimizer]\nlr = 1\n", "[optimizer]"),
    "invalid TOML": ("[model\nd_model = 32\n", "not valid TOML"),
    "invalid UTF-8": (b'[model]\nnorm = "\xff"\n', "not valid TOML"),
    "binary garbage": (garbage(300, seed=8), "recipe"),
}


@pytest.mark.parametrize("case", [*RECIPES, "missing", "a directory"])
def test_train_bad_recipe_file(case: str, corpus: Corpus, tmp_path: Path, capsys) -> None:
    recipe = tmp_path / "recipe.toml"
    named = "recipe"
    if case == "a directory":
        recipe.mkdir()
    elif case != "missing":
        content, named = RECIPES[case]
        recipe.write_bytes(content if isinstance(content, bytes) else content.encode())
    run_dir = tmp_path / "run"
    args = train_args(corpus.data, run_dir, "train.max_updates=1")
    code, _, err = run(capsys, *args, "--recipe", recipe)
    assert code == 2
    line = one_line(err)
    assert str(recipe) in line and named in line
    assert not run_dir.exists()


def test_train_output_not_writable(corpus: Corpus, tmp_path: Path, capsys) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("", encoding="utf-8")
    for run_dir in (not_a_dir, not_a_dir / "run"):
        code, _, err = run(capsys, *train_args(corpus.data, run_dir, "train.max_updates=1"))
        assert code == 2
        assert str(run_dir) in one_line(err)
    assert listing(tmp_path) == ["file"]
