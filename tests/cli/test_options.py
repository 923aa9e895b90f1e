"""The settings objects the command line builds from its options: every option reaches its field
(each command names them by keyword), and a field a command has no option for keeps its default."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import typer.main
from helpers import nmt, refused

from nmt_cli.cli.app import app
from nmt_cli.commands import attend, prepare, serve, translate
from nmt_cli.serving.limits import ServeLimits
from nmt_cli.user_settings import (
    SEARCH_FIELDS,
    AttendJob,
    DecodeOverrides,
    PrepareConfig,
    RuntimeConfig,
    TranslateJob,
)

DECODE_OPTIONS = ["--beam", 3, "--lenpen", 0.5, "--lenpen-style", "fairseq"]
DECODE_OPTIONS += ["--max-len-a", 2, "--max-len-b", 7, "--min-len", 2]
DECODE = DecodeOverrides(beam=3, lenpen=0.5, lenpen_style="fairseq", max_len_a=2.0, max_len_b=7, min_len=2)


def handed_on(monkeypatch: pytest.MonkeyPatch, command: ModuleType, *args: object) -> dict[str, Any]:
    """The keywords the command line calls `command.run` with; its job, if any, as "job"."""
    seen: dict[str, Any] = {}
    monkeypatch.setattr(command, "run", lambda *job, **kwargs: seen.update(kwargs, job=job))
    assert nmt(*args) == 0
    return seen


def test_translate_hands_on_every_decode_option(monkeypatch: pytest.MonkeyPatch) -> None:
    # A search setting added to DecodeOverrides fails here until `nmt translate` has its option.
    seen = handed_on(monkeypatch, translate, "translate", "-m", "m.pt", *DECODE_OPTIONS, "--shortlist")
    assert seen["decode"] == DecodeOverrides(**{**DECODE.given(), "shortlist": True})
    assert tuple(seen["decode"].given()) == SEARCH_FIELDS


def test_translate_hands_on_every_job_and_runtime_option(monkeypatch: pytest.MonkeyPatch) -> None:
    options = ["-m", "a.pt", "-m", "b.pt", "-i", "in.txt", "-o", "out.txt", "--nbest", 3]
    options += ["--batch-tokens", 100, "--buffer-size", 7, "--split-sentences", "--alignments"]
    options += ["--format", "html", "--constraints", "--ordered-constraints", "--glossary", "terms.tsv"]
    options += ["--device", "cpu", "--precision", "bf16", "--threads", 2, "--workers", 3]
    seen = handed_on(monkeypatch, translate, "translate", *options)
    paths = [Path("a.pt"), Path("b.pt")], Path("in.txt"), Path("out.txt")
    assert seen["job"] == (
        TranslateJob(*paths, 3, 100, 7, True, True, "html", True, True, Path("terms.tsv")),
    )
    assert seen["runtime"] == RuntimeConfig("cpu", "bf16", 2, 3)


def test_translate_defaults_are_the_jobs(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = handed_on(monkeypatch, translate, "translate", "-m", "m.pt")
    assert seen["job"] == (TranslateJob([Path("m.pt")]),)


def test_attend_hands_on_its_job(monkeypatch: pytest.MonkeyPatch) -> None:
    options = ["-m", "m.pt", "--out-dir", "pictures", "-i", "in.txt", "--layer", 2, "--head", 1]
    seen = handed_on(monkeypatch, attend, "attend", *options, "--format", "svg", "--batch-tokens", 50)
    assert seen["job"] == (AttendJob(Path("m.pt"), Path("pictures"), Path("in.txt"), 2, 1, "svg", 50),)
    seen = handed_on(monkeypatch, attend, "attend", "-m", "m.pt", "--out-dir", "pictures")
    assert seen["job"] == (AttendJob(Path("m.pt"), Path("pictures")),)


def test_attend_hands_on_its_decode_options(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = handed_on(monkeypatch, attend, "attend", "-m", "m.pt", "--out-dir", "pictures", *DECODE_OPTIONS)
    assert seen["decode"] == DECODE  # no --shortlist: the checkpoint's


def test_serve_hands_on_every_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    options = ["--max-batch-tokens", 100, "--max-wait-ms", 1, "--max-queue", 9, "--max-input-chars", 8]
    options += ["--max-lines", 7, "--request-timeout", 3, "--max-client-connections", 2]
    seen = handed_on(monkeypatch, serve, "serve", "-m", "m.pt", *options, "--max-html-tags", 50)
    assert seen["limits"] == ServeLimits(100, 1.0, 9, 8, 7, 3.0, 2, 50)


def test_prepare_hands_on_every_option(monkeypatch: pytest.MonkeyPatch) -> None:
    options = ["--train", "a", "--train", "b", "--valid", "v", "--src", "en", "--tgt", "de", "--out", "p"]
    options += ["--test", "t", "--train-tag", "", "--train-tag", "<BT>", "--reserve", "<X>"]
    options += ["--spm-from", "m.pt", "--vocab-size", 100, "--no-joint", "--character-coverage", 0.5]
    options += ["--no-byte-fallback", "--normalization", "nfkc", "--spm-sample", 9, "--max-len", 8]
    options += ["--max-ratio", 3, "--errors", "replace", "--workers", 2]
    seen = handed_on(monkeypatch, prepare, "prepare", *options)
    assert seen["job"] == (
        PrepareConfig(
            ("a", "b"), "v", "en", "de", Path("p"), "t", ("", "<BT>"), ("<X>",), Path("m.pt"),
            100, False, 0.5, False, "nfkc", 9, 8, 3.0, "replace", 2,
        ),
    )  # fmt: skip
    seen = handed_on(monkeypatch, prepare, "prepare", *options[:12])
    assert seen["job"] == (PrepareConfig(("a", "b"), "v", "en", "de", Path("p")),)


# An empty path: pathlib reads "" as ".", so `-o ""` was answered "--output .: is a directory".
EMPTY_PATHS = [
    ("translate", "-m", "x.pt", "-o", ""),
    ("translate", "-m", "", "-i", "/dev/null"),
    ("translate", "-m", "x.pt", "-i", ""),
    ("translate", "-m", "x.pt", "--glossary", ""),
    ("average", ""),
    ("average", "-o", "", "x.pt"),
    ("average", "--run", ""),
    ("score", "--ref", ""),
    ("score", "--ref", "x", "--hyp", ""),
    ("plot", ""),
    ("plot", "x", "-o", ""),
    ("train", "--data", "", "--out", "x"),
    ("train", "--data", "x", "--out", "x", "--init-from", ""),
    ("prepare", "--train", "", "--valid", "x", "--src", "en", "--tgt", "de", "--out", "p"),
    ("prepare", "--train", "x", "--valid", "x", "--src", "en", "--tgt", "de", "--out", ""),
    ("import", "", "-o", "x.pt"),
    ("import", "x", "-o", ""),
    ("export", "-m", "", "-o", "x"),
    ("shortlist", "-m", "x", "--train", "", "-o", "y"),
    ("attend", "-m", "x", "--out-dir", ""),
    ("serve", "-m", "x", "--api-keys", ""),
]


@pytest.mark.parametrize("args", EMPTY_PATHS, ids=[" ".join(map(repr, a)) for a in EMPTY_PATHS])
def test_an_empty_path_is_refused_naming_its_option(
    capsys: pytest.CaptureFixture[str], args: tuple[str, ...]
) -> None:
    before = args[args.index("") - 1]
    named = (
        before
        if before.startswith("-")
        else {"average": "checkpoints", "plot": "runs", "import": "source"}[args[0]]
    )
    message = refused(capsys, *args)
    assert f"'{named}'" in message and " is empty; " in message, message


def test_every_path_a_command_takes_is_checked_for_emptiness() -> None:
    # A path option declared without `options.AS_PATH` (or a parser of its own) reads "" as ".".
    commands = typer.main.get_command(app).commands  # type: ignore[attr-defined]
    unchecked = [
        f"nmt {name} {param.name}"
        for name, sub in commands.items()
        for param in sub.params
        if getattr(param.type, "name", None) == "path"
    ]
    assert not unchecked, unchecked
