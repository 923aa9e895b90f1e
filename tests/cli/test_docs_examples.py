"""The commands of two docs sections, run as written: docs/export.md's "Hugging Face Marian" (the
export, then its Python block in a fresh interpreter that imports transformers and no nmt) and
docs/training.md's "TensorBoard" (a training run whose curves are read back with TensorBoard's own
reader). Each runs in a scratch directory laid out with the files the section names:
`run/checkpoints/checkpoint_best.pt` is conftest's trained copy-task model, `data/en_de` the
prepared copy task, `recipes` this checkout's. `nmt train` gets the tests' tiny model and a few
updates after its own options. A line that cannot run here (an install, a server, the Hub) is
listed in SECTIONS with the reason; any other line that is not an `nmt` command fails the test,
and so does a listed line the docs no longer have."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import FAST_TRAIN, TINY_MODEL, Corpus, TrainedRun, nmt, sets

ROOT = Path(__file__).resolve().parents[2]

# The sections run here, with the lines of each that do not run and why (in the docs' order).
SECTIONS = {
    ("export.md", "## Hugging Face Marian"): {
        "hf auth login": "the Hugging Face Hub is online",
        "hf upload your-name/my-model my-model .": "the Hugging Face Hub is online",
    },
    ("training.md", "### TensorBoard"): {
        'pip install "nmt-cli[tensorboard]"': "installs; the tests run with the dev extras",
        "tensorboard --logdir runs/tb": "a web server that runs until stopped",
    },
}

EXTRAS = {
    "train": [
        *("--device", "cpu", "--threads", "1", "-q"),
        *sets(
            *TINY_MODEL,
            *FAST_TRAIN,
            "train.update_tokens=0",
            "train.update_freq=1",
            "train.max_updates=20",
            "train.log_every_updates=5",
            "train.valid_every_updates=10",
            "train.save_every_updates=10",
        ),
    ],
    "export": ["-q"],
}


def section(doc: str, heading: str) -> str:
    """The text under `heading` up to the next heading of its level or above."""
    lines = (ROOT / "docs" / doc).read_text(encoding="utf-8").splitlines()
    start = lines.index(heading) + 1
    level = heading.split(" ")[0]
    end = next(
        (
            i
            for i in range(start, len(lines))
            if lines[i].startswith("#") and len(lines[i].split(" ")[0]) <= len(level)
        ),
        len(lines),
    )
    return "\n".join(lines[start:end])


def blocks(text: str, language: str) -> list[str]:
    """The fenced blocks of `language` in `text`, in order."""
    parts = text.split("```")
    return [part.removeprefix(language + "\n") for part in parts[1::2] if part.startswith(language + "\n")]


def command_lines(text: str) -> list[str]:
    """The shell lines of the section's sh blocks, their comments left out."""
    found = []
    for block in blocks(text, "sh"):
        for line in block.splitlines():
            command = line.split("  #")[0].strip()
            if command:
                found.append(command)
    return found


def run_section(doc: str, heading: str) -> str:
    """Run the section's `nmt` lines in this process (cwd: the scratch directory); every other
    line must be one SECTIONS leaves out, and each of those must still be there. Returns the text."""
    text, not_run = section(doc, heading), SECTIONS[doc, heading]
    skipped = []
    for line in command_lines(text):
        if line in not_run:
            skipped.append(line)
            continue
        argv = shlex.split(line)
        assert argv[0] == "nmt", f"a line of {doc} neither run nor listed in SECTIONS: {line}"
        assert nmt(*argv[1:], *EXTRAS.get(argv[1], [])) == 0, line
    assert skipped == list(not_run), f"SECTIONS lists lines that {doc} no longer has"
    return text


def test_the_hugging_face_marian_section_runs(
    trained: TrainedRun, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("transformers")
    pytest.importorskip("safetensors")
    (tmp_path / "run" / "checkpoints").mkdir(parents=True)
    (tmp_path / "run" / "checkpoints" / "checkpoint_best.pt").symlink_to(trained.checkpoint)
    monkeypatch.chdir(tmp_path)
    text = run_section("export.md", "## Hugging Face Marian")

    [program] = blocks(text, "python")
    done = subprocess.run(
        [sys.executable, "-c", program], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    [printed] = done.stdout.splitlines()  # the translations of the one line, as a list
    assert printed.startswith("['") and printed.endswith("']") and len(printed) > 4


def test_the_tensorboard_section_runs(
    corpus: Corpus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "en_de").symlink_to(corpus.data)
    (tmp_path / "recipes").symlink_to(ROOT / "recipes")
    monkeypatch.chdir(tmp_path)
    run_section("training.md", "### TensorBoard")

    reader = event_accumulator.EventAccumulator(str(tmp_path / "runs" / "tb" / "base"))
    reader.Reload()
    steps = {tag: [e.step for e in reader.Scalars(tag)] for tag in reader.Tags()["scalars"]}
    assert steps["train/loss"] == [5, 10, 15, 20]
    assert steps["valid/loss"] == [10, 20]
