"""Training through torch.compile (train.compile): batches of ever new lengths and rows compile
once, padded or packed, and train as the eager model does."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import tiny_model

from nmt_cli.data.batching import collate
from nmt_cli.training.loop import compiled
from nmt_cli.training.update import accumulate_gradients, packed, with_real_rows

CPU = torch.device("cpu")


def epoch(layout: str) -> list[dict]:
    """Six batches, each of other lengths and rows."""
    rng = np.random.default_rng(0)
    batches = []
    for i in range(6):
        rows = int(rng.integers(4, 12))
        src = [rng.integers(4, 40, int(n)) for n in rng.integers(1, 6 + 3 * i, rows)]
        tgt = [rng.integers(4, 40, int(n)) for n in rng.integers(1, 6 + 3 * i, rows)]
        batch = collate(src, tgt)
        batches.append(packed(batch) if layout == "packed" else with_real_rows(batch))
    return batches


@pytest.mark.slow  # compiles a forward and backward on CPU: about a minute each
@pytest.mark.parametrize("layout", ["padded", "packed"])
def test_an_epoch_of_new_shapes_compiles_once_and_trains_as_eager(layout):
    from torch._dynamo.utils import counters  # here: dynamo takes seconds to import, and most runs skip this

    torch._dynamo.reset()
    counters.clear()
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    batches = epoch(layout)
    model = tiny_model().train()
    net = compiled(model)
    losses = [accumulate_gradients(net, [b], 0.1, "fp32", scaler, CPU).sums for b in batches]
    assert (
        counters["stats"]["unique_graphs"] == 1
    )  # at most 3 an epoch is the budget; 1 is what dynamic shapes give
    grads = {name: p.grad.clone() for name, p in model.named_parameters()}
    eager = tiny_model().train()
    expected = [accumulate_gradients(eager, [b], 0.1, "fp32", scaler, CPU).sums for b in batches]
    torch.testing.assert_close(torch.stack(losses), torch.stack(expected), rtol=1e-4, atol=1e-4)
    for name, p in eager.named_parameters():
        torch.testing.assert_close(grads[name], p.grad, rtol=1e-3, atol=1e-5, msg=name)
