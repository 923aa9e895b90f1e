"""`nmt translate`: raw text in, raw text out, one output line per input line, in order.

Input is read by a background thread (`data.arriving`) so that whatever has arrived is
translated at once: a file is taken `buffer_size` lines at a time (sorted by length inside the
buffer for batching), while a pipe that sends one line and waits gets its answer before EOF.
Each buffer's output is written and flushed before the next buffer is read.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
from collections.abc import Callable
from typing import BinaryIO, TextIO

from nmt_cli import line_output
from nmt_cli.config import DecodeConfig
from nmt_cli.data.arriving import arriving_lines, first_lines, stdin_bytes, whole_text
from nmt_cli.data.glossary import Glossary
from nmt_cli.data.text import check_readable, has_letters_or_digits
from nmt_cli.decoding import html_shape
from nmt_cli.decoding.alignment import pharaoh
from nmt_cli.decoding.loading import default_precision
from nmt_cli.decoding.settings import DecodeSettings, Sampling, resolve, with_terms
from nmt_cli.decoding.terms import ConstraintError
from nmt_cli.decoding.texts import Result
from nmt_cli.decoding.translator import Translator, load_translator
from nmt_cli.decoding.workers import decoding_workers
from nmt_cli.device import configure_cpu, resolve_device
from nmt_cli.errors import InputError, optional_import_failure
from nmt_cli.files import line_count, not_an_input, output_target, to_terminal
from nmt_cli.report import Reporter
from nmt_cli.user_settings import DecodeOverrides, RuntimeConfig, TranslateJob

Translate = Callable[[list[str]], list[Result]]
"""A configured `Translator.translate_texts`: lines in, their hypotheses (and alignments) out."""
FORMATS = ("text", "html", "html-document")
SCANNED_LINES = 1_000
"""Lines of a file that `--format html` reads before it decides whether the file is a page."""


def run(
    job: TranslateJob,
    *,
    decode: DecodeOverrides,
    runtime: RuntimeConfig,
    quiet: bool = False,
    sampling: Sampling | None = None,
) -> None:
    """Translate `job.input_path` (stdin) to `job.output_path` (stdout) by beam search, or by
    `sampling`. Of the job: `split_sentences`, each line sentence by sentence; `alignments`, each
    translation followed by a tab and its word alignment (Pharaoh's "i-j" pairs); `text_format`
    "html", each line an HTML fragment, translated with its markup kept (its blocks sentence by
    sentence), or the whole input one HTML document where it reads as a page (`_reads_as_page`);
    "html-document", the whole input one HTML document; `constraints`, each line is the source,
    then a tab before each phrase its translation must contain (fairseq-interactive's
    --constraints), in that order with `ordered_constraints`; `glossary`, a TSV of terms enforced
    where a sentence holds their source side (`data.glossary`)."""
    models, input_path, output_path, nbest = job.models, job.input_path, job.output_path, job.nbest
    reporter = Reporter(quiet)
    _check_options(job)
    terms = Glossary.read(job.glossary) if job.glossary is not None else None
    # The rules that hold whatever the checkpoint's [decode] says, checked before it is loaded.
    resolve(DecodeConfig(), decode, nbest, job.batch_tokens, sampling)
    dev = resolve_device(runtime.device)
    workers = decoding_workers(runtime.workers, runtime.threads, dev)
    # One thread a process when there are several: forked workers must not inherit a thread pool.
    configure_cpu(1 if workers > 1 else runtime.threads)
    precision = runtime.precision or default_precision(dev)
    if input_path is not None:
        check_readable(input_path, f"--input {input_path}")
    destination = output_target(output_path, "--output") if output_path is not None else None
    if output_path is not None and destination is not None:
        inputs = [*models, *(p for p in (input_path, job.glossary) if p is not None)]
        not_an_input(output_path, inputs, "--output")
        if not destination[1]:
            line_output.partial_not_in_the_way(output_path, destination[0])
    # A bar on a terminal, lines in a log; none where the translations themselves are on screen.
    shown = (reporter.bars_enabled or reporter.lines_enabled) and not to_terminal(output_path)
    total = line_count(input_path) if shown and input_path is not None else None
    translator = load_translator(models, dev, precision)
    settings = with_terms(
        translator.settings(decode, nbest, job.batch_tokens, sampling), terms, job.ordered_constraints
    )
    if nbest == 1:  # the output is the text alone
        settings = dataclasses.replace(settings, scores=False, alignments=job.alignments)
    source = input_path.open("rb") if input_path is not None else stdin_bytes()
    name = str(input_path) if input_path is not None else "stdin"
    translator.start_workers(workers)
    emptied = collections.Counter[str]()  # "lines": non-empty input lines translated to nothing
    bar = reporter.bar("translating", total=total, unit=" lines") if shown else None
    progress = bar.update if bar is not None else None
    write = _writer(job, translator, settings, source, name, emptied, progress, reporter)
    try:
        line_output.write_lines(write, output_path, destination)
    finally:
        if bar is not None:
            bar.close()
        translator.close()
        if input_path is not None:
            source.close()
    _warn_after(reporter, emptied["lines"], translator)


def _check_options(job: TranslateJob) -> None:
    """The option rules that need no model."""
    buffer_size, nbest, alignments, text_format = job.buffer_size, job.nbest, job.alignments, job.text_format
    if buffer_size < 1:
        raise InputError(f"--buffer-size {buffer_size}: must be at least 1")
    if alignments and nbest > 1:
        raise InputError("--alignments: the alignment is the best translation's; leave out --nbest")
    if text_format not in FORMATS:
        raise InputError(f"--format {text_format}: one of {', '.join(FORMATS)}")
    if text_format != "text":  # before the model is loaded and stdin waited for
        try:
            import lxml  # noqa: F401
        except ImportError as err:
            missing = f'--format {text_format}: needs lxml, an optional extra: pip install "nmt-cli[html]"'
            raise optional_import_failure(err, missing, "lxml") from None
    if text_format != "text" and (nbest > 1 or alignments or job.constraints):
        one = "a line" if text_format == "html" else "of the document"
        raise InputError(
            f"--format {text_format}: one translation {one}, with its markup; leave out --nbest, "
            "--alignments and --constraints (a --glossary applies to HTML too)"
        )
    if job.ordered_constraints and not job.constraints:
        raise InputError("--ordered-constraints: goes with --constraints, whose phrases it orders")


def _writer(
    job: TranslateJob,
    translator: Translator,
    settings: DecodeSettings,
    source: BinaryIO,
    name: str,
    emptied: collections.Counter[str],
    progress: Callable[[int], object] | None,
    reporter: Reporter,
) -> line_output.Write:
    """How the input becomes output: buffer by buffer (`_translate_stream`), or as one HTML
    document where it reads as a page (`_translate_page`)."""
    html = job.text_format != "text"
    write = functools.partial(
        _translate_stream,
        _translate_call(translator, settings, job),
        source,
        name,
        buffer_size=job.buffer_size,
        nbest=job.nbest,
        emptied=emptied,
        whole_lines=job.constraints or not (job.split_sentences or html),
        progress=progress,
        warn=reporter.warn,
        untranslated=html_shape.words_lost if html else _untranslated,
        check_line=html_shape.unbalanced if html else None,
    )
    if html and _reads_as_page(job, source, name, reporter):
        page = functools.partial(translator.translate_markup, settings=settings, documents=True)
        return functools.partial(_translate_page, page, source, name, progress=progress)
    return write


def _translate_call(translator: Translator, settings: DecodeSettings, job: TranslateJob) -> Translate:
    if job.text_format != "text":
        return functools.partial(_html_results, translator, settings)
    if job.constraints:
        return functools.partial(_constrained_results, translator, settings)
    return functools.partial(translator.translate_texts, settings=settings, split=job.split_sentences)


def _warn_after(reporter: Reporter, emptied: int, translator: Translator) -> None:
    if emptied:
        reporter.warn(
            f"{emptied} non-empty input lines got an empty translation; a model that leaves "
            "text untranslated may be damaged (NaN or infinite weights) or not trained for such input"
        )
    if translator.truncated:
        reporter.warn(
            f"{translator.truncated} input lines were longer than the model's "
            f"{translator.max_source} pieces and were truncated"
        )


def _constrained_results(translator: Translator, settings: DecodeSettings, lines: list[str]) -> list[Result]:
    """Lines in fairseq-interactive's --constraints format: the source, a tab before each phrase."""
    fields = [line.split("\t") for line in lines]
    return translator.translate_texts([f[0] for f in fields], settings, constraints=[f[1:] for f in fields])


def _html_results(translator: Translator, settings: DecodeSettings, fragments: list[str]) -> list[Result]:
    # A line break that a reference (&#10;) put into text or an attribute is written as one again,
    # not turned into a space as in plain text: <pre> code keeps its lines.
    return [
        Result([(text.translate(HTML_ONE_LINE), 0.0)])
        for text in translator.translate_markup(fragments, settings)
    ]


ONE_LINE = dict.fromkeys(map(ord, "\t\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"), " ")
"""A tab and what str.splitlines() breaks a line at, as spaces."""
HTML_ONE_LINE = {**ONE_LINE, ord("\n"): "&#10;", ord("\r"): "&#13;"}
"""For HTML, a line break as a character reference, which reads back as it was. It can only come
from a reference in text or an attribute: a raw one would have ended the input line, and inside
<script>, <style> or a comment a reference is not read. A tab, raw there or not, is a space."""


def _translate_stream(
    translate: Translate,
    source: BinaryIO,
    name: str,
    out: TextIO,
    flushed: Callable[[int], None] | None = None,
    *,
    buffer_size: int,
    nbest: int,
    emptied: collections.Counter[str] | None = None,
    whole_lines: bool = True,
    progress: Callable[[int], object] | None = None,
    warn: Callable[[str], None] | None = None,
    untranslated: Callable[[str, str], bool] | None = None,
    check_line: Callable[[str], str | None] | None = None,
) -> None:
    """Translate buffer by buffer; after each buffer's output is flushed, `flushed` gets the number
    of input lines done so far and `progress` the buffer's; `emptied["lines"]` counts the lines
    that had words and got none (`untranslated(line, translation)`). A buffer's output goes out in
    one write, so that a process killed while it translates (where nearly all the time goes)
    leaves only complete lines behind. A phrase that cannot be met is named by its input line
    where `whole_lines` are translated (not cut into sentences); `warn` hears of the first line
    that is not UTF-8 text, and of the first that `check_line` finds a problem with."""
    number = 0
    untranslated = untranslated or _untranslated
    for lines in arriving_lines(source, name, buffer_size, warn):
        chunk = []
        try:
            results = translate(lines)
        except ConstraintError as err:
            if not whole_lines:
                raise
            raise InputError(f"{name}:{number + err.line + 1}: {err.problem}") from None
        except html_shape.MarkupError as err:
            raise InputError(f"{name}:{number + err.index + 1}: {err}") from None
        for line, result in zip(lines, results, strict=True):
            # A sentence's translation is one line already; the whitespace that joins a line's
            # sentences is the input's, and a tab or a line separator there would break the line.
            hyps = [(text.translate(ONE_LINE), score) for text, score in result.hyps]
            if emptied is not None and untranslated(line, hyps[0][0]):
                emptied["lines"] += 1
            if check_line is not None and warn is not None and (problem := check_line(line)):
                warn(
                    f"{name}:{number + 1}: {problem}; --format html reads each line as one HTML "
                    "fragment: give --format html-document for a page written over several lines"
                )
                check_line = None  # once: the lines of a page would repeat it
            if result.alignment is not None:
                chunk.append(f"{hyps[0][0]}\t{pharaoh(result.alignment)}\n")
            elif nbest == 1:
                chunk.append(hyps[0][0] + "\n")
            else:
                chunk.extend(f"{number}\t{score:.4f}\t{text}\n" for text, score in hyps)
            number += 1
        out.write("".join(chunk))
        out.flush()
        if flushed is not None:
            flushed(number)
        if progress is not None:
            progress(len(lines))


def _untranslated(line: str, translation: str) -> bool:
    return not translation and has_letters_or_digits(line)


def _reads_as_page(job: TranslateJob, source: BinaryIO, name: str, reporter: Reporter) -> bool:
    """Whether the input is one HTML document rather than a fragment a line: --format
    html-document, or --format html on input that opens with a doctype or <html>, or one of whose
    first lines (up to SCANNED_LINES of a file; on a pipe, those that have arrived) is not a
    fragment on its own (`html_shape.unbalanced`), as a web page's lines are not."""
    if job.text_format != "html":
        return job.text_format == "html-document"
    lines = first_lines(source, job.input_path, SCANNED_LINES)
    opens, _ = html_shape.document_opening("".join(lines))
    found = next(((n, p) for n, line in enumerate(lines, 1) if (p := html_shape.unbalanced(line))), None)
    if not opens and found is None:
        return False
    why = "it opens with a doctype or <html>" if opens else f"line {found[0]}: {found[1]}" if found else ""
    reporter.info(f"{name}: read as one HTML document ({why}); --format html-document says so")
    return True


def _translate_page(
    translate: Callable[[list[str]], list[str]],
    source: BinaryIO,
    name: str,
    out: TextIO,
    flushed: Callable[[int], None] | None = None,
    *,
    progress: Callable[[int], object] | None = None,
) -> None:
    """The whole input translated as one HTML document, written once it is."""
    text = whole_text(source)
    try:
        (page,) = translate([text])
    except html_shape.MarkupError as err:
        raise InputError(f"{name}:{err.line or 1}: {err}") from None
    out.write(page)
    out.flush()
    lines = text.count("\n") + (bool(text) and not text.endswith("\n"))
    for done in (flushed, progress):
        if done is not None:
            done(lines)
