"""int8 decoding layers: a row's output is a function of that row alone, with either kernel, and
stays close to the float layer."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from nmt_cli.decoding import int8


@pytest.fixture(params=[pytest.param(True, id="fbgemm"), pytest.param(False, id="int_mm")])
def fbgemm(request: pytest.FixtureRequest) -> bool:
    """Each int8 kernel in turn: fbgemm's fused one (skipped where this torch has none), int_mm."""
    if request.param and not int8._fbgemm_works():
        pytest.skip("this torch has no fbgemm (not an x86 build)")
    return request.param


def rows_of_unlike_scales(count: int, width: int, seed: int) -> torch.Tensor:
    """Rows whose magnitudes differ by orders, some with one outlier: a scale shared by the batch
    would change every other row's rounding."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(count, width, generator=gen) * torch.logspace(-2, 2, count)[:, None]
    x[::3, 0] *= 50
    return x


@pytest.mark.parametrize("bias", [True, False])
def test_each_row_gets_what_it_gets_alone(fbgemm: bool, bias: bool) -> None:
    torch.manual_seed(0)
    linear = nn.Linear(96, 40, bias=bias)
    layer = int8.Int8Linear(linear, fbgemm)
    x = rows_of_unlike_scales(24, 96, seed=1)
    with torch.inference_mode():
        batch = layer(x)
        alone = torch.cat([layer(row[None]) for row in x])
        reordered = layer(x.flip(0)).flip(0)
        in_3d = layer(x.view(4, 6, 96)).view(24, 40)
        reference = linear(x)
    assert torch.equal(batch, alone)
    assert torch.equal(batch, reordered)
    assert torch.equal(batch, in_3d)
    error = (batch - reference).norm(dim=1) / reference.norm(dim=1)
    assert error.max() < 0.1, error.max()  # the rows with an outlier lose most: 0.05-0.06


def test_weights_are_those_of_torch_per_channel_quantization(fbgemm: bool) -> None:
    """Both kernels hold the int8 values torch.quantize_per_channel gives: rounding x / scale
    instead moves about one value in 500,000 (seeds 1 and 4 here)."""
    for seed in range(6):
        linear = nn.Linear(256, 2000, bias=False)
        with torch.no_grad():
            linear.weight.copy_(torch.randn(2000, 256, generator=torch.Generator().manual_seed(seed)))
        layer = int8.Int8Linear(linear, fbgemm)
        scales = linear.weight.abs().amax(dim=1) / 127
        zero = torch.zeros(2000, dtype=torch.long)
        expected = torch.quantize_per_channel(linear.weight.detach(), scales, zero, 0, torch.qint8).int_repr()
        if fbgemm:
            weight, layer_scales = layer._unpacked()
        else:
            weight, layer_scales = layer.weight_t.t(), layer.weight_scales
        assert torch.equal(weight, expected), f"seed {seed}: {(weight != expected).sum()} values differ"
        assert torch.equal(layer_scales.float(), scales)


def test_quantize_replaces_every_linear_layer_and_keeps_the_rest() -> None:
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Sequential(nn.LayerNorm(8), nn.Linear(8, 3)))
    x = torch.randn(5, 8)
    with torch.inference_mode():
        before = model(x)
        int8.quantize(model)
        after = model(x)
    assert [type(m).__name__ for m in model.modules()].count("Linear") == 0
    assert sum(isinstance(m, int8.Int8Linear) for m in model.modules()) == 2
    assert isinstance(model[2][0], nn.LayerNorm)
    assert torch.allclose(after, before, atol=0.05, rtol=0.05)


@pytest.mark.parametrize("bias", [True, False])
def test_rows_keep_the_chosen_outputs_unchanged(fbgemm: bool, bias: bool) -> None:
    """A shortlist's output projection: the kept channels are computed exactly as before."""
    torch.manual_seed(0)
    layer = int8.Int8Linear(nn.Linear(48, 50, bias=bias), fbgemm)
    index = torch.tensor([0, 1, 2, 3, 7, 19, 20, 44, 49])
    x = rows_of_unlike_scales(12, 48, seed=2)
    with torch.inference_mode():
        part = layer.rows(index)
        assert part.out_features == index.numel()
        assert torch.equal(part(x), layer(x)[:, index])
        assert torch.equal(layer.rows(index[2:])(x), layer(x)[:, index[2:]])  # a second cut, same layer
