"""The one mixed-precision mechanism: torch.autocast (bf16 on CPU and GPU, fp16 on GPU)."""

from __future__ import annotations

import contextlib

import torch


def autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    """Autocast for "bf16"/"fp16"; fp32 runs as is. Parameters stay fp32 (the master weights)."""
    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype)
