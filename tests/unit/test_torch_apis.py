"""The torch that nmt needs: the lower bound in pyproject.toml holds, and every private torch API
nmt calls is still there. Where one is gone, nmt falls back quietly (a slower int8 kernel, fp32
training where bf16 would be faster); this test names it and what depends on it instead."""

from __future__ import annotations

import operator
import platform
import re
import tomllib
from pathlib import Path

import pytest
import torch

from nmt_cli import device
from nmt_cli.decoding import int8

ROOT = Path(__file__).resolve().parents[2]

PRIVATE = {
    "torch._int_mm": "int8 decoding where fbgemm is missing (decoding/int8.py)",
    "torch._make_per_channel_quantized_tensor": "int8 decoding through fbgemm (decoding/int8.py)",
    "torch.ops.quantized.linear_prepack": "int8 decoding through fbgemm (decoding/int8.py)",
    "torch.ops.quantized.linear_unpack": "int8 checkpoints' weights read back (decoding/int8.py)",
    "torch.ops.quantized.linear_with_input_q_dq_qweight_dq_output_fp32": "int8 decoding through fbgemm",
    "torch.cpu._is_avx512_bf16_supported": "the CPU's bf16 probe: bf16 or fp32 training (device.py)",
    "torch.cpu._is_amx_tile_supported": "the CPU's AMX probe (device.py)",
}


@pytest.mark.parametrize("name", sorted(PRIVATE))
def test_each_private_torch_api_nmt_calls_is_there(name: str) -> None:
    try:
        found = operator.attrgetter(name.removeprefix("torch."))(torch)
    except (AttributeError, RuntimeError) as err:
        pytest.fail(f"torch {torch.__version__} has no {name}, which {PRIVATE[name]} calls: {err}")
    assert callable(found), f"{name} is no longer callable; {PRIVATE[name]} calls it"


def test_the_private_apis_give_what_nmt_reads_from_them() -> None:
    a = torch.tensor([[1, -2], [3, 4]] * 9, dtype=torch.int8)  # _int_mm wants more than 16 rows
    b = torch.tensor([[5, 6], [-7, 8]], dtype=torch.int8)
    product = torch._int_mm(a, b)
    assert product.dtype == torch.int32 and product[:2].tolist() == [[19, -10], [-13, 50]]
    assert isinstance(device.cpu_has_amx(), bool)
    assert isinstance(device.cpu_has_fast_bf16(), bool)


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="fbgemm is in x86 builds only")
def test_fbgemm_int8_works_on_x86() -> None:
    assert int8._fbgemm_works(), f"torch {torch.__version__}: fbgemm's int8 linear failed its probe"


def test_the_torch_lower_bound_is_met_and_its_reason_is_there() -> None:
    spec = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["dependencies"]
    (bound,) = [d.removeprefix("torch>=") for d in spec if d.startswith("torch")]
    need = tuple(int(x) for x in bound.split("."))
    found = re.match(r"(\d+)\.(\d+)", torch.__version__)
    assert found is not None, f"torch's version {torch.__version__!r} is not MAJOR.MINOR..."
    have = tuple(int(x) for x in found.groups())
    assert have >= need[:2], f"torch {torch.__version__} is older than pyproject.toml's torch>={bound}"
    # What sets the bound (2.6): the training update's norm and clipping, the fairseq import.
    assert callable(torch.nn.utils.get_total_norm) and callable(torch.nn.utils.clip_grads_with_norm_)
    assert callable(torch.serialization.safe_globals)
