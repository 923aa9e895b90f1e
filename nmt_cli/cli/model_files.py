"""The commands that read and write model files: `nmt average`, `nmt shortlist`, `nmt import`
and `nmt export`. Part of the command line: `cli.app` registers them with their epilogs; each
parses its options and calls the plain `run` of its module in `commands/`, imported inside the
command so that `nmt --help` does not load torch."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from nmt_cli.cli import options as opt
from nmt_cli.cli.session import Globals, imported

AVERAGE_EPILOG = (
    "Examples: nmt average --run runs/m30k --last 5 -o avg.pt\n\n"
    "nmt average runs/m30k/checkpoints/checkpoint_[0-9]*.pt -o avg.pt   (the numbered ones)"
)
SHORTLIST_EPILOG = (
    "Examples: nmt shortlist -m avg.pt --train data/train --valid data/val -o avg+sl.pt\n\n"
    "nmt translate -m avg+sl.pt --shortlist -i test.en"
)
IMPORT_EPILOG = (
    "Examples: nmt import opus-mt-en-de -o en-de.pt\n\nnmt import wmt-fairseq/model.pt -o en-de.pt"
)

EXPORT_EPILOG = "Example: nmt export -m avg.pt -o avg-ct2 --quantization int8"


def average(
    checkpoints: Annotated[
        list[Path] | None, typer.Argument(help="Checkpoints to average.", parser=opt.path_of)
    ] = None,
    output: Annotated[
        Path,
        typer.Option("--output", "-o", help="Result.", **opt.AS_PATH),
    ] = Path("average.pt"),
    run: Annotated[
        Path | None, typer.Option(help="Run directory: average its latest checkpoints.", **opt.AS_PATH)
    ] = None,
    last: Annotated[int | None, typer.Option(help="How many (default: the recipe's average.last).")] = None,
    quiet: opt.Quiet = False,
) -> None:
    """Average the parameters of several checkpoints (fp32)."""
    from nmt_cli.commands import average as command

    imported()

    command.run(
        checkpoints=list(checkpoints or []),
        output=output,
        run_dir=run,
        last=last,
        quiet=Globals.quiet or quiet,
    )


def shortlist(
    model: Annotated[
        Path, typer.Option("--model", "-m", help="Checkpoint (trained, averaged or imported).", **opt.AS_PATH)
    ],
    train: Annotated[
        Path, typer.Option(help="Parallel corpus prefix: PREFIX.SRC and PREFIX.TGT, raw text.", **opt.AS_PATH)
    ],
    output: Annotated[
        Path, typer.Option("--output", "-o", help="The checkpoint with its shortlist.", **opt.AS_PATH)
    ],
    src: opt.Src = None,
    tgt: opt.Tgt = None,
    candidates: Annotated[int, typer.Option(help="Target pieces kept per source piece.")] = 20,
    frequent: Annotated[int, typer.Option(help="Most frequent target pieces, in every shortlist.")] = 100,
    max_pairs: Annotated[int, typer.Option(help="Learn from the first N sentence pairs.")] = 1_000_000,
    valid: Annotated[
        Path | None,
        typer.Option(
            help="Held-out prefix: report the share of its reference pieces covered.", **opt.AS_PATH
        ),
    ] = None,
    quiet: opt.Quiet = False,
) -> None:
    """Learn a vocabulary shortlist from a parallel corpus and store it with a model.

    Each source piece keeps the target pieces most likely to translate it (IBM Model 1 on the
    model's own pieces); `--shortlist` in translate and serve then scores each batch over its
    sentences' candidates and the most frequent pieces instead of the whole vocabulary.
    """
    from nmt_cli.commands import shortlist as command

    imported()

    command.run(
        model=model, train=train, output=output, languages=(src, tgt), valid=valid,
        candidates=candidates, frequent=frequent, max_pairs=max_pairs, quiet=Globals.quiet or quiet,
    )  # fmt: skip


def import_(
    source: Annotated[
        str,
        typer.Argument(help="Marian (Hugging Face) directory or fairseq checkpoint.", parser=opt.nonempty),
    ],
    output: Annotated[Path, typer.Option("--output", "-o", help="nmt checkpoint to write.", **opt.AS_PATH)],
    src: opt.Src = None,
    tgt: opt.Tgt = None,
    quiet: opt.Quiet = False,
) -> None:
    """Read a model trained by fairseq or Marian (OPUS-MT) as an nmt checkpoint.

    A fairseq run trained without --source-lang/--target-lang names no languages: give them with
    --src and --tgt (its dict.SRC.txt and dict.TGT.txt are read)."""
    from nmt_cli.commands import import_model as command

    imported()

    command.run(source=source, output=output, quiet=Globals.quiet or quiet, languages=(src, tgt))


def export(
    model: Annotated[Path, typer.Option("--model", "-m", help="Checkpoint.", **opt.AS_PATH)],
    output: Annotated[Path, typer.Option("--output", "-o", help="Model directory to write.", **opt.AS_PATH)],
    format_: Annotated[
        str, typer.Option("--format", help="ctranslate2, or hf-marian (transformers' MarianMTModel).")
    ] = "ctranslate2",
    quantization: Annotated[
        str,
        typer.Option(
            help="ctranslate2's weights: none (fp32), int8, int8_float32, int8_bfloat16, int16, "
            "float16, bfloat16."
        ),
    ] = "none",
    force: Annotated[bool, typer.Option("--force", help="Replace an existing output.")] = False,
    quiet: opt.Quiet = False,
) -> None:
    """Write a checkpoint as a CTranslate2 or Hugging Face Marian model directory, with its tokenizer."""
    from nmt_cli.commands import export as command

    imported()

    command.run(
        model=model, fmt=format_, out=output, quantization=quantization, force=force,
        quiet=Globals.quiet or quiet,
    )  # fmt: skip
