"""The embedded demo, shortened: prepare -> train -> average -> translate -> score on the
synthetic English-German number corpus, end to end in about a minute on one CPU thread.

200 updates of the demo model score BLEU 26.4 / chrF 62.2 here (deterministic for a given
machine and thread count; 150 updates give 9.3, 1000 give 98); the thresholds leave room for
other CPUs' bf16 arithmetic while still failing if the model does not learn.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers import one_thread

from nmt_cli import checkpoint
from nmt_cli.demo import main as demo

UPDATES = 200
TRAIN_SIZE = 3000
TEST_SIZE = 500  # fixed by the demo
MIN_BLEU = 15.0
MIN_CHRF = 45.0


@pytest.mark.slow  # about 45 s
def test_the_shortened_demo_learns_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # The demo uses torch's default thread count; one thread is faster on two shared cores.
    with one_thread():
        code = demo(
            ["--out", str(tmp_path), "--updates", str(UPDATES), "--train-size", str(TRAIN_SIZE), "--quiet"]
        )
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "Traceback" not in err

    for split in ("train", "valid", "test"):
        for lang in ("en", "de"):
            assert (tmp_path / "corpus" / f"{split}.{lang}").is_file()
    assert (tmp_path / "data" / "meta.json").is_file()
    run = tmp_path / "run"
    for name in ("config.toml", "metrics.jsonl", "checkpoints/checkpoint_last.pt"):
        assert (run / name).is_file(), name
    last = checkpoint.load(run / "checkpoints" / "checkpoint_last.pt")
    assert last.update == UPDATES
    averaged = checkpoint.load(tmp_path / "average.pt")
    assert averaged.train_state is None and "optimizer" not in averaged.to_dict()
    assert averaged.averaged_from is not None and averaged.averaged_from[-1]["update"] == UPDATES
    hyps = (tmp_path / "test.hyp.de").read_text(encoding="utf-8").splitlines()
    assert len(hyps) == TEST_SIZE
    assert sum(bool(h.strip()) for h in hyps) > 0.95 * TEST_SIZE

    bleu = re.search(r"^BLEU = (\d+\.\d+) .*\[sacreBLEU: ", out, re.MULTILINE)
    chrf = re.search(r"^chrF2 = (\d+\.\d+) ", out, re.MULTILINE)
    assert bleu and chrf, out
    assert float(bleu.group(1)) >= MIN_BLEU, out
    assert float(chrf.group(1)) >= MIN_CHRF, out
