"""Correctness of nmt's CUDA paths (tests/gpu/gpu_checks.py), marked `gpu` and skipped without
CUDA. A check whose property does not depend on the device also runs on CPU, where it is
meaningful and cheap; the CUDA cases need a GPU (`pytest -m gpu tests/gpu`, which `make
gpu-check` runs before bench/gpu_check.py's throughput steps)."""

from __future__ import annotations

from pathlib import Path

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
CUDA_ONLY = pytest.param("cuda", marks=ON_GPU, id="cuda")
CPU_AND_CUDA = [pytest.param("cpu", id="cpu"), CUDA_ONLY]


def passed(figures: Figures) -> bool:
    """Whether a check held; pytest shows the figures (and their "error") when it did not."""
    return bool(figures["ok"])


@pytest.mark.parametrize("device", CPU_AND_CUDA)
def test_updates_in_every_precision_lower_the_loss(device: str) -> None:
    figures = train_steps(torch.device(device))
    assert passed(figures), figures


@pytest.mark.parametrize("device", CPU_AND_CUDA)
def test_an_overflow_skips_the_step_and_halves_the_loss_scale(device: str) -> None:
    figures = fp16_overflow(torch.device(device))
    assert passed(figures), figures


# On CPU tests/unit/test_update_syncs.py counts the same reads back.
@pytest.mark.parametrize("device", [CUDA_ONLY])
def test_an_update_waits_for_nothing_on_the_device(device: str) -> None:
    figures = update_syncs(torch.device(device))
    assert passed(figures), figures


@pytest.mark.parametrize("device", CPU_AND_CUDA)
def test_padding_and_later_tokens_change_nothing_through_the_attention_kernels(device: str) -> None:
    figures = sdpa_masks(torch.device(device))
    assert passed(figures), figures


@pytest.mark.parametrize("device", [pytest.param("cpu", marks=pytest.mark.slow, id="cpu"), CUDA_ONLY])
def test_constraints_are_met_with_teacher_forced_links_as_on_cpu(device: str) -> None:
    figures = constraints_and_alignment(torch.device(device))
    assert passed(figures), figures


@pytest.mark.parametrize("device", CPU_AND_CUDA)
def test_packed_and_bf16_copy_updates_match_the_padded_one(device: str) -> None:
    figures = path_equivalence(torch.device(device))
    assert passed(figures), figures


# In child processes of the real CLI. On CPU, tests/cli and tests/unit/test_distributed.py cover
# resuming and gloo torchrun already, so only the CUDA cases run here.
@pytest.mark.parametrize("device", [CUDA_ONLY])
def test_training_resumes_across_precisions(device: str, tmp_path: Path) -> None:
    figures = resume_across_precisions(tmp_path, torch.device(device))
    assert passed(figures), figures


@pytest.mark.parametrize("device", [CUDA_ONLY])
def test_torchrun_trains_the_weights_one_process_trains(device: str, tmp_path: Path) -> None:
    figures = torchrun(tmp_path, torch.device(device))
    assert passed(figures), figures
