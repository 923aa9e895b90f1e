"""What makes a Hugging Face Marian model go through nmt and back unchanged, tensor for tensor.

nmt's own export (`nmt export --format hf-marian`) reorders the residual stream for Marian's
position layout and adds a zero output bias to a model without one, and records both in
config.json's "nmt_export": the import reads that record and undoes them. An imported Marian
model's rows are renumbered to nmt's order (<pad> <unk> <s> </s> first): the import records
the original order ("marian_rows" in the checkpoint's imported_from), which the export restores.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from nmt_cli.errors import InputError
from nmt_cli.importing.vocabulary import Renumbering

LAYOUTS = {"halves": "sinusoidal-halves", "interleaved": "sinusoidal"}
"""nmt_export's position_layout: the model's positions in nmt's terms."""


def exported_by_nmt(config: dict[str, Any], where: Path) -> tuple[str, bool]:
    """The position layout (nmt's name) and whether there is an output bias, as config.json's
    "nmt_export" records them for a model nmt exported; Marian's own (halves, a bias) without it."""
    record = config.get("nmt_export", {})
    layout = record.get("position_layout") if isinstance(record, dict) else None
    bias = record.get("output_bias") if isinstance(record, dict) else None
    if record == {}:
        layout, bias = "halves", True
    if layout not in LAYOUTS or not isinstance(bias, bool):
        raise InputError(
            f'{where}: "nmt_export" is not {{"position_layout": "interleaved" or "halves", "output_bias": '
            "true or false}, as nmt export writes it"
        )
    return LAYOUTS[layout], bias


def interleaved(theirs: dict[str, torch.Tensor], d_model: int) -> dict[str, torch.Tensor]:
    """Marian's tensors with the residual stream's coordinates back in nmt's interleaved layout
    (sine, cosine, sine...), which `nmt export` reordered to all sines, then all cosines: the
    columns of what reads the stream and the rows of what writes it, taken back alike."""
    halves = [*range(0, d_model, 2), *range(1, d_model, 2)]  # the export's order
    back = sorted(range(d_model), key=halves.__getitem__)
    reads = ("shared.weight", "embed_tokens.weight", "lm_head.weight", "_proj.weight", "fc1.weight")
    writes = (
        "out_proj.weight",
        "out_proj.bias",
        "fc2.weight",
        "fc2.bias",
        "layer_norm.weight",
        "layer_norm.bias",
    )
    out = {}
    for name, tensor in theirs.items():
        if name.endswith(writes):
            out[name] = tensor[back]
        elif name.endswith(reads):
            out[name] = tensor[:, back]
        else:
            out[name] = tensor
    return out


def original_rows(table: Renumbering) -> list[int]:
    """For each of the toolkit's ids, in its order, the nmt id holding its row: the export takes
    nmt's rows back in this order. A row nmt reads for several ids (<unk>, for the pieces of the
    sentencepiece models the toolkit's table lacks) is the first of them, its own special."""
    first: dict[int, int] = {}
    for nmt_id, row in enumerate(table.rows):
        if row is not None:
            first.setdefault(row, nmt_id)
    return [first[row] for row in range(len(first))]
