"""train.half_weights: training through a bf16 copy of the model, Adam updating the fp32 weights."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from helpers import Corpus, nmt, tiny_model, train_args

from nmt_cli import checkpoint
from nmt_cli.data.batching import collate
from nmt_cli.report import MetricsLog
from nmt_cli.training.precision import HalfWeights
from nmt_cli.training.update import accumulate_gradients

CPU = torch.device("cpu")


def batch(seed: int) -> dict[str, torch.Tensor]:
    rng = np.random.default_rng(seed)
    src = [rng.integers(4, 40, int(n)) for n in rng.integers(1, 12, 16)]
    tgt = [rng.integers(4, 40, int(n)) for n in rng.integers(1, 12, 16)]
    return collate(src, tgt)


def test_the_copy_is_bf16_throughout_and_keeps_the_models_ties():
    model = tiny_model()
    half = HalfWeights(model)
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert all(
        t.dtype == torch.bfloat16
        for t in [*half.copy.parameters(), *half.copy.buffers()]
        if t.is_floating_point()
    )
    assert half.copy.src_embed.tokens.weight is half.copy.tgt_embed.tokens.weight
    torch.testing.assert_close(
        half.copy.encoder[0].ffn.linear1.weight.float(),
        model.encoder[0].ffn.linear1.weight,
        rtol=1e-2,
        atol=1e-2,
    )


def test_an_update_through_the_copy_gives_the_fp32_model_the_gradients_of_an_fp32_update():
    """bf16 throughout rounds more than autocast; the gradients must still be the fp32 ones
    within bf16's precision, and land on the fp32 model, the copy's cleared."""
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    exact = tiny_model().train()
    accumulate_gradients(exact, [batch(1), batch(2)], 0.1, "fp32", scaler, CPU)
    model = tiny_model().train()
    half = HalfWeights(model)
    loss = accumulate_gradients(half.copy, [batch(1), batch(2)], 0.1, "fp32", scaler, CPU)
    half.to_master()
    assert all(p.grad is None for p in half.copy.parameters())
    reference = accumulate_gradients(tiny_model().train(), [batch(1), batch(2)], 0.1, "fp32", scaler, CPU)
    assert abs(float(loss.sums[0]) - float(reference.sums[0])) <= 0.01 * float(reference.sums[0])
    total = sum(float(p.grad.norm()) ** 2 for p in exact.parameters()) ** 0.5
    off = (
        sum(
            float((p.grad - q.grad).norm()) ** 2
            for p, q in zip(model.parameters(), exact.parameters(), strict=True)
        )
        ** 0.5
    )
    assert all(p.grad.dtype == torch.float32 for p in model.parameters())
    assert off <= 0.05 * total


def test_the_copy_takes_the_fp32_weights_after_a_step():
    model = tiny_model()
    half = HalfWeights(model)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    half.from_master()
    for p, q in zip(model.parameters(), half.copy.parameters(), strict=True):
        torch.testing.assert_close(q, p.to(torch.bfloat16))


def test_a_half_weights_run_learns_as_autocast_does_saves_fp32_weights_and_resumes(
    corpus: Corpus, tmp_path: Path
):
    # A high, constant learning rate: the loss falls within a few updates, as the copy follows
    # the fp32 weights from update to update.
    settings = ("train.log_every_updates=1", "train.valid_every_updates=0", "train.warmup=1", "train.lr=0.01")
    runs = {}
    for name, half in (("autocast", "false"), ("half", "true")):
        out = tmp_path / name
        args = [*train_args(corpus.data, out, *settings, "train.max_updates=8", f"train.half_weights={half}")]
        assert nmt(*args, "--precision", "bf16") == 0
        runs[name] = [r["loss"] for r in MetricsLog(out / "metrics.jsonl").read() if r["type"] == "train"]
    assert len(runs["half"]) == 8
    assert runs["autocast"][-1] < 0.8 * runs["autocast"][0]
    assert np.allclose(runs["half"], runs["autocast"], rtol=0.05)
    last = checkpoint.load(tmp_path / "half" / "checkpoints" / "checkpoint_last.pt")
    assert all(t.dtype == torch.float32 for t in last.model.values() if t.is_floating_point())
    more = train_args(
        corpus.data, tmp_path / "half", *settings, "train.max_updates=10", "train.half_weights=true"
    )
    assert nmt(*more, "--precision", "bf16") == 0
    assert checkpoint.load(tmp_path / "half" / "checkpoints" / "checkpoint_last.pt").update == 10
