"""`nmt translate` and `nmt attend` on the command line: their options parsed into typed settings,
then the plain `run` of `commands/translate.py` and `commands/attend.py`. `cli.app` registers them
with their epilogs, as `score`, `plot` and `serve`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from nmt_cli.cli import options as opt
from nmt_cli.cli.session import Globals, imported

TRANSLATE_EPILOG = (
    "Examples: echo 'A man rides a bike.' | nmt translate -m avg.pt\n\n"
    "nmt translate -m avg.pt -i test.en -o test.hyp --beam 4 --lenpen 0.6\n\n"
    "printf 'A man rides a bike.\\tFahrrad\\n' | nmt translate -m avg.pt --constraints\n\n"
    "nmt translate -m avg.pt -i test.en --glossary terms.tsv"
)
ATTEND_EPILOG = (
    "Examples: nmt attend -m avg.pt -i sentences.en --out-dir attention/\n\n"
    "echo 'A dog runs.' | nmt attend -m avg.pt --out-dir attention/ --layer 1 --head 2 --format svg"
)


def translate(
    models: opt.Models,
    input_path: opt.Input = None,
    output_path: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="Output (default: stdout, as -).",
            parser=opt.standard_stream,
            metavar="<path>",
        ),
    ] = None,
    beam: opt.Beam = None,
    lenpen: opt.Lenpen = None,
    lenpen_style: opt.LenpenStyle = None,
    max_len_a: opt.MaxLenA = None,
    max_len_b: opt.MaxLenB = None,
    min_len: opt.MinLen = None,
    shortlist: opt.Shortlist = None,
    nbest: Annotated[
        int,
        typer.Option(
            help="Print the K best hypotheses of each line as LINE<TAB>SCORE<TAB>TEXT, LINE the input "
            "line's number counted from 0."
        ),
    ] = 1,
    batch_tokens: opt.BatchTokens = None,
    buffer_size: Annotated[int, typer.Option(help="Lines read and sorted by length before batching.")] = 5000,
    device: opt.Device = "auto",
    precision: opt.DecodePrecision = None,
    threads: opt.Threads = 0,
    workers: opt.Workers = 0,
    sampling: Annotated[
        str | None,
        typer.Option(help="Draw translations at random instead: topk or topp (for back-translation)."),
    ] = None,
    topk: Annotated[
        int | None, typer.Option(help="--sampling topk: among the k likeliest (0: all; 10).")
    ] = None,
    topp: Annotated[
        float | None, typer.Option(help="--sampling topp: among the likeliest of mass p (0.9).")
    ] = None,
    temperature: Annotated[float | None, typer.Option(help="--sampling: <1 sharper, >1 flatter (1).")] = None,
    seed: Annotated[int | None, typer.Option(help="--sampling: same seed and line, same output (1).")] = None,
    split_sentences: Annotated[
        bool, typer.Option(help="Translate each line sentence by sentence (for paragraphs).")
    ] = False,
    alignments: Annotated[
        bool, typer.Option(help="After each translation, a tab and its word alignment (Pharaoh 'i-j' pairs).")
    ] = False,
    text_format: Annotated[
        str,
        typer.Option(
            "--format",
            help="text; html: each line an HTML fragment, its markup kept (input that reads as a web "
            "page: one document); html-document: the whole input one HTML document, its structure kept.",
        ),
    ] = "text",
    constraints: opt.Constraints = False,
    ordered_constraints: opt.OrderedConstraints = False,
    glossary: opt.Glossary = None,
    quiet: opt.Quiet = False,
) -> None:
    """Translate text with beam search, or sample translations (stdin to stdout by default)."""
    from nmt_cli.decoding.settings import Sampling
    from nmt_cli.user_settings import DecodeOverrides, RuntimeConfig, TranslateJob

    Globals.fast_exit = True
    job = TranslateJob(  # what to translate, where to, in what shape
        models=models, input_path=input_path, output_path=output_path, nbest=nbest,
        batch_tokens=batch_tokens, buffer_size=buffer_size,
        split_sentences=split_sentences, alignments=alignments, text_format=text_format,
        constraints=constraints, ordered_constraints=ordered_constraints, glossary=glossary,
    )  # fmt: skip
    decode = DecodeOverrides(
        beam=beam, lenpen=lenpen, lenpen_style=lenpen_style,
        max_len_a=max_len_a, max_len_b=max_len_b, min_len=min_len, shortlist=shortlist,
    )  # fmt: skip
    runtime = RuntimeConfig(device=device, precision=precision, threads=threads, workers=workers)
    drawn = Sampling.given(sampling, topk, topp, temperature, seed)
    from nmt_cli.commands import translate as command  # torch: after the options are checked

    imported()
    command.run(job, decode=decode, runtime=runtime, quiet=Globals.quiet or quiet, sampling=drawn)


def attend(
    model: Annotated[Path, typer.Option("--model", "-m", help="Checkpoint.", **opt.AS_PATH)],
    out_dir: Annotated[
        Path, typer.Option(help="Directory for the pictures (attention_0001.png, ...).", **opt.AS_PATH)
    ],
    input_path: opt.Input = None,
    layer: Annotated[int | None, typer.Option(help="Decoder layer, 1..N (default: the last).")] = None,
    head: Annotated[int | None, typer.Option(help="Head, 1..h (default: the mean over heads).")] = None,
    picture_format: Annotated[str, typer.Option("--format", help="png or svg.")] = "png",
    beam: opt.Beam = None,
    lenpen: opt.Lenpen = None,
    lenpen_style: opt.LenpenStyle = None,
    max_len_a: opt.MaxLenA = None,
    max_len_b: opt.MaxLenB = None,
    min_len: opt.MinLen = None,
    batch_tokens: opt.BatchTokens = None,
    device: opt.Device = "auto",
    threads: opt.Threads = 0,
    quiet: opt.Quiet = False,
) -> None:
    """Translate, and draw the encoder-decoder attention of each translation (needs matplotlib).

    Translates as `nmt translate` does (stdout), then one teacher-forced pass per sentence gives
    a picture of target pieces (rows) by source pieces (columns); the search is untouched.
    """
    from nmt_cli.user_settings import AttendJob, DecodeOverrides, RuntimeConfig

    job = AttendJob(
        model=model, out_dir=out_dir, input_path=input_path,
        layer=layer, head=head, picture_format=picture_format, batch_tokens=batch_tokens,
    )  # fmt: skip
    decode = DecodeOverrides(  # no --shortlist: the checkpoint's
        beam=beam, lenpen=lenpen, lenpen_style=lenpen_style,
        max_len_a=max_len_a, max_len_b=max_len_b, min_len=min_len,
    )  # fmt: skip
    runtime = RuntimeConfig(device=device, precision="fp32", threads=threads)
    from nmt_cli.commands import attend as command  # torch: after the options are checked

    imported()
    command.run(job, decode=decode, runtime=runtime, quiet=Globals.quiet or quiet)
