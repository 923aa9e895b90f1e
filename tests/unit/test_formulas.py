"""The paper's formulas checked against values written out here, not against the code's own
functions: the length penalty's two styles and the sinusoidal position table (§3.5)."""

from __future__ import annotations

import math

import pytest
import torch

from nmt_cli.decoding.search import length_penalty
from nmt_cli.model.layers import sinusoidal_table


@pytest.mark.parametrize(
    ("length", "alpha", "style", "expected"),
    [
        (1, 0.6, "gnmt", 1.0),  # (5 + 1) / 6 = 1
        (7, 0.6, "gnmt", 2.0**0.6),  # (5 + 7) / 6 = 2
        (25, 1.0, "gnmt", 5.0),  # (5 + 25) / 6 = 5
        (13, 0.0, "gnmt", 1.0),
        (8, 1.0, "fairseq", 8.0),  # |Y|^alpha
        (16, 0.5, "fairseq", 4.0),
        (9, 0.0, "fairseq", 1.0),
    ],
)
def test_length_penalty_is_the_formula(length: int, alpha: float, style: str, expected: float) -> None:
    assert length_penalty(length, alpha, style) == pytest.approx(expected, rel=1e-12)


def test_the_sinusoidal_table_is_the_papers_formula() -> None:
    """PE(pos, 2i) = sin(pos / 10000^(2i / d_model)), PE(pos, 2i + 1) = cos(pos / 10000^(2i / d_model))."""
    positions, d = 50, 16
    table = sinusoidal_table(positions, d)
    expected = torch.empty(positions, d, dtype=torch.float64)
    for pos in range(positions):
        for i in range(d // 2):
            angle = pos / 10000 ** (2 * i / d)
            expected[pos, 2 * i] = math.sin(angle)
            expected[pos, 2 * i + 1] = math.cos(angle)
    torch.testing.assert_close(table.double(), expected, rtol=0, atol=2e-6)
    assert table[0, 0] == 0.0 and table[0, 1] == 1.0  # sin 0, cos 0
