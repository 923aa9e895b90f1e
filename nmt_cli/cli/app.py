"""The command line's commands and options (score and plot: `cli.results`; average, shortlist,
import and export: `cli.model_files`): each parses its options into typed objects once and calls
the plain `run` of its module in `commands/`. Command modules are imported inside each command
so that `nmt --help` does not load torch. `cli.main` runs the app and words its errors.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from nmt_cli import __version__
from nmt_cli.cli import model_files, results, serving, translating
from nmt_cli.cli import options as opt
from nmt_cli.cli.session import Globals, imported
from nmt_cli.errors import InputError

app = typer.Typer(
    name="nmt",
    help="Neural machine translation with the Transformer of 'Attention Is All You Need'.\n\n"
    "A typical session: prepare -> train -> average -> translate -> score.\n\n"
    "Examples:\n\n"
    "  nmt prepare --train corpus/train --valid corpus/valid --src en --tgt de --out data\n\n"
    "  nmt train --data data --recipe recipes/multi30k/small.toml --out runs/m30k\n\n"
    "  nmt average --run runs/m30k --last 5 -o avg.pt\n\n"
    "  echo 'A dog runs.' | nmt translate -m avg.pt\n\n"
    "  nmt translate -m avg.pt -i test.en | nmt score --ref test.de",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def built_from() -> str | None:
    """The git commit nmt was built from (nmt_cli/COMMIT, which the build writes), or the
    checkout's HEAD when run from a git checkout (read from .git, no git run); None when neither
    says."""
    package = Path(__file__).resolve().parents[1]
    recorded = package / "COMMIT"
    if recorded.is_file():
        return recorded.read_text(encoding="utf-8").strip() or None
    git = package.parent / ".git"
    try:
        head = (git / "HEAD").read_text(encoding="utf-8").strip()
        if head.startswith("ref: "):
            ref = head[len("ref: ") :]
            loose = git / ref
            if loose.is_file():
                head = loose.read_text(encoding="utf-8").strip()
            else:  # a packed ref: "<hash> <ref>" lines
                packed = (git / "packed-refs").read_text(encoding="utf-8").splitlines()
                head = next((line.split()[0] for line in packed if line.endswith(" " + ref)), "")
    except OSError:  # not a checkout (or a worktree's .git file): nothing to say
        return None
    return head[:12] or None


def _version(value: bool) -> None:
    if value:
        commit = built_from()
        print(f"nmt {__version__}" + (f" (commit {commit})" if commit else ""))
        raise typer.Exit()


@app.callback()
def _main(
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks on errors.")] = False,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="No progress bars or messages on stderr.")
    ] = False,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    Globals.debug, Globals.quiet = debug, quiet


@app.command(
    epilog="Example: nmt prepare --train data/train --valid data/valid --test data/test "
    "--src en --tgt de --out prepared/ --vocab-size 8000"
)
def prepare(
    train: Annotated[
        list[str],
        typer.Option(
            help="Prefix of training files PREFIX.SRC and PREFIX.TGT; repeat for several.", **opt.AS_PREFIX
        ),
    ],
    valid: Annotated[str, typer.Option(help="Prefix of the validation files.", **opt.AS_PREFIX)],
    src: Annotated[str, typer.Option(help="Source language suffix, e.g. en.")],
    tgt: Annotated[str, typer.Option(help="Target language suffix, e.g. de.")],
    out: Annotated[Path, typer.Option(help="Output directory for the binarized corpus.", **opt.AS_PATH)],
    test: Annotated[
        str | None, typer.Option(help="Prefix of the test files (optional).", **opt.AS_PREFIX)
    ] = None,
    train_tags: Annotated[
        list[str] | None,
        typer.Option(
            "--train-tag",
            help='Tag of each --train corpus, in order ("" for none): written before its sources.',
        ),
    ] = None,
    reserve: Annotated[
        list[str] | None, typer.Option(help="Keep a tag whole in the vocabulary learned, for later corpora.")
    ] = None,
    spm_from: Annotated[
        Path | None,
        typer.Option(
            help="Encode with the vocabulary of this checkpoint or prepared corpus; learn none.",
            **opt.AS_PATH,
        ),
    ] = None,
    vocab_size: Annotated[int, typer.Option(help="Sentencepiece BPE vocabulary size.")] = 32000,
    joint: Annotated[bool, typer.Option("--joint/--no-joint", help="One vocabulary for both sides.")] = True,
    character_coverage: Annotated[float, typer.Option(help="Sentencepiece character coverage.")] = 1.0,
    spm_sample: Annotated[
        int, typer.Option(help="Learn BPE on at most this many random train sentences (bounds memory).")
    ] = 2_000_000,
    max_len: Annotated[int, typer.Option(help="Drop pairs with a side longer than this many pieces.")] = 250,
    max_ratio: Annotated[float, typer.Option(help="Drop pairs whose length ratio exceeds this.")] = 2.0,
    workers: Annotated[int, typer.Option(help="Encoding processes.")] = 1,
    errors: Annotated[
        str, typer.Option(help="Invalid UTF-8 or a NUL byte: 'strict' stops, 'replace' carries on.")
    ] = "strict",
    byte_fallback: Annotated[
        bool, typer.Option(help="Spell characters outside the vocabulary as UTF-8 bytes, not <unk>.")
    ] = True,
    normalization: Annotated[
        str, typer.Option(help="identity (as scored; default), nmt_nfkc, nfkc, nmt_nfkc_cf or nfkc_cf.")
    ] = "identity",
    quiet: opt.Quiet = False,
) -> None:
    """Learn a sentencepiece BPE model and binarize a parallel corpus.

    Reads PREFIX.SRC and PREFIX.TGT (UTF-8, one sentence a line) for train, valid and
    test; learns BPE on at most --spm-sample sentences of train (or takes the vocabulary of
    --spm-from); drops train pairs with an empty side, a side over --max-len pieces or a length
    ratio over --max-ratio (valid and test keep every line); writes DATA_DIR/meta.json last.
    Several --train corpora are binarized one after the other (train.corpus_weights mixes them).
    Running it again with the same inputs and options reuses the finished corpus.
    """
    from nmt_cli.user_settings import PrepareConfig

    config = PrepareConfig(  # the lists as tuples: a frozen value
        train=tuple(train), valid=valid, src=src, tgt=tgt, out=out, test=test,
        train_tags=tuple(train_tags or ()), reserve=tuple(reserve or ()), spm_from=spm_from,
        vocab_size=vocab_size, joint=joint, character_coverage=character_coverage,
        byte_fallback=byte_fallback, normalization=normalization, spm_sample=spm_sample,
        max_len=max_len, max_ratio=max_ratio, errors=errors, workers=workers,
    )  # fmt: skip
    from nmt_cli.commands import prepare as command  # torch: after the options are checked

    imported()
    command.run(config, quiet=Globals.quiet or quiet)


@app.command(
    epilog="Example: nmt train --data prepared/ --recipe recipes/multi30k/small.toml --out runs/m30k "
    "--set train.max_updates=2000"
)
def train(
    data: Annotated[Path, typer.Option(help="Directory written by `nmt prepare`.", **opt.AS_PATH)],
    out: Annotated[Path, typer.Option(help="Run directory; an existing one is resumed.", **opt.AS_PATH)],
    recipe: Annotated[Path | None, typer.Option(help="TOML recipe (see recipes/).", **opt.AS_PATH)] = None,
    set_: Annotated[
        list[str] | None, typer.Option("--set", help="Override a recipe value: section.key=value.")
    ] = None,
    device: opt.Device = "auto",
    precision: Annotated[str | None, typer.Option(help="bf16, fp16 or fp32 (over train.precision).")] = None,
    threads: opt.Threads = 0,
    compile_: Annotated[
        bool, typer.Option("--compile", help="Compile the model with torch.compile.")
    ] = False,
    init_from: Annotated[
        Path | None,
        typer.Option(help="Start from this checkpoint's weights and model (fine-tuning).", **opt.AS_PATH),
    ] = None,
    keep_optimizer: Annotated[
        bool, typer.Option("--keep-optimizer/--reset-optimizer", help="With --init-from: Adam's moments too.")
    ] = False,
    tensorboard: Annotated[
        Path | None, typer.Option(help="Also write TensorBoard logs, in <path>/<run name>.", **opt.AS_PATH)
    ] = None,
    quiet: opt.Quiet = False,
) -> None:
    """Train a Transformer (resumes an existing run directory).

    With --init-from, a new run starts from a checkpoint's weights and architecture (the recipe may
    change training and decoding settings and dropout, not the model) with a fresh learning-rate
    schedule; its data must be prepared with the checkpoint's vocabulary (nmt prepare --spm-from).
    """
    from nmt_cli.user_settings import RuntimeConfig

    if keep_optimizer and init_from is None:
        raise InputError("--keep-optimizer goes with --init-from (a resumed run keeps its optimizer anyway)")
    runtime = RuntimeConfig(device=device, precision=precision, threads=threads)
    from nmt_cli.commands import train as command  # torch: after the options are checked

    imported()
    start = command.Start(init_from, keep_optimizer) if init_from is not None else None
    # train.tensorboard after the --set overrides, so that it wins; a TOML string whatever the path.
    board = [f"train.tensorboard={json.dumps(str(tensorboard), ensure_ascii=False)}"] if tensorboard else []
    command.run(
        data=data,
        out=out,
        recipe=recipe,
        overrides=[*(set_ or []), *board],
        runtime=runtime,
        compile_model=compile_,
        quiet=Globals.quiet or quiet,
        start=start,
    )


app.command(epilog=model_files.AVERAGE_EPILOG)(model_files.average)
app.command(epilog=model_files.SHORTLIST_EPILOG)(model_files.shortlist)
app.command("import", epilog=model_files.IMPORT_EPILOG)(model_files.import_)
app.command(epilog=model_files.EXPORT_EPILOG)(model_files.export)
app.command(epilog=translating.TRANSLATE_EPILOG)(translating.translate)
app.command(epilog=translating.ATTEND_EPILOG)(translating.attend)
app.command(epilog=results.SCORE_EPILOG)(results.score)
app.command(epilog=results.PLOT_EPILOG)(results.plot)


app.command(epilog=serving.SERVE_EPILOG)(serving.serve)
