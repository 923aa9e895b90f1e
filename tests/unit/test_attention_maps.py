"""Transformer.cross_attention, the probabilities behind `nmt attend`: they sum to 1 over the real
source positions, they are the ones the model attends with (the layer's output is rebuilt from
them), and drawing them labels every cell with its pieces."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import VARIANTS, tiny_model

from nmt_cli.special_ids import BOS_ID, PAD_ID

VOCAB = 40
HEADS = 4


def padded_batch() -> tuple[torch.Tensor, torch.Tensor]:
    """src (2, 9) whose second row ends in 3 pads; tgt_in (2, 6) starting with BOS."""
    g = torch.Generator().manual_seed(1)
    src = torch.randint(4, VOCAB, (2, 9), generator=g)
    src[1, 6:] = PAD_ID
    tgt = torch.randint(4, VOCAB, (2, 6), generator=g)
    tgt[:, 0] = BOS_ID
    return src, tgt


@pytest.mark.parametrize("layer", [0, 1, -1])
@pytest.mark.parametrize("variant", VARIANTS)
def test_weights_sum_to_one_over_the_real_source_at_every_target_position(variant: str, layer: int) -> None:
    model = tiny_model(decoder_layers=3, **VARIANTS[variant])
    src, tgt = padded_batch()
    with torch.no_grad():
        weights = model.cross_attention(src, tgt, layer)
    assert weights.shape == (2, HEADS, 6, 9)  # (B, h, T, S)
    assert bool((weights >= 0).all())
    torch.testing.assert_close(weights.sum(dim=-1), torch.ones(2, HEADS, 6), rtol=0, atol=1e-5)
    assert float(weights[1, :, :, 6:].abs().max()) == 0.0  # padding gets nothing


@pytest.mark.parametrize("layer", [0, 2])
@pytest.mark.parametrize("variant", VARIANTS)
def test_weights_are_the_ones_the_model_attends_with(variant: str, layer: int) -> None:
    """softmax(QK^T/sqrt(d_k)) V W^O from the returned weights equals the cross-attention
    sub-layer's output in the model's own forward pass (SDPA, or RealFormer's explicit path)."""
    model = tiny_model(decoder_layers=3, **VARIANTS[variant])
    src, tgt = padded_batch()
    attn = model.decoder[layer].cross_attn
    seen: list[torch.Tensor] = []
    handle = attn.register_forward_hook(lambda module, args, out: seen.append(out[0]))
    try:
        with torch.no_grad():
            model(src, tgt)
            weights = model.cross_attention(src, tgt, layer)  # (B, h, T, S)
            memory, _ = model.encode(src)
            heads = weights @ attn.project_kv(memory).v  # (B, h, T, d_v)
            rebuilt = attn.out_proj(heads.transpose(1, 2).reshape(2, 6, HEADS * 8))  # (B, T, d_model)
    finally:
        handle.remove()
    assert len(seen) == 2  # the forward pass, then cross_attention's own
    torch.testing.assert_close(rebuilt, seen[0], rtol=1e-5, atol=1e-5)


def test_capturing_attention_leaves_the_model_and_its_outputs_unchanged() -> None:
    model = tiny_model(decoder_layers=3)
    src, tgt = padded_batch()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        logits = model(src, tgt)
        model.cross_attention(src, tgt)
        again = model(src, tgt)
    torch.testing.assert_close(again, logits, rtol=0, atol=0)
    for name, value in model.state_dict().items():
        assert torch.equal(value, before[name]), name


def test_a_layer_the_model_does_not_have_is_refused() -> None:
    model = tiny_model(decoder_layers=3)
    src, tgt = padded_batch()
    with pytest.raises(IndexError):
        model.cross_attention(src, tgt, 3)


def test_the_picture_labels_rows_with_target_and_columns_with_source_pieces() -> None:
    pytest.importorskip("matplotlib")
    from nmt_cli.commands.attend import attention_figure

    src_pieces, tgt_pieces = ["▁Ein", "▁Hund", "▁läuft", ".", "</s>"], ["▁A", "▁dog", "▁runs", "</s>"]
    weights = np.full((4, 5), 0.2)
    short = attention_figure(weights, src_pieces, tgt_pieces, "layer 3 of 3, mean of 4 heads")
    ax = short.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == src_pieces
    assert [t.get_text() for t in ax.get_yticklabels()] == tgt_pieces
    assert ax.get_xlabel() == "source pieces" and ax.get_ylabel() == "target pieces (best hypothesis)"
    assert ax.images[0].get_array().shape == (4, 5)
    long = attention_figure(np.full((20, 30), 1 / 30), ["x"] * 30, ["y"] * 20, "")
    assert all(long.get_size_inches() > short.get_size_inches())  # one cell per piece
