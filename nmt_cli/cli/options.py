"""Command-line options that several commands take, declared once as annotated types
(Typer reads the option's name from the parameter and its help from here)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

Beam = Annotated[int | None, typer.Option(help="Beam size (1: greedy). Default: the checkpoint's recipe.")]
Lenpen = Annotated[float | None, typer.Option(help="Length penalty alpha.")]
LenpenStyle = Annotated[str | None, typer.Option(help="gnmt: ((5+|Y|)/6)^a; fairseq: |Y|^a.")]
MaxLenA = Annotated[float | None, typer.Option(help="Max output length = a * source length + b.")]
MaxLenB = Annotated[int | None, typer.Option(help="See --max-len-a.")]
MinLen = Annotated[
    int | None,
    typer.Option(help="Fewest target tokens before the end (0 allows an empty translation). Default: 1."),
]
Shortlist = Annotated[
    bool | None,
    typer.Option(
        "--shortlist/--no-shortlist",
        help="Score each batch over the vocabulary shortlist stored with the model (`nmt shortlist`): "
        "faster, nearly the same output. Default: the checkpoint's recipe (off).",
    ),
]
BatchTokens = Annotated[int, typer.Option(help="Source tokens per batch.")]
Device = Annotated[str, typer.Option(help="auto, cpu or cuda.")]
Threads = Annotated[int, typer.Option(help="CPU threads (0: torch's default).")]
Input = Annotated[Path | None, typer.Option("--input", "-i", help="Input text (default: stdin).")]
Models = Annotated[list[Path], typer.Option("--model", "-m", help="Checkpoint; repeat for an ensemble.")]
DecodePrecision = Annotated[
    str | None, typer.Option(help="fp32, bf16, int8 (CPU) or fp16 (GPU). Default: the device's fastest.")
]
Workers = Annotated[
    int,
    typer.Option(help="CPU decoding processes of one thread each (0: one per core, or 1 with --threads)."),
]
