"""Correctness of nmt's CUDA paths (tests/gpu/gpu_checks.py), marked `gpu` and skipped without
CUDA. A check whose property does not depend on the device also runs on CPU, where it is
meaningful and cheap; the CUDA cases need a GPU (`pytest -m gpu tests/gpu`, which `make
gpu-check` runs before bench/gpu_check.py's throughput steps)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from gpu_checks import (
    constraints_and_alignment,
    fp16_overflow,
    path_equivalence,
    resume_across_precisions,
    sdpa_masks,
    torchrun,
    train_steps,
    update_syncs,
)
from gpu_helpers import CUDA, Figures

ON_GPU = [
    pytest.mark.gpu,
    pytest.mark.skipif(not CUDA, reason="needs CUDA: torch.cuda.is_available() is False"),
]


def on(shows: str, check: Callable[..., Figures], *devices: str, slow_on_cpu: bool = False) -> list[Any]:
    """The cases of one check, one a device, named `<what it shows>-<device>`."""
    marks = {"cpu": [pytest.mark.slow] if slow_on_cpu else [], "cuda": ON_GPU}
    return [pytest.param(check, device, marks=marks[device], id=f"{shows}-{device}") for device in devices]


ON_DEVICE = [
    *on("updates_in_every_precision_lower_the_loss", train_steps, "cpu", "cuda"),
    *on("an_overflow_skips_the_step_and_halves_the_loss_scale", fp16_overflow, "cpu", "cuda"),
    # On CPU tests/unit/test_update_syncs.py counts the same reads back.
    *on("an_update_waits_for_nothing_on_the_device", update_syncs, "cuda"),
    *on("padding_and_later_tokens_change_nothing_through_the_attention_kernels", sdpa_masks, "cpu", "cuda"),
    *on(
        "constraints_are_met_with_teacher_forced_links_as_on_cpu",
        constraints_and_alignment,
        "cpu",
        "cuda",
        slow_on_cpu=True,
    ),
    *on("packed_and_bf16_copy_updates_match_the_padded_one", path_equivalence, "cpu", "cuda"),
]
# In child processes of the real CLI, writing under a temporary folder. On CPU, tests/cli and
# tests/unit/test_distributed.py cover resuming and gloo torchrun already, so only CUDA runs here.
IN_FOLDER = [
    *on("training_resumes_across_precisions", resume_across_precisions, "cuda"),
    *on("torchrun_trains_the_weights_one_process_trains", torchrun, "cuda"),
]


def passed(figures: Figures) -> bool:
    """Whether a check held; pytest shows the figures (and their "error") when it did not."""
    return bool(figures["ok"])


@pytest.mark.parametrize(("check", "device"), ON_DEVICE)
def test_the_check_holds(check: Callable[[torch.device], Figures], device: str) -> None:
    figures = check(torch.device(device))
    assert passed(figures), figures


@pytest.mark.parametrize(("check", "device"), IN_FOLDER)
def test_the_command_line_check_holds(
    check: Callable[[Path, torch.device], Figures], device: str, tmp_path: Path
) -> None:
    figures = check(tmp_path, torch.device(device))
    assert passed(figures), figures
