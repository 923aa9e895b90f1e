"""Packed batches (train.packed): the sentences end to end, attention kept to each sentence. On
CPU attention goes through the padded layout (the stand-in for CUDA's variable-length kernel),
so packed outputs and gradients must equal a padded batch's."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import VARIANTS, Corpus, nmt, tiny_model, train_args

from nmt_cli.data.batching import collate
from nmt_cli.model.packing import Packing, packing_supported
from nmt_cli.report import MetricsLog
from nmt_cli.special_ids import PAD_ID
from nmt_cli.training.update import accumulate_gradients, packed, with_real_rows

CPU = torch.device("cpu")
PACKABLE = {name: v for name, v in VARIANTS.items() if name in ("post", "pre")} | {
    "learned-positions": {"positions": "learned"},
    "own-projection": {"share_embeddings": False, "output_bias": True},
}


def ragged_batch(seed: int = 0, rows: int = 7, start_id: int | None = None) -> dict[str, torch.Tensor]:
    rng = np.random.default_rng(seed)
    src = [rng.integers(4, 40, int(n)) for n in rng.integers(1, 11, rows)]
    tgt = [rng.integers(4, 40, int(n)) for n in rng.integers(0, 11, rows)]  # an empty target too
    return collate(src, tgt) if start_id is None else collate(src, tgt, start_id=start_id)


def test_a_packing_knows_each_tokens_sentence_position_and_padded_place():
    packing = Packing.of([3, 1, 2])
    assert packing.offsets.tolist() == [0, 3, 4, 6] and packing.offsets.dtype == torch.int32
    assert packing.positions.tolist() == [0, 1, 2, 0, 0, 1]
    assert packing.slots.tolist() == [0, 1, 2, 3, 6, 7]  # rows of 3 slots
    x = torch.arange(6.0).view(6, 1, 1).expand(6, 2, 4).contiguous()
    padded = packing.padded(x)
    assert padded.shape == (3, 2, 3, 4)
    assert padded[1, :, 1:].abs().sum() == 0  # padding is zero
    torch.testing.assert_close(packing.packed(padded), x)
    assert packing.key_mask()[:, 0, 0].tolist() == [[True] * 3, [True, False, False], [True, True, False]]


def test_a_packed_batch_holds_the_real_tokens_of_the_padded_one_in_order():
    batch = ragged_batch()
    bag = packed(batch)
    real = with_real_rows(batch)
    assert torch.equal(bag["target"], real["target"])
    assert torch.equal(bag["src"], batch["src"][batch["src"] != PAD_ID])
    sources, targets = bag["packing"]
    assert sources.offsets[-1] == len(bag["src"]) and targets.offsets[-1] == len(bag["target"])


def test_a_decoder_that_starts_from_the_pad_id_is_packed_by_its_targets_lengths():
    """Imported Marian models start the decoder with <pad>: tgt_in's first token is the pad id."""
    bag = packed(ragged_batch(start_id=PAD_ID))
    assert len(bag["tgt_in"]) == len(bag["target"])
    assert bag["tgt_in"][bag["packing"][1].offsets[:-1].long()].eq(PAD_ID).all()


@pytest.mark.parametrize("variant", PACKABLE)
def test_packed_outputs_equal_the_padded_batchs_real_positions(variant):
    model = tiny_model(**PACKABLE[variant])
    batch = with_real_rows(ragged_batch())
    bag = packed(batch)
    with torch.no_grad():
        expected = model(batch["src"], batch["tgt_in"], rows=batch["rows"])
        got = model(bag["src"], bag["tgt_in"], packing=bag["packing"])
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("variant", PACKABLE)
def test_a_packed_update_has_the_padded_updates_loss_and_gradients(variant, precision):
    batches = [ragged_batch(seed) for seed in (1, 2)]
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    grads, losses = [], []
    for bags in (batches, [packed(b) for b in batches]):
        model = tiny_model(**PACKABLE[variant]).train()
        losses.append(accumulate_gradients(model, bags, 0.1, precision, scaler, CPU).sums)
        grads.append({name: p.grad for name, p in model.named_parameters()})
    close = {"rtol": 1e-4, "atol": 1e-6} if precision == "fp32" else {"rtol": 2e-2, "atol": 2e-3}
    torch.testing.assert_close(losses[1], losses[0], **close)
    for name, expected in grads[0].items():
        if precision == "fp32":
            torch.testing.assert_close(grads[1][name], expected, **close, msg=name)
        else:  # bf16 rounds each way differently: as close as the norms of the gradients show
            assert float((grads[1][name] - expected).norm()) <= 0.02 * float(expected.norm()) + 1e-4, name


def test_models_with_realformer_scores_or_windows_are_not_packed():
    assert packing_supported(tiny_model().cfg)
    assert not packing_supported(tiny_model(residual_attention=True).cfg)
    assert not packing_supported(tiny_model(attention_window=2).cfg)


def test_training_on_packed_batches_follows_the_padded_run(corpus: Corpus, tmp_path: Path):
    losses = []
    for packed_batches in ("false", "true"):
        out = tmp_path / packed_batches
        settings = ("train.max_updates=3", "train.log_every_updates=1", "train.valid_every_updates=0")
        assert nmt(*train_args(corpus.data, out, *settings, f"train.packed={packed_batches}")) == 0
        records = MetricsLog(out / "metrics.jsonl").read()
        losses.append([r["loss"] for r in records if r["type"] == "train"])
    assert len(losses[0]) == 3
    assert losses[1] == pytest.approx(losses[0], rel=1e-4)


def test_training_refuses_packed_batches_for_a_model_that_needs_padding(
    corpus: Corpus, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = train_args(corpus.data, tmp_path / "run", "train.packed=true", "model.attention_window=2")
    assert nmt(*args) == 2
    assert "train.packed" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()
