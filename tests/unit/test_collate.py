"""`collate` pads a whole batch at once; each tensor must equal the one a plain row-by-row
padding gives, whatever the row lengths (empty rows included), the multiple and the start id."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from nmt_cli.data.batching import collate
from nmt_cli.special_ids import BOS_ID, EOS_ID, PAD_ID


def padded_row_by_row(rows: list[list[int]], multiple: int) -> torch.Tensor:
    width = max(len(row) for row in rows)
    width += -width % multiple
    return torch.tensor([row + [PAD_ID] * (width - len(row)) for row in rows], dtype=torch.int64)


def reference(
    src: list[np.ndarray], tgt: list[np.ndarray] | None, start_id: int, multiple: int
) -> dict[str, torch.Tensor]:
    batch = {"src": padded_row_by_row([[*s.tolist(), EOS_ID] for s in src], multiple)}
    if tgt is not None:
        batch["tgt_in"] = padded_row_by_row([[start_id, *t.tolist()] for t in tgt], multiple)
        batch["tgt_out"] = padded_row_by_row([[*t.tolist(), EOS_ID] for t in tgt], multiple)
    return batch


def ragged(rng: np.random.Generator, rows: int, dtype: type) -> list[np.ndarray]:
    """Rows of 0 to 30 ids, a quarter of them empty."""
    lengths = np.where(rng.random(rows) < 0.25, 0, rng.integers(1, 31, rows))
    return [rng.integers(4, 8000, int(n)).astype(dtype) for n in lengths]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("multiple", [1, 8])
@pytest.mark.parametrize("start_id", [BOS_ID, EOS_ID, 250])
@pytest.mark.parametrize("with_target", [True, False])
def test_collate_equals_padding_row_by_row(
    seed: int, multiple: int, start_id: int, with_target: bool
) -> None:
    rng = np.random.default_rng(seed)
    rows = int(rng.integers(1, 40))
    dtype = np.uint16 if seed % 2 else np.int64  # corpora store uint16; alignment passes int64
    src = ragged(rng, rows, dtype)
    tgt = ragged(rng, rows, dtype) if with_target else None
    batch = collate(src, tgt, start_id=start_id, multiple=multiple)
    expected = reference(src, tgt, start_id, multiple)
    assert batch.keys() == expected.keys()
    for key, tensor in expected.items():
        assert batch[key].dtype == torch.int64, key
        assert torch.equal(batch[key], tensor), key


def test_collate_of_empty_rows_holds_only_the_added_ids() -> None:
    batch = collate([np.zeros(0, np.uint16)] * 3, [np.zeros(0, np.uint16)] * 3, start_id=7, multiple=8)
    assert batch["src"].shape == batch["tgt_in"].shape == (3, 8)
    assert batch["src"][:, 0].tolist() == [EOS_ID] * 3 and bool((batch["src"][:, 1:] == PAD_ID).all())
    assert batch["tgt_in"][:, 0].tolist() == [7] * 3 and batch["tgt_out"][:, 0].tolist() == [EOS_ID] * 3
