"""Command-line options that several commands take, declared once as annotated types
(Typer reads the option's name from the parameter and its help from here). Each command builds
its settings objects from its parameters by keyword, so that an option can be followed by name
from its declaration here to the setting it fills."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypedDict

import typer


def path_of(value: str) -> Path:
    """A path option's value. An empty one is refused naming the option: pathlib reads "" as ".",
    and `-o ""` was then answered about the current directory, which nobody named."""
    if not value:
        raise typer.BadParameter("the path is empty; give a file or directory name")
    return Path(value)


def prefix_of(value: str) -> str:
    """A corpus prefix's value (PREFIX.SRC and PREFIX.TGT): refused when empty, as `path_of`."""
    if not value:
        raise typer.BadParameter("the prefix is empty; give the files' path without the language suffix")
    return value


def nonempty(value: str) -> str:
    """A path that stays a string (`nmt import`'s source, which may also be hf:NAME): refused when
    empty, as `path_of`."""
    if not value:
        raise typer.BadParameter("the path is empty; give a directory, a checkpoint or hf:NAME")
    return value


class _Parsing(TypedDict):
    parser: Callable[[str], Any]
    metavar: str


AS_PATH: _Parsing = {"parser": path_of, "metavar": "<path>"}
"""The keyword arguments of a path option's typer.Option or typer.Argument."""
AS_PREFIX: _Parsing = {"parser": prefix_of, "metavar": "<prefix>"}
"""The same for a corpus prefix."""

Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars or messages (as nmt --quiet).")]
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
BatchTokens = Annotated[
    int | None, typer.Option(help="Source tokens per batch (default: 4096 on a CPU, 32768 on a GPU).")
]
# Terminology a translation must contain (translate).
Constraints = Annotated[
    bool,
    typer.Option(help="Each line: the source, then a tab before each phrase its translation must contain."),
]
OrderedConstraints = Annotated[
    bool, typer.Option(help="--constraints: the phrases in the order given (default: any order).")
]
Glossary = Annotated[
    Path | None,
    typer.Option(
        help="TSV of 'source term<TAB>target term': enforced where a line holds the source term.",
        **AS_PATH,
    ),
]
Device = Annotated[str, typer.Option(help="auto, cpu or cuda.")]
Threads = Annotated[int, typer.Option(help="CPU threads (0: torch's default).")]
# The language pair, where the model does not name it (shortlist: also the corpus files' suffixes).
Src = Annotated[str | None, typer.Option(help="Source language (default: the model's own).")]
Tgt = Annotated[str | None, typer.Option(help="Target language (default: the model's own).")]


def standard_stream(path: str) -> Path | None:
    """`-` names stdin or stdout, as for fairseq-interactive, sacreBLEU and most Unix tools
    (a file named - is ./-)."""
    return None if path == "-" else path_of(path)


Input = Annotated[
    Path | None,
    typer.Option(
        "--input", "-i", help="Input text (default: stdin, as -).", parser=standard_stream, metavar="<path>"
    ),
]
Models = Annotated[
    list[Path],
    typer.Option("--model", "-m", help="Checkpoint; repeat for an ensemble.", **AS_PATH),
]
DecodePrecision = Annotated[
    str | None, typer.Option(help="fp32, bf16, int8 (CPU) or fp16 (GPU). Default: the device's fastest.")
]
Workers = Annotated[
    int,
    typer.Option(help="CPU decoding processes of one thread each (0: one per core, or 1 with --threads)."),
]
