"""int8 linear layers whose output for a row depends on that row alone.

Weights are quantized once, with one scale per output channel; activations at every call, with
one scale per row. The integer products are exact, so a sentence's int8 translation does not
depend on the sentences decoded beside it: `--batch-tokens`, `--buffer-size`, `--workers`, the
server's merging of requests and a sampled line's draws give the same output as the line decoded
alone. (torch's dynamic quantization has one activation scale for the whole batch, which makes
every line depend on the longest-tailed row of its batch.)

Two kernels, the same rule: on x86, fbgemm's prepacked int8 GEMM, fed rows already divided by
their own absolute maximum so that one fixed scale fits every row; elsewhere, `torch._int_mm` on
rows quantized here.
"""

from __future__ import annotations

import contextlib
import functools
import warnings
from collections.abc import Iterator

import torch
from torch import nn

# fbgemm takes unsigned 7-bit activations (x86 cannot add two u8 x s8 products into int16
# without saturating 8-bit ones): rows scaled into [-1, 1] become 1..127 around 64.
_FBGEMM_LEVELS = 63


class Int8Linear(nn.Module):
    """`linear` with int8 weights per output channel and int8 activations per row."""

    def __init__(self, linear: nn.Linear, fbgemm: bool) -> None:
        super().__init__()
        weight, scales = _per_channel(linear.weight.detach().float())
        self.out_features = weight.shape[0]
        self.bias = None if linear.bias is None else linear.bias.detach().float().clone()
        self.packed = _fbgemm_pack(weight, scales) if fbgemm else None
        if self.packed is None:
            # (in, out) for _int_mm, and the channel scales to restore float outputs
            self.weight_t = weight.t().contiguous()
            self.weight_scales = scales

    def rows(self, index: torch.Tensor) -> Int8Linear:
        """The layer restricted to output channels `index`, in that order (a vocabulary shortlist's
        output projection); the same int8 weights and scales, so each kept output is unchanged."""
        part = Int8Linear.__new__(Int8Linear)
        nn.Module.__init__(part)
        part.out_features = index.numel()
        part.bias = None if self.bias is None else self.bias.index_select(0, index)
        part.packed = None
        if self.packed is not None:
            weight, scales = self._unpacked()
            kept = torch._make_per_channel_quantized_tensor(
                weight.index_select(0, index), scales.index_select(0, index), self._zeros[: index.numel()], 0
            )
            with _engine("fbgemm"):
                part.packed = torch.ops.quantized.linear_prepack(kept, None)
        else:
            part.weight_t = self.weight_t.index_select(1, index)
            part.weight_scales = self.weight_scales.index_select(0, index)
        return part

    @functools.cached_property
    def _zeros(self) -> torch.Tensor:
        return torch.zeros(self.out_features, dtype=torch.long)

    def _unpacked(self) -> tuple[torch.Tensor, torch.Tensor]:
        """fbgemm's int8 weights and channel scales, unpacked once: only a layer that `rows` is
        called on (the output projection) keeps this second copy."""
        if not hasattr(self, "_int8"):
            qweight, _ = torch.ops.quantized.linear_unpack(self.packed)
            self._int8 = (qweight.int_repr(), qweight.q_per_channel_scales())
        return self._int8

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, x.shape[-1])
        amax = rows.abs().amax(dim=1, keepdim=True).clamp_min_(1e-30)
        if self.packed is not None:
            y = _fbgemm_linear(rows / amax, 1.0 / _FBGEMM_LEVELS, _FBGEMM_LEVELS + 1, self.packed)
        else:
            quantized = (rows * (127 / amax)).round_().to(torch.int8)
            y = torch._int_mm(quantized, self.weight_t) * self.weight_scales
            amax = amax / 127
        # The row's scale back, and the bias, in one pass over the output.
        y = y.mul_(amax) if self.bias is None else torch.addcmul(self.bias, y, amax)
        return y.reshape(*x.shape[:-1], self.out_features)


def quantize(model: nn.Module) -> nn.Module:
    """`model` with every `nn.Linear` replaced by an `Int8Linear` (in place; returned for chaining)."""
    fbgemm = _fbgemm_works()
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Linear:
                setattr(parent, name, Int8Linear(child, fbgemm))
    return model


def _fbgemm_works() -> bool:
    """Whether this torch has fbgemm and the fused kernel (x86 builds; quantized tensors are
    deprecated, so a later torch may not)."""
    if "fbgemm" not in torch.backends.quantized.supported_engines:
        return False
    try:
        _fbgemm_linear(torch.zeros(1, 1), 1.0, 0, _fbgemm_pack(*_per_channel(torch.ones(1, 1))))
    except (AttributeError, RuntimeError, NotImplementedError):
        return False
    return True


def _fbgemm_linear(
    x: torch.Tensor, scale: float, zero_point: int, packed: torch.ScriptObject
) -> torch.Tensor:
    return torch.ops.quantized.linear_with_input_q_dq_qweight_dq_output_fp32(x, scale, zero_point, packed)


def _fbgemm_pack(weight: torch.Tensor, scales: torch.Tensor) -> torch.ScriptObject:
    """fbgemm's packed form of int8 `weight` with its channel `scales` (`_per_channel`)."""
    with _engine("fbgemm"), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # quantized tensors' deprecation notice: fbgemm still takes them
        zero = torch.zeros_like(scales, dtype=torch.long)
        qweight = torch._make_per_channel_quantized_tensor(weight, scales.double(), zero, 0)
        return torch.ops.quantized.linear_prepack(qweight, None)


QUANTIZE_ROWS = 1024


def _per_channel(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`weight` (out, in) in int8 at one scale per output channel, and those scales: the values
    torch.quantize_per_channel gives (times the scale's float32 reciprocal, rounded half to even).
    Done at every start, so in blocks of rows whose temporaries stay in the core's cache: for a
    32,000-piece output projection, 3.6 against 30.9 ms for torch's scales and quantization."""
    int8 = torch.empty(weight.shape, dtype=torch.int8)
    scales = torch.empty(weight.shape[0])
    for first in range(0, weight.shape[0], QUANTIZE_ROWS):
        block = weight[first : first + QUANTIZE_ROWS]
        scale = torch.div(
            block.abs().amax(dim=1).clamp_min_(1e-12), 127, out=scales[first : first + QUANTIZE_ROWS]
        )
        int8[first : first + QUANTIZE_ROWS] = block.mul(scale.reciprocal().unsqueeze(1)).round_()
    return int8, scales


@contextlib.contextmanager
def _engine(name: str) -> Iterator[None]:
    """torch's quantized engine set to `name` while packing, so the packed weights are fbgemm's
    whatever the process default is."""
    before = torch.backends.quantized.engine
    torch.backends.quantized.engine = name
    try:
        yield
    finally:
        torch.backends.quantized.engine = before
