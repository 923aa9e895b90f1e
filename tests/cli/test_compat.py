"""Runs written by nmt 0.1 before this layout of the code keep working: their checkpoint loads,
translates exactly as it did then, and resumes training. The fixture (tests/fixtures/run_v0.1)
is a tiny copy-task run of 200 updates, its prepared corpus, eight source lines and the 2-best
lists that version printed for them with beam 4."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from helpers import nmt

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "run_v0.1"


@pytest.fixture
def old_run(tmp_path: Path) -> Path:
    return Path(shutil.copytree(FIXTURE, tmp_path / "old"))


def test_an_old_checkpoint_translates_as_it_did(old_run: Path) -> None:
    out = old_run / "probe.now"
    checkpoint = old_run / "run" / "checkpoints" / "checkpoint_last.pt"
    args = ["-q", "translate", "-m", checkpoint, "-i", old_run / "probe.src", "-o", out]
    # fp32: the precision the probe was written in (the default is now the fastest one)
    assert nmt(*args, "--beam", 4, "--nbest", 2, "--threads", 1, "--precision", "fp32") == 0
    assert out.read_text(encoding="utf-8") == (old_run / "probe.nbest").read_text(encoding="utf-8")


def test_an_old_run_resumes(old_run: Path) -> None:
    run_dir = old_run / "run"
    args = ["-q", "train", "--data", old_run / "data", "--out", run_dir, "--device", "cpu", "--threads", 1]
    assert nmt(*args, "--set", "train.max_updates=205", "--set", "train.log_every_updates=5") == 0
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["update"] for r in records if r["type"] == "train"] == [205]  # went on from 200
    assert (run_dir / "checkpoints" / "checkpoint_205.pt").exists()
