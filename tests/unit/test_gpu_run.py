"""bench/gpu_run.py, `make gpu-run`: the WMT-shaped corpus it makes, its table, and its CPU dry
run end to end (slow: three `nmt` processes and the tiny steps, 15 s on two idle cores and
minutes on busy ones)."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import gpu_run  # noqa: E402


def fake_multi30k(folder: Path, lines: int = 1500) -> Path:
    """Multi30k's file names over made-up words: enough for a 500-piece vocabulary."""
    rng = random.Random(0)
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = ["".join(rng.choices(letters, k=rng.randint(2, 8))) for _ in range(600)]
    folder.mkdir(parents=True, exist_ok=True)
    for name, n in (("train", lines), ("val", 50), ("test_2016_flickr", 50)):
        sentences = [rng.choices(words, k=rng.randint(4, 20)) for _ in range(n)]
        for lang, shift in (("en", 0), ("de", 1)):
            text = "".join(" ".join(w[shift:] or w for w in s) + "\n" for s in sentences)
            (folder / f"{name}.{lang}").write_text(text, encoding="utf-8")
    return folder


def test_wmt_shaped_lines_have_wmt_lengths_and_keep_the_sides_in_proportion() -> None:
    src = [" ".join(["a"] * 10)] * 50
    tgt = [" ".join(["b"] * 12)] * 50
    out_src, out_tgt = gpu_run.wmt_shaped(src, tgt, 4000)
    words = np.array([len(line.split()) for line in out_src])
    assert 17 <= np.median(words) <= 21 and words.max() > 60  # log-normal, median 19 words
    assert all(
        len(t.split()) == max(1, round(len(s.split()) * 1.2)) for s, t in zip(out_src, out_tgt, strict=True)
    )


def test_the_table_compares_each_figure_with_its_target_and_says_why_one_is_missing() -> None:
    steps = {
        "throughput": {"base": {"mfu_real": 0.25, "mfu": 0.3, "kernels_per_update": 380}, "recipe": {
            "target_tokens_per_s": 1000}},
        "recipe": {"tokens_per_s": 960},
        "side_by_side": {"skipped": "fairseq is not importable"},
    }  # fmt: skip
    rows = {row["figure"]: row for row in gpu_run.table(steps)}
    assert rows["`nmt train` base.toml as written, one GPU: tokens/s / throughput's"]["value"] == 0.96
    assert rows["MFU on real tokens, base"]["shown"] == "0.25"
    assert rows["kernels per base update"]["target"] == "<= 400"
    assert rows["decoding sentences/s, beam 5, fairseq's model, same GPU"]["detail"].startswith(
        "skipped: fairseq"
    )
    assert rows["MFU on real tokens, big"]["detail"].startswith("not measured")
    assert rows["real / padded tokens, Multi30k lengths"]["detail"] == "not run"
    text = gpu_run.markdown(list(rows.values()), {"gpu": None, "torch": "x", "seconds": 1})
    assert text.count("\n|") == len(rows) + 2  # the header, its rule, a line a figure


@pytest.mark.slow
def test_the_dry_run_runs_every_step_on_cpu(tmp_path: Path) -> None:
    data = fake_multi30k(tmp_path / "multi30k")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "gpu_run.py"), "--dry-run", "--data", str(data),
         "--out", str(tmp_path / "out"), "--work", str(tmp_path / "work")],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((tmp_path / "out" / "gpu_run.json").read_text(encoding="utf-8"))
    assert report["dry_run"] and report["ok"]
    steps = report["steps"]
    assert set(steps) == {"corpora", "throughput", "recipe", "padding", "side_by_side", "paths", "batch_fit"}
    assert {"base", "recipe"} <= set(steps["throughput"])
    assert steps["recipe"]["records"] >= 1 and 0 < steps["padding"]["wmt"] <= 1
    values = [row["value"] for row in report["rows"]]
    assert sum(v is not None for v in values) >= 5  # all but fairseq's (not installed), big's and the CPU's
    assert (tmp_path / "out" / "gpu_run.md").read_text(encoding="utf-8").startswith("CPU dry run")
