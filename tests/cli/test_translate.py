"""`nmt translate` with the tiny copy model: one output line per input line in order (files and
stdin, empty and blank lines included), streaming through a pipe, truncation of over-long
lines, n-best lists, beam 1 = greedy, ensembles, and one-line errors for bad paths."""

from __future__ import annotations

import contextlib
import errno
import io
import os
import queue
import random
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch
from helpers import (
    WORDS,
    Corpus,
    TrainedRun,
    nmt,
    nmt_command,
    one_thread,
    prepare_args,
    sentences,
    subprocess_env,
    train_args,
)

from nmt_cli import checkpoint
from nmt_cli.data import spm
from nmt_cli.decoding.translator import Translator
from nmt_cli.model import Transformer
from nmt_cli.special_ids import BOS_ID, EOS_ID, PAD_ID

BLANK = ["", "   ", "\t", " \t "]


def mixed_lines(seed: int = 3) -> list[str]:
    """Copy-task sentences of every length, shuffled, with empty and whitespace-only lines between."""
    lines = sentences(40, seed=seed) + BLANK * 3
    random.Random(seed).shuffle(lines)
    return ["", *lines, "  "]  # blank lines at both ends too


def check_copy(inputs: list[str], outputs: list[str]) -> None:
    """Output i belongs to input i: blank in, empty out; the copy model reproduces (nearly) every sentence."""
    assert len(outputs) == len(inputs)
    for src, hyp in zip(inputs, outputs, strict=True):
        if not src.strip():
            assert hyp == ""
    real = [(s, h) for s, h in zip(inputs, outputs, strict=True) if s.strip()]
    exact = sum(s == h for s, h in real) / len(real)
    assert exact >= 0.9, f"only {exact:.0%} of the lines came back as their own copy"


def read_exact_lines(path: Path, expected: int) -> list[str]:
    text = path.read_text(encoding="utf-8")
    assert text.count("\n") == expected and text.endswith("\n")
    return text[:-1].split("\n")


def translate_args(trained: TrainedRun, source: Path, output: Path, *options: object) -> list[object]:
    """`nmt translate` of the file `source` into `output` with the trained model on one thread."""
    return ["translate", "-m", trained.checkpoint, "-i", source, "-o", output, "--threads", 1, *options]


def translate_stdin(
    args: list[object],
    text: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    quiet: bool = True,
) -> tuple[int, str, str]:
    """Run `nmt translate ARGS` in this process with `text` on stdin; returns (code, stdout, stderr)."""
    capsys.readouterr()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.encode("utf-8")), encoding="utf-8"))
    code = nmt(*(["-q"] if quiet else []), "translate", "--threads", 1, *args)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    "batching",
    [[], ["--buffer-size", "3", "--batch-tokens", "8"]],
    ids=["default buffers", "tiny buffers and batches"],
)
def test_file_to_file_keeps_every_line_in_order(
    trained: TrainedRun, tmp_path: Path, batching: list[str]
) -> None:
    lines = mixed_lines()
    source, target = tmp_path / "in.txt", tmp_path / "out.txt"
    source.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    code = nmt("-q", *translate_args(trained, source, target, *batching))
    assert code == 0
    check_copy(lines, read_exact_lines(target, len(lines)))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt", "out.txt"]  # no partial file left


def test_stdin_to_stdout_keeps_every_line_in_order(
    trained: TrainedRun, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = mixed_lines(seed=4)
    text = "".join(f"{x}\n" for x in lines)
    code, out, _ = translate_stdin(
        ["-m", trained.checkpoint, "--buffer-size", "5"], text, capsys, monkeypatch
    )
    assert code == 0
    assert out.count("\n") == len(lines) and out.endswith("\n")
    check_copy(lines, out[:-1].split("\n"))


def test_a_dash_is_stdin_or_stdout_and_a_file_named_dash_is_dot_slash_dash(
    trained: TrainedRun,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # As fairseq-interactive, sacreBLEU and most Unix tools read "-".
    code, out, _ = translate_stdin(
        ["-m", trained.checkpoint, "-i", "-", "-o", "-"], "apple river\n", capsys, monkeypatch
    )
    assert code == 0 and out == "apple river\n"
    monkeypatch.chdir(tmp_path)
    Path("-").write_text("stone\n", encoding="utf-8")
    code, out, _ = translate_stdin(
        ["-m", trained.checkpoint, "-i", "./-"], "apple river\n", capsys, monkeypatch
    )
    assert code == 0 and out == "stone\n"


def test_a_last_line_without_newline_and_crlf_are_translated(
    trained: TrainedRun, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, _ = translate_stdin(
        ["-m", trained.checkpoint], "apple river\r\n\r\nstone cloud", capsys, monkeypatch
    )
    assert code == 0
    assert out.split("\n") == ["apple river", "", "stone cloud", ""]


@pytest.mark.parametrize(
    "parallel", [["--threads", "1"], ["--workers", "2"]], ids=["one-thread", "two-workers"]
)
def test_a_pipe_gets_each_answer_before_eof(trained: TrainedRun, corpus: Corpus, parallel: list[str]) -> None:
    process = subprocess.Popen(
        nmt_command("-q", "translate", "-m", trained.checkpoint, *parallel),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=subprocess_env(),
    )
    answers: queue.Queue[bytes] = queue.Queue()
    threading.Thread(target=lambda: [answers.put(line) for line in process.stdout], daemon=True).start()
    try:
        assert process.stdin is not None
        for sentence in ("apple river stone", "green music"):
            process.stdin.write(f"{sentence}\n".encode())
            process.stdin.flush()
            answer = answers.get(timeout=90)  # stdin stays open: the answer must not wait for EOF
            assert process.poll() is None
            assert answer.decode().rstrip("\n") == sentence
        process.stdin.close()
        assert process.wait(timeout=60) == 0
        assert answers.empty()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_a_line_longer_than_the_model_is_truncated_with_a_warning(
    trained: TrainedRun, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    payload = checkpoint.load(trained.checkpoint)
    max_positions = payload.config["model"]["max_positions"]
    long_line = " ".join(WORDS[i % len(WORDS)] for i in range(2 * max_positions))  # one piece per word
    text = f"apple river\n{long_line}\ngreen music\n"
    code, out, err = translate_stdin(["-m", trained.checkpoint], text, capsys, monkeypatch, quiet=False)
    assert code == 0
    assert "Traceback" not in err
    assert "truncated" in err and "1 input line" in err
    outputs = out.split("\n")
    assert len(outputs) == 4 and outputs[-1] == ""
    assert outputs[0] == "apple river" and outputs[2] == "green music"
    assert len(outputs[1].split()) < max_positions  # the model never saw more than its positions


def test_nbest_prints_k_hypotheses_per_line_best_first(
    trained: TrainedRun, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = ["apple river stone", "", "green music paper tiger", "summer"]
    text = "".join(f"{x}\n" for x in lines)
    code, out, _ = translate_stdin(
        ["-m", trained.checkpoint, "--beam", "3", "--nbest", "3"], text, capsys, monkeypatch
    )
    assert code == 0
    rows = [line.split("\t") for line in out.splitlines()]
    by_line: dict[int, list[tuple[float, str]]] = {}
    for number, score, hyp in rows:
        by_line.setdefault(int(number), []).append((float(score), hyp))
    assert sorted(by_line) == [0, 1, 2, 3]
    for number, hyps in by_line.items():
        if not lines[number]:  # an empty line: its empty translation, then two empty fillers
            assert hyps == [(0.0, ""), (float("-inf"), ""), (float("-inf"), "")]
            continue
        assert len(hyps) == 3
        scores = [s for s, _ in hyps]
        assert scores == sorted(scores, reverse=True)
        assert len({h for _, h in hyps}) == 3  # three different hypotheses, not one thrice
    assert [number for number, _, _ in rows] == sorted(number for number, _, _ in rows)

    # The first of the n-best list is the 1-best output of the same beam.
    code, best, _ = translate_stdin(["-m", trained.checkpoint, "--beam", "3"], text, capsys, monkeypatch)
    assert code == 0
    assert best.splitlines() == [by_line[i][0][1] if lines[i] else "" for i in range(len(lines))]


def reference_greedy(
    payload: checkpoint.Checkpoint, lines: list[str], max_len_a: float = 1.0, max_len_b: int = 50
) -> list[str]:
    """Greedy decoding by full recompute of the decoder at every step (no cache, no beam, no batch)."""
    cfg = payload.run_config(Path("fixture")).model
    model = Transformer(cfg)
    model.load_state_dict(payload.model)
    model.eval()
    src_spm, tgt_spm = spm.load_processor(payload.spm["src"]), spm.load_processor(payload.spm["tgt"])
    outputs = []
    for line in lines:
        src_ids = list(src_spm.encode(line)) + [EOS_ID]
        limit = min(int(max_len_a * (len(src_ids) - 1) + max_len_b + 1), cfg.max_positions)  # EOS included
        out = [BOS_ID]
        with torch.inference_mode(), one_thread():
            src = torch.tensor([src_ids])
            for _ in range(limit - 1):  # the limit counts the EOS, which is forced at the last step
                logits = model(src, torch.tensor([out]))[0, -1]  # (V,)
                logits[[PAD_ID, BOS_ID]] = float("-inf")
                token = int(logits.argmax())
                if token == EOS_ID:
                    break
                out.append(token)
        outputs.append(tgt_spm.decode(out[1:]))
    return outputs


def test_beam_one_equals_greedy(
    trained: TrainedRun, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Some sentences longer than the training data, so that the model makes mistakes worth comparing.
    lines = sentences(8, seed=5, min_words=4, max_words=14)
    text = "".join(f"{x}\n" for x in lines)
    args = ["-m", trained.checkpoint, "--beam", "1", "--precision", "fp32"]  # the reference's precision
    code, out, _ = translate_stdin(args, text, capsys, monkeypatch)
    assert code == 0
    assert out.splitlines() == reference_greedy(checkpoint.load(trained.checkpoint), lines)


def test_an_ensemble_of_one_checkpoint_twice_decodes_like_the_checkpoint(
    trained: TrainedRun, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = sentences(15, seed=6, min_words=1, max_words=12)
    text = "".join(f"{x}\n" for x in lines)
    args = ["--beam", "4", "--nbest", "2"]
    code, single, _ = translate_stdin([*args, "-m", trained.checkpoint], text, capsys, monkeypatch)
    assert code == 0
    code, double, _ = translate_stdin(
        [*args, "-m", trained.checkpoint, "-m", trained.checkpoint], text, capsys, monkeypatch
    )
    assert code == 0
    assert double == single  # texts and scores


def test_an_ensemble_of_opposite_directions_is_refused(
    trained: TrainedRun, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A joint vocabulary serves both directions: only the recorded languages tell them apart."""
    reverse = checkpoint.load(trained.checkpoint)
    reverse.languages = ("tgt", "src")
    checkpoint.save(reverse, tmp_path / "reverse.pt")
    args = ["-m", trained.checkpoint, "-m", tmp_path / "reverse.pt"]
    code, out, err = translate_stdin(args, "apple river\n", capsys, monkeypatch)
    assert code == 2 and out == ""
    assert "different directions" in _one_line_error(err)
    assert Translator.load(trained.checkpoint).languages == ("src", "tgt")


def _one_line_error(err: str) -> str:
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def test_an_unwritable_output_fails_in_one_line_and_writes_nothing(
    trained: TrainedRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "in.txt"
    source.write_text("apple river\n", encoding="utf-8")
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("", encoding="utf-8")
    targets = [not_a_dir / "out.txt", tmp_path / "missing" / "out.txt"]
    if os.geteuid() != 0:  # root writes into read-only directories anyway
        read_only = tmp_path / "read-only"
        read_only.mkdir(mode=0o555)
        targets.append(read_only / "out.txt")
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    for target in targets:
        capsys.readouterr()
        code = nmt(*translate_args(trained, source, target))
        assert code in (1, 2), target
        line = _one_line_error(capsys.readouterr().err)
        assert line.startswith("nmt: error:") and str(target) in line
        assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


def test_a_missing_model_fails_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.pt"
    code = nmt("translate", "-m", missing, "-o", tmp_path / "out.txt")
    assert code == 2
    line = _one_line_error(capsys.readouterr().err)
    assert line.startswith("nmt: error:") and str(missing) in line
    assert not (tmp_path / "out.txt").exists()


def fail_after_first_buffer(monkeypatch: pytest.MonkeyPatch, error: BaseException) -> list[list[str]]:
    """Make the translator raise `error` on its second buffer; returns the buffers it translated."""
    real = Translator.translate_results  # every way of translating goes through it
    seen: list[list[str]] = []

    def translate_results(self: Translator, lines: list[str], *args: object, **kwargs: object) -> object:
        if seen:
            raise error
        seen.append(list(lines))
        return real(self, lines, *args, **kwargs)

    monkeypatch.setattr(Translator, "translate_results", translate_results)
    return seen


@pytest.mark.parametrize(
    ("error", "code", "words", "options", "existing"),
    [
        (KeyboardInterrupt(), 130, "interrupted; --output", [], False),
        (RuntimeError("boom"), 1, "boom", [], False),
        (KeyboardInterrupt(), 130, "interrupted; --output", ["--beam", "2", "--nbest", "2"], False),
        (RuntimeError("boom"), 1, "boom", [], True),
    ],
    ids=["ctrl-c", "crash", "ctrl-c with nbest", "crash with an existing output"],
)
def test_a_failure_keeps_the_finished_buffers_in_a_partial_file(
    trained: TrainedRun,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    error: BaseException,
    code: int,
    words: str,
    options: list[str],
    existing: bool,
) -> None:
    lines = sentences(12, seed=7)  # no blank line: every line has --nbest hypotheses
    source, target = tmp_path / "in.txt", tmp_path / "out.txt"
    partial = tmp_path / "out.txt.partial"
    source.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    if existing:
        target.write_text("the last good output\n", encoding="utf-8")
    seen = fail_after_first_buffer(monkeypatch, error)
    capsys.readouterr()
    got = nmt(*translate_args(trained, source, target, "--buffer-size", 4, *options))
    assert code == got
    line = _one_line_error(capsys.readouterr().err)
    assert len(seen) == 1
    done = len(seen[0])
    assert seen[0] == lines[:done]
    assert line.startswith("nmt: error: ") and words in line
    assert f"--output {target}" in line and f"after {done} lines; they are in {partial}" in line
    if existing:
        assert target.read_text(encoding="utf-8") == "the last good output\n"
    else:
        assert not target.exists()
    nbest = 2 if options else 1
    kept = read_exact_lines(partial, nbest * done)
    if nbest == 1:
        check_copy(lines[:done], kept)
    else:
        assert [int(row.split("\t")[0]) for row in kept] == [i for i in range(done) for _ in range(nbest)]


class FullDisk(io.TextIOWrapper):
    """A file on a disk that fills up during the second write: half of it goes out, then ENOSPC."""

    writes = 0

    def write(self, text: str) -> int:
        FullDisk.writes += 1
        if FullDisk.writes == 2:
            super().write(text[: len(text) // 2])
            super().flush()
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return super().write(text)


def test_a_full_disk_keeps_the_complete_buffers_and_fails_in_one_line(
    trained: TrainedRun, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = sentences(12, seed=8)
    source, target = tmp_path / "in.txt", tmp_path / "out.txt"
    partial = tmp_path / "out.txt.partial"
    source.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    real_open = Path.open

    def open_(self: Path, mode: str = "r", *args: object, **kwargs: object) -> object:
        if self == partial and mode == "x":
            return FullDisk(real_open(self, "xb"), encoding="utf-8")
        return real_open(self, mode, *args, **kwargs)

    monkeypatch.setattr(FullDisk, "writes", 0)
    monkeypatch.setattr(Path, "open", open_)
    capsys.readouterr()
    code = nmt(*translate_args(trained, source, target, "--buffer-size", 4))
    assert code == 1  # a runtime failure, as a full disk is for every command
    line = _one_line_error(capsys.readouterr().err)
    assert FullDisk.writes == 2
    assert f"--output {target}: cannot write (No space left on device)" in line
    assert not target.exists()
    # The half-written second buffer is cut off: the partial file holds the first buffer only.
    done = int(line.split(" lines; they are in ")[0].rsplit(" ", 1)[1])
    assert 1 <= done <= 4 and line.endswith(f"after {done} lines; they are in {partial}")
    check_copy(lines[:done], read_exact_lines(partial, done))


def test_min_len_is_an_option_and_a_negative_one_is_refused(trained: TrainedRun, tmp_path: Path) -> None:
    src = tmp_path / "in.txt"
    src.write_text("a b c\n\nd e\n", encoding="utf-8")
    out = tmp_path / "out.txt"
    args = ["-q", *translate_args(trained, src, out)]
    assert nmt(*args) == 0
    copied = out.read_text(encoding="utf-8").split("\n")
    assert nmt(*args, "--min-len", 20) == 0  # the copy model must go on past its natural end
    longer = out.read_text(encoding="utf-8").split("\n")
    assert copied[1] == longer[1] == ""  # an empty line stays empty
    assert len(longer[0]) > len(copied[0]) and len(longer[2]) > len(copied[2])
    assert nmt(*args, "--min-len", -1) == 2


class FailingInput(io.RawIOBase):
    """Gives `data`, then fails as a dying disk or a broken network mount does (or with `error`)."""

    def __init__(self, data: bytes, error: BaseException | None = None) -> None:
        self.data = data
        self.error = error or OSError(errno.EIO, "Input/output error")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        if not self.data:
            raise self.error
        n = min(len(buffer), len(self.data))
        buffer[:n], self.data = self.data[:n], self.data[n:]
        return n


def test_a_read_error_fails_after_translating_what_was_read(
    trained: TrainedRun, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    stdin = io.TextIOWrapper(io.BufferedReader(FailingInput(b"apple river\nstone\n")), encoding="utf-8")
    monkeypatch.setattr(sys, "stdin", stdin)
    capsys.readouterr()
    code = nmt("-q", "translate", "--threads", 1, "--precision", "fp32", "-m", trained.checkpoint)
    out, err = capsys.readouterr()
    assert code == 1  # not a silent success with a truncated output
    assert out.splitlines() == ["apple river", "stone"]
    assert err.strip() == "nmt: error: stdin: reading failed after line 2 (Input/output error)"


def test_running_out_of_memory_while_reading_is_an_error_not_the_end_of_the_input(
    trained: TrainedRun, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    failing = FailingInput(b"apple river\nstone\n", MemoryError())
    stdin = io.TextIOWrapper(io.BufferedReader(failing), encoding="utf-8")
    monkeypatch.setattr(sys, "stdin", stdin)
    target = tmp_path / "out.txt"
    capsys.readouterr()
    code = nmt(
        "-q", "translate", "--threads", 1, "--precision", "fp32", "-m", trained.checkpoint, "-o", target
    )
    line = _one_line_error(capsys.readouterr().err)
    assert code == 1 and not target.exists()  # never finalised with part of the input
    assert "out of memory" in line and "after 2 lines" in line
    assert (tmp_path / "out.txt.partial").read_text(encoding="utf-8").splitlines() == ["apple river", "stone"]


def test_one_line_out_per_line_in_even_when_the_model_writes_line_breaks(
    corpus: Corpus, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # With byte fallback the vocabulary holds <0x0A>, <0x0D>, <0x09> and <0x00>; a barely trained
    # model sampled at a high temperature writes them, and each decodes to its control character.
    data, run = tmp_path / "data", tmp_path / "run"
    prepare = prepare_args(data, corpus.raw / "train", valid=corpus.raw / "valid")
    assert nmt(*prepare, "--byte-fallback", "--vocab-size", 300) == 0
    assert nmt(*train_args(data, run, "train.max_updates=2", "train.save_every_updates=2")) == 0
    lines = sentences(300, seed=11)
    source, target = tmp_path / "in.txt", tmp_path / "out.txt"
    source.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    drawn = ["--sampling", "topk", "--topk", 0, "--temperature", 50, "--workers", 1, "--threads", 1]
    model = run / "checkpoints" / "checkpoint_last.pt"
    assert nmt("-q", "translate", "-m", model, "-i", source, "-o", target, "--precision", "fp32", *drawn) == 0
    written = target.read_bytes()
    assert written.count(b"\n") == len(lines)
    assert not any(c in written for c in b"\r\t\x00\x0b\x0c")
    # The same rule holds for n-best lists (tab-separated) and the Python API.
    assert nmt("-q", "translate", "-m", model, "-i", source, "-o", target, "--nbest", 2) == 0
    assert all(len(row.split("\t")) == 3 for row in target.read_text(encoding="utf-8").split("\n")[:-1])
    assert target.read_bytes().count(b"\n") == 2 * len(lines)


def test_an_output_that_is_the_input_is_refused_and_the_input_kept(
    trained: TrainedRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "in.txt"
    source.write_text("apple river\nstone\n", encoding="utf-8")
    (tmp_path / "link.txt").symlink_to(source)
    os.link(source, tmp_path / "hard.txt")
    glossary = tmp_path / "terms.tsv"
    glossary.write_text("apple\triver\n", encoding="utf-8")
    for output in (source, tmp_path / "link.txt", tmp_path / "hard.txt", trained.checkpoint, glossary):
        capsys.readouterr()
        code = nmt(*translate_args(trained, source, output, "--glossary", glossary))
        assert code == 2, output
        line = _one_line_error(capsys.readouterr().err)
        assert "is an input of this command" in line and str(output) in line
    assert source.read_text(encoding="utf-8") == "apple river\nstone\n"
    assert glossary.read_text(encoding="utf-8") == "apple\triver\n"
    assert checkpoint.load(trained.checkpoint).update == trained.updates


def test_a_partial_file_in_the_way_is_refused_and_kept(
    trained: TrainedRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source, target = tmp_path / "in.txt", tmp_path / "out.txt"
    source.write_text("apple river\n", encoding="utf-8")
    partial = tmp_path / "out.txt.partial"
    partial.write_text("lines an earlier run kept\n", encoding="utf-8")
    not_a_model = tmp_path / "notes.pt"  # refused before the model is loaded: no word of the model
    not_a_model.write_text("notes\n", encoding="utf-8")
    capsys.readouterr()
    assert nmt("translate", "-m", not_a_model, "-i", source, "-o", target, "--threads", 1) == 2
    line = _one_line_error(capsys.readouterr().err)
    assert f"{partial} is in the way" in line
    assert partial.read_text(encoding="utf-8") == "lines an earlier run kept\n" and not target.exists()


def test_an_output_name_near_the_length_limit_is_written(trained: TrainedRun, tmp_path: Path) -> None:
    # OUT.partial would pass the 255 bytes of a file name: its name is cut (with a hash) instead.
    source, target = tmp_path / "in.txt", tmp_path / ("é" * 124 + ".txt")  # 252 bytes
    source.write_text("apple river\n", encoding="utf-8")
    assert nmt("-q", *translate_args(trained, source, target)) == 0
    assert target.read_text(encoding="utf-8").count("\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["in.txt", target.name])


@pytest.mark.parametrize("shell", ["appended", "piped"])
def test_dev_stdout_writes_through_the_shells_redirection(
    trained: TrainedRun, tmp_path: Path, shell: str
) -> None:
    """`-o /dev/stdout >> log` appends to the log (replacing the file behind /dev/stdout would
    lose it), and `-o /dev/stdout | ...` writes to the pipe."""
    log = tmp_path / "log.txt"
    log.write_text("kept\n", encoding="utf-8")
    args = nmt_command("-q", "translate", "-m", trained.checkpoint, "-o", "/dev/stdout", "--threads", 1)
    with open(log, "a", encoding="utf-8") as appended:
        out = appended if shell == "appended" else subprocess.PIPE
        done = subprocess.run(
            args, input="apple river\n", stdout=out, stderr=subprocess.PIPE, text=True, env=subprocess_env()
        )
    assert done.returncode == 0, done.stderr
    written = log.read_text(encoding="utf-8") if shell == "appended" else "kept\n" + done.stdout
    assert written.startswith("kept\n") and written.count("\n") == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["log.txt"]


def test_dev_stdin_of_a_pipe_as_the_output_is_refused_before_any_work(tmp_path: Path) -> None:
    args = nmt_command("-q", "translate", "-m", tmp_path / "model.pt", "-o", "/dev/stdin")
    done = subprocess.run(args, input="apple river\n", capture_output=True, text=True, env=subprocess_env())
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == (
        "nmt: error: --output /dev/stdin: descriptor 0 is open for reading only; give a file name\n"
    )


def test_a_file_that_is_not_utf8_text_is_translated_with_one_warning(
    trained: TrainedRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source, out = tmp_path / "utf16.txt", tmp_path / "out.txt"
    source.write_bytes("apple river\nstone\ngreen\n".encode("utf-16"))  # NUL bytes on every line
    capsys.readouterr()
    assert nmt(*translate_args(trained, source, out)) == 0
    err = capsys.readouterr().err
    assert err.count("not UTF-8 text") == 1 and f"{source}:1: " in err and "UTF-16" in err
    # Still a line a line: three, and the NUL after the last newline is a fourth.
    assert out.read_bytes().count(b"\n") == 4


@pytest.mark.parametrize(
    "quiet", ["", "before", "after"], ids=["terminal", "quiet", "quiet after the command"]
)
def test_progress_goes_to_a_terminals_stderr_but_not_with_quiet(
    trained: TrainedRun, tmp_path: Path, quiet: str
) -> None:
    import fcntl
    import pty
    import struct
    import termios

    source, out = tmp_path / "in.txt", tmp_path / "out.txt"
    source.write_text("\n".join(sentences(30, seed=5)), encoding="utf-8")  # no newline after the last
    args = [*(["-q"] if quiet == "before" else []), *translate_args(trained, source, out)]
    args += ["--quiet"] if quiet == "after" else []  # as the subcommand's own option too
    main, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # 0 columns: no bar
    try:
        done = subprocess.run(
            nmt_command(*args, "--buffer-size", 4),
            stdout=subprocess.DEVNULL, stderr=terminal, env=subprocess_env(), timeout=120,
        )  # fmt: skip
        os.close(terminal)
        shown = b""
        with contextlib.suppress(OSError):  # EIO once everything written to the terminal is read
            while chunk := os.read(main, 4096):
                shown += chunk
    finally:
        os.close(main)
    assert done.returncode == 0
    assert out.read_text(encoding="utf-8").count("\n") == 30
    if quiet:
        assert shown == b""
    else:
        assert b"translating" in shown and b"/30" in shown  # the total: the input file's lines


def test_non_empty_lines_translated_to_nothing_are_warned_about(
    trained: TrainedRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A model with NaN weights (damaged, or a bad import from an earlier version) translates every
    line to nothing: the command still ends, and says so."""
    ckpt = checkpoint.load(trained.checkpoint)
    for tensor in ckpt.model.values():
        if tensor.is_floating_point():
            tensor.fill_(float("nan"))
    broken = tmp_path / "nan.pt"
    checkpoint.save(ckpt, broken)
    source = tmp_path / "in.txt"
    source.write_text("apple river\n\nstone\n", encoding="utf-8")
    out = tmp_path / "out.txt"
    capsys.readouterr()
    assert nmt("translate", "-m", broken, "-i", source, "-o", out, "--threads", 1) == 0
    assert out.read_text(encoding="utf-8") == "\n\n\n"
    assert "2 non-empty input lines got an empty translation" in capsys.readouterr().err
