"""Training's loss: the projection and label-smoothed cross entropy made chunk by chunk, against
the logits of the whole batch scored by `label_smoothed_nll` (itself tested against a dense
reference in test_training.py), and the model's real target rows."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from helpers import tiny_model
from torch.utils._python_dispatch import TorchDispatchMode

from nmt_cli.data.batching import collate
from nmt_cli.model import Transformer
from nmt_cli.special_ids import EOS_ID, PAD_ID
from nmt_cli.training.loss import label_smoothed_nll, linear_label_smoothed_nll
from nmt_cli.training.precision import autocast
from nmt_cli.training.update import accumulate_gradients, with_real_rows

CPU = torch.device("cpu")


def projection(rows: int, d: int, vocab: int, bias: bool, seed: int = 0) -> list[torch.Tensor | None]:
    generator = torch.Generator().manual_seed(seed)
    hidden = torch.randn(rows, d, generator=generator).requires_grad_()
    weight = (torch.randn(vocab, d, generator=generator) / d**0.5).requires_grad_()
    b = torch.randn(vocab, generator=generator).requires_grad_() if bias else None
    return [hidden, weight, b]


def by_logits(tensors: list, target: torch.Tensor, epsilon: float) -> tuple[torch.Tensor, torch.Tensor, list]:
    """The loss of the whole batch's logits and the gradients of hidden, weight and bias."""
    hidden, weight, bias = (t.detach().clone().requires_grad_() if t is not None else None for t in tensors)
    logits = F.linear(hidden, weight, bias)  # as the model projects: under autocast, all in its dtype
    loss, nll = label_smoothed_nll(logits, target, epsilon)
    (3.0 * loss).backward()
    return loss, nll, [t.grad if t is not None else None for t in (hidden, weight, bias)]


@pytest.mark.parametrize("chunk", [1 << 22, 100, 1])  # one chunk; several; one row a chunk
@pytest.mark.parametrize("bias", [False, True])
def test_the_chunked_projection_and_loss_equal_those_of_the_whole_logits(monkeypatch, chunk, bias):
    monkeypatch.setattr("nmt_cli.training.loss.CHUNK_ELEMENTS", chunk)
    tensors = projection(23, 16, 37, bias)
    target = torch.randint(1, 37, (23,), generator=torch.Generator().manual_seed(1))
    target[[3, 11, 12]] = PAD_ID  # padding rows add nothing and get no gradient
    expected_loss, expected_nll, expected_grads = by_logits(tensors, target, 0.1)
    loss, nll = linear_label_smoothed_nll(*tensors, target, 0.1)
    (3.0 * loss).backward()
    torch.testing.assert_close(loss, expected_loss)
    torch.testing.assert_close(nll, expected_nll)
    for tensor, expected in zip(tensors, expected_grads, strict=True):
        if tensor is not None:
            torch.testing.assert_close(tensor.grad, expected)
    assert tensors[0].grad[[3, 11, 12]].abs().max() == 0


def test_under_bf16_autocast_the_chunked_loss_is_no_further_from_fp32_than_the_whole_logits():
    """bf16 rounds both ways of computing it; the chunked one must not add error of its own: its
    loss equals the whole logits' within 1e-3, and its gradients are as close to fp32's."""
    tensors = projection(200, 64, 500, bias=True)
    target = torch.randint(1, 500, (200,), generator=torch.Generator().manual_seed(2))
    exact_loss, _, exact = by_logits(tensors, target, 0.1)
    with autocast(CPU, "bf16"):
        whole_loss, _, whole = by_logits(tensors, target, 0.1)
        loss, _ = linear_label_smoothed_nll(*tensors, target, 0.1)
    (3.0 * loss).backward()
    assert abs(loss.item() - whole_loss.item()) <= 1e-3 * whole_loss.item()
    assert abs(loss.item() - exact_loss.item()) <= 1e-2 * exact_loss.item()
    for tensor, reference, rounded in zip(tensors, exact, whole, strict=True):
        assert tensor.grad.dtype == torch.float32
        error = float((tensor.grad - reference).norm() / reference.norm())
        assert error <= 1.25 * float((rounded - reference).norm() / reference.norm()) + 1e-4


def old_update_gradients(model: Transformer, batch: dict, precision: str) -> dict[str, torch.Tensor]:
    """Gradients of one update as training made them before: the logits of every position."""
    with autocast(CPU, precision):
        logits = model(batch["src"], batch["tgt_in"])
    loss, _ = label_smoothed_nll(logits, batch["tgt_out"], 0.1)
    (loss / int((batch["tgt_out"] != PAD_ID).sum())).backward()
    return {name: p.grad for name, p in model.named_parameters()}


@pytest.mark.parametrize(
    "overrides",
    [{}, {"share_embeddings": False}, {"output_bias": True}, {"norm": "pre", "joint_vocab": False}],
    ids=["tied", "own-projection", "output-bias", "pre-norm"],
)
def test_an_update_scoring_real_rows_only_has_the_gradients_of_one_scoring_every_position(overrides):
    rng = np.random.default_rng(0)
    src = [rng.integers(4, 40, int(n)) for n in rng.integers(1, 12, 9)]
    tgt = [rng.integers(4, 40, int(n)) for n in rng.integers(1, 12, 9)]
    batch = collate(src, tgt, multiple=8)  # plenty of padding
    new = tiny_model(**overrides).train()
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    accumulate_gradients(new, [batch], 0.1, "fp32", scaler, CPU)
    old = tiny_model(**overrides).train()
    expected = old_update_gradients(old, batch, "fp32")
    for name, p in new.named_parameters():
        torch.testing.assert_close(p.grad, expected[name], rtol=1e-4, atol=1e-6, msg=name)


def test_the_real_rows_of_a_batch_are_its_non_padding_targets_in_order():
    batch = with_real_rows(collate([np.array([5, 6])] * 2, [np.array([7, 8, 9]), np.array([10])]))
    # tgt_out is [[7, 8, 9, EOS], [10, EOS, PAD, PAD]]: flat positions 0-3 and 4-5 are real.
    assert batch["rows"].tolist() == [0, 1, 2, 3, 4, 5]
    assert batch["target"].tolist() == [7, 8, 9, EOS_ID, 10, EOS_ID]


def test_the_model_keeps_the_rows_asked_for_and_projects_with_its_output_layer():
    model = tiny_model(output_bias=True, share_embeddings=False)
    with torch.no_grad():
        model.output_bias.normal_()
    src, tgt_in = torch.randint(4, 40, (3, 7)), torch.randint(4, 40, (3, 5))
    rows = torch.tensor([0, 4, 6, 14])
    logits = model(src, tgt_in)
    torch.testing.assert_close(model(src, tgt_in, rows=rows), logits.reshape(15, -1)[rows])
    hidden = model(src, tgt_in, rows=rows, project=False)
    weight, bias = model.output_layer()
    torch.testing.assert_close(hidden @ weight.T + bias, logits.reshape(15, -1)[rows])


class MatmulRows(TorchDispatchMode):
    """The row counts of the matrix products dispatched while active."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: set[int] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in (torch.ops.aten.mm.default, torch.ops.aten.mm.out, torch.ops.aten.addmm.default):
            first = args[1] if func is torch.ops.aten.addmm.default else args[0]
            self.rows.add(first.shape[0])
        return func(*args, **(kwargs or {}))


def test_on_cpu_the_projection_multiplies_a_few_row_counts_whatever_the_batch():
    """oneDNN compiles a kernel for every new row count (milliseconds, more than the product
    itself), so the chunks' rows are multiples of 64, the last one padded: 40 batch sizes make
    at most 9 row counts, not 40, and the padding changes neither loss nor gradients."""
    tensors = projection(700, 16, 4000, bias=True)
    target = torch.randint(1, 4000, (700,), generator=torch.Generator().manual_seed(3))
    seen = MatmulRows()
    with seen:
        for n in range(660, 700):
            loss, _ = linear_label_smoothed_nll(tensors[0][:n], tensors[1], tensors[2], target[:n], 0.1)
            loss.backward()
    counts = {rows for rows in seen.rows if rows != 4000}  # the weight gradient's product
    assert all(rows % 64 == 0 for rows in counts), sorted(counts)
    assert len(counts) <= 9, sorted(counts)
    some = [tensors[0][:683].detach(), *tensors[1:]]  # 683 rows: a chunk padded by 21
    expected_loss, _, expected_grads = by_logits(some, target[:683], 0.1)
    padded = [t.detach().clone().requires_grad_() for t in some]
    loss, _ = linear_label_smoothed_nll(*padded, target[:683], 0.1)
    (3.0 * loss).backward()
    torch.testing.assert_close(loss, expected_loss)
    for tensor, expected in zip(padded, expected_grads, strict=True):
        torch.testing.assert_close(tensor.grad, expected)


@pytest.mark.slow  # compiles (about half a minute on two cores)
def test_the_fused_chunk_loss_equals_the_eager_one():
    tensors = projection(50, 16, 300, bias=True)
    target = torch.randint(0, 300, (50,), generator=torch.Generator().manual_seed(3))
    loss, nll = linear_label_smoothed_nll(*tensors, target, 0.1, fused=True)
    loss.backward()
    fused = [t.grad for t in tensors]
    expected_loss, expected_nll, _ = by_logits(tensors, target, 0.1)
    eager = [t.detach().clone().requires_grad_() for t in tensors]
    eager_loss, eager_nll = linear_label_smoothed_nll(*eager, target, 0.1, fused=False)
    eager_loss.backward()
    torch.testing.assert_close(loss, eager_loss)
    torch.testing.assert_close(nll, eager_nll)
    torch.testing.assert_close(loss, expected_loss)
    for got, tensor in zip(fused, eager, strict=True):
        torch.testing.assert_close(got, tensor.grad)
    # A second length of chunk reuses the compiled kernel (dynamic shapes) and is still exact.
    short = [t[:17].detach() if i == 0 else t.detach() for i, t in enumerate(tensors)]
    again, _ = linear_label_smoothed_nll(*short, target[:17], 0.1, fused=True)
    torch.testing.assert_close(again, linear_label_smoothed_nll(*short, target[:17], 0.1, fused=False)[0])
