"""`train.compile = true` trains through torch.compile of the model: the same updates as the
eager model, and checkpoints that load and translate as any other (compiled here on CPU, where
inductor generates C++; the GPU path differs only in its code generator)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import Corpus, nmt, train_args

from nmt_cli import checkpoint
from nmt_cli.report import MetricsLog

COMMON = (
    "train.max_updates=3",
    "train.log_every_updates=1",
    "train.valid_every_updates=0",
    "train.save_every_updates=0",
    "train.max_tokens=256",
    # Adam divides by sqrt(v) + eps: with the default eps a gradient that is zero but for rounding
    # (the key bias: softmax ignores a constant) takes a full step of noise, different per kernel.
    "train.adam_eps=1e-3",
)


@pytest.mark.slow  # torch.compile's C++ code generation: 4 s and more
def test_compiled_training_takes_the_updates_of_the_eager_model(corpus: Corpus, tmp_path: Path) -> None:
    from torch._dynamo.utils import counters  # here: dynamo takes seconds to import, and most runs skip this

    runs = {}
    graphs_before = counters["stats"]["unique_graphs"]
    for compiled in (False, True):
        run_dir = tmp_path / f"compile_{compiled}"
        sets = (
            *COMMON,
            "model.dropout=0.0",
            f"train.compile={str(compiled).lower()}",
            "train.pad_to_multiple=8",
        )
        assert nmt(*train_args(corpus.data, run_dir, *sets)) == 0
        runs[compiled] = run_dir
    eager, compiled = (checkpoint.load(runs[c] / "checkpoints" / "checkpoint_last.pt") for c in (False, True))
    assert compiled.update == eager.update == 3
    assert compiled.model.keys() == eager.model.keys(), "the checkpoint holds the model's own names"
    for name, weight in eager.model.items():
        torch.testing.assert_close(compiled.model[name], weight, rtol=1e-4, atol=1e-5, msg=name)
    losses = {
        c: [r["loss"] for r in MetricsLog(runs[c] / "metrics.jsonl").read() if r["type"] == "train"]
        for c in runs
    }
    assert len(losses[True]) == 3
    for a, b in zip(losses[True], losses[False], strict=True):
        assert abs(a - b) <= 1e-4 * abs(b)
    assert counters["stats"]["unique_graphs"] > graphs_before, "the compiled run went through dynamo"
