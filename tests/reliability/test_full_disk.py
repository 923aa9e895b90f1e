"""`nmt train` on a disk that fills up: the failed save is one line (exit 1), and the run directory
it leaves says how to go on."""

from __future__ import annotations

import resource
import subprocess
from pathlib import Path

import pytest
from helpers import Corpus, nmt, nmt_command, refused, subprocess_env, train_args

FILE_LIMIT = 200_000  # bytes: a tiny model's best checkpoint fits, a training one (with Adam) does not


def _small_files() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_LIMIT, FILE_LIMIT))  # Python ignores SIGXFSZ: EFBIG


@pytest.mark.slow  # two trainings, one as a process: about 3 s
def test_a_disk_full_at_the_first_save_leaves_a_run_that_says_how_to_start_afresh(
    corpus: Corpus, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    args = train_args(
        corpus.data,
        run_dir,
        "train.max_updates=4",
        "train.save_every_updates=2",
        "train.valid_every_updates=2",
    )
    failed = subprocess.run(
        nmt_command(*args),
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=_small_files,
    )
    assert failed.returncode == 1 and failed.stderr.count("\n") == 1, failed.stderr
    assert "cannot write (File too large)" in failed.stderr
    # Validation wrote checkpoint_best.pt and the save its numbered checkpoint (weights only) before
    # checkpoint_last.pt, which holds Adam's moments, failed: no training state to resume.
    ckpts = run_dir / "checkpoints"
    assert sorted(p.name for p in ckpts.glob("*.pt")) == ["checkpoint_2.pt", "checkpoint_best.pt"]
    line = refused(capsys, *args)
    assert "checkpoints/checkpoint_last.pt is missing" in line
    advice = f"--init-from {ckpts / 'checkpoint_2.pt'} --out NEW_DIR"
    assert advice in line
    # The advice works: a new run starts from those weights.
    new = tmp_path / "new"
    assert nmt(*train_args(corpus.data, new, "train.max_updates=2"), *advice.split()[:2]) == 0
    assert (new / "checkpoints" / "checkpoint_last.pt").is_file()
