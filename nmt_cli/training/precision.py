"""Mixed precision: torch.autocast (bf16 on CPU and GPU, fp16 on GPU), or a bf16 copy of the
model (`HalfWeights`) that trains in bf16 throughout while Adam keeps the fp32 weights."""

from __future__ import annotations

import contextlib
import copy

import torch
from torch import Tensor, nn


def autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    """Autocast for "bf16"/"fp16"; fp32 runs as is. Parameters stay fp32 (the master weights)."""
    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype)


class HalfWeights:
    """Training through a bf16 copy of `model` (train.half_weights): weights, activations and the
    residual stream in bf16, with no autocast. Autocast keeps the weights in fp32 and casts each
    one at every use, and keeps layer norms and the residual stream in fp32 with casts around
    them: on a GPU over a third of an update's kernels are such casts. `model` keeps the fp32
    weights, which Adam updates (the master weights, as under autocast), and which validation
    and checkpoints use: after the backward passes of an update `to_master` hands the copy's
    gradients to `model`'s parameters, and after Adam's step `from_master` copies the new
    weights back. As in fairseq's bf16 training, an update's batches accumulate their gradients
    in bf16."""

    def __init__(self, model: nn.Module) -> None:
        self.copy = copy.deepcopy(model).to(torch.bfloat16)  # tied weights stay tied
        if getattr(model, "_compiled_call_impl", None) is not None:
            # Compiled in place (`nmt train --compile`): the deep copy's compiled call would be
            # the model's own; compile the copy's.
            self.copy._compiled_call_impl = None
            self.copy.compile()
        self._master: list[Tensor] = [p for p in model.parameters() if p.requires_grad]
        self._half: list[Tensor] = [p for p in self.copy.parameters() if p.requires_grad]
        assert len(self._master) == len(self._half), "the copy has the model's parameters"

    def to_master(self) -> None:
        """The copy's gradients, in fp32, as the model's; the copy's are cleared."""
        for master, half in zip(self._master, self._half, strict=True):
            grad: Tensor | None = half.grad
            master.grad = None if grad is None else grad.float()
            half.grad = None

    @torch.no_grad()
    def from_master(self) -> None:
        """The model's weights, rounded to bf16, into the copy."""
        torch._foreach_copy_(self._half, self._master)
