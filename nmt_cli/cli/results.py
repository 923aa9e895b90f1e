"""The commands that read what the others wrote: `nmt score` (translations against references)
and `nmt plot` (training curves). Part of the command line: `cli.app` registers them with their
epilogs; as there, each parses its options and calls the plain `run` of its module in `commands/`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from nmt_cli.cli import options as opt
from nmt_cli.cli.session import Globals, imported

SCORE_EPILOG = (
    "Examples: nmt translate -m avg.pt -i test.en | nmt score --ref test.de "
    "--metrics bleu,chrf\n\n"
    "nmt score --hyp test.hyp --ref test.de --compound-split   (the paper's En-De BLEU)\n\n"
    "nmt score --hyp test.hyp --ref ref1.de --ref ref2.de --json"
)
PLOT_EPILOG = (
    "Examples: nmt plot runs/m30k -o curves.png\n\n"
    "nmt plot runs/base runs/big -o compare.svg --x-axis wall\n\n"
    "nmt plot runs/m30k --terminal   (no matplotlib needed)"
)


def score(
    ref: Annotated[
        list[Path], typer.Option(help="Reference file; repeat for several references.", **opt.AS_PATH)
    ],
    hyp: Annotated[
        Path | None,
        typer.Option(help="Hypotheses (default: stdin, as -).", parser=opt.standard_stream, metavar="<path>"),
    ] = None,
    metrics: Annotated[str, typer.Option(help="Comma-separated: bleu, chrf, ter.")] = "bleu",
    tokenize: Annotated[
        str | None,
        typer.Option(
            help="BLEU tokenizer: 13a (default), intl, none, char, zh...; none with --compound-split."
        ),
    ] = None,
    compound_split: Annotated[
        bool,
        typer.Option(
            "--compound-split",
            help="Tokenized BLEU on compound-split text, as the paper reports En-De (tensor2tensor's "
            "get_ende_bleu.sh: Moses tokenizer -l de, ##AT## split, multi-bleu.perl).",
        ),
    ] = False,
    json_: Annotated[bool, typer.Option("--json", help="Print the scores as one JSON object.")] = False,
) -> None:
    """Score hypotheses with sacreBLEU: BLEU, chrF, TER.

    Prints one line per metric with its sacreBLEU signature. Hypotheses and every
    reference must have the same number of lines.

    The paper's En-De figures are not sacreBLEU: they are BLEU of Moses-tokenized text
    with hyphenated compounds split ("a-b" -> "a ##AT##-##AT## b"), which reads higher
    (Ott et al., 2018: 29.3 that way is 28.6 as sacreBLEU). --compound-split computes that
    figure: the Moses tokenizer for German (sacremoses, escaping on, as tokenizer.perl -l de),
    then the split, then BLEU with no further tokenization or smoothing, as multi-bleu.perl
    (--tokenize none skips the Moses step for files that are tokenized already). Its line is
    labelled "tokenized BLEU, compound-split"; every other line is labelled "sacreBLEU".
    Report sacreBLEU; use --compound-split only to compare with the paper's Table 2.
    """
    from nmt_cli.commands import score as command

    imported()

    command.run(
        refs=ref, hyp=hyp, metrics=metrics, tokenize=tokenize, as_json=json_, compound_split=compound_split
    )


def plot(
    runs: Annotated[
        list[Path], typer.Argument(help="Run directories (or their metrics.jsonl files).", parser=opt.path_of)
    ],
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="Picture, .png or .svg (default: curves.png unless --terminal).",
            **opt.AS_PATH,
        ),
    ] = None,
    terminal: Annotated[
        bool, typer.Option("--terminal", help="Draw the loss curve and a summary in the terminal.")
    ] = False,
    x_axis: Annotated[str, typer.Option(help="Horizontal axis: update or wall (training time).")] = "update",
    quiet: opt.Quiet = False,
) -> None:
    """Training curves from metrics.jsonl: loss, valid BLEU, learning rate, tokens/s.

    Several runs are overlaid, one colour each. A run still training can be plotted at any
    time. Pictures need matplotlib (pip install 'nmt-cli[plot]'); --terminal does not.
    """
    from nmt_cli.commands import plot as command

    imported()

    command.run(run_dirs=runs, output=output, terminal=terminal, x_axis=x_axis, quiet=Globals.quiet or quiet)
