"""Translation as a library, and nmt's Python API:

    from nmt_cli import Translator
    t = Translator.load("avg.pt", device="cpu", precision="bf16")
    t.translate(["A man rides a bike.", "Two dogs play."], beam=4)   # one string per line
    t.translate_nbest(["A man rides a bike."], nbest=3)             # (text, score) lists
    t.translate(["A man rides a bike."], sampling=Sampling("topk", topk=10, seed=7))  # a random draw
    t.translate(["A man rides a bike."], shortlist=True)  # over the model's shortlist (`nmt shortlist`)
    t.translate(["A dog runs."], alignments=True)  # [(text, ((0, 0), (1, 1), ...))]: word links
    t.translate_html(["<p>A <b>big</b> dog runs.</p>"])  # markup kept, on the aligned words
    t.translate(["A man rides a bike."], constraints=[["Fahrrad"]])  # must contain "Fahrrad"
    t.translate(["A man rides a bike."], glossary={"bike": "Fahrrad"})  # where the line says "bike"

A line of several sentences is cut into sentences, each translated alone, and the translations
joined with the whitespace that separated them (`split_sentences=False` translates lines whole).

Checkpoints are loaded as an ensemble with their sentencepiece models; lists of raw strings go
in. `nmt translate`, `nmt attend`, `nmt serve` and the benchmarks share it. No printing and no
files besides the checkpoints it loads; torch's thread count is the one process-wide setting it
changes, and only when asked (`threads`). The decoding itself is the engine's (`decoding.engine`),
which a Translator is, with the user's calls added.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Literal, Unpack, overload

import torch

from nmt_cli.decoding import arguments
from nmt_cli.decoding.alignment import Alignment
from nmt_cli.decoding.engine import Engine
from nmt_cli.decoding.loading import Loaded, load_model_groups, load_models
from nmt_cli.decoding.settings import DecodeOptions, DecodeSettings, Sampling, default_batch_tokens, resolve
from nmt_cli.decoding.texts import Hypotheses, text_lines
from nmt_cli.errors import SettingError, literal
from nmt_cli.ranges import check_setting
from nmt_cli.user_settings import DecodeOverrides


@dataclass(eq=False)  # one object per loaded model: equal to itself, hashable
class Translator(Engine):
    """Loaded models with their sentencepiece processors and default decode settings.

    Safe to share between threads: calls are served one at a time (a lock), so a second caller
    waits for the first; with decoding workers (`start_workers`), calls from several threads run
    at once on different workers. Decode settings given to a call apply to that call only.
    """

    @classmethod
    def load(
        cls,
        model: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
        device: str | torch.device = "auto",
        precision: str = "fp32",
        decode: DecodeOverrides | None = None,
        threads: int = 0,
    ) -> Translator:
        """Load a checkpoint (or several, as an ensemble) on `device` ("auto", "cpu", "cuda",
        "cuda:N", or a torch.device) to decode in `precision` ("fp32", "bf16", "int8" on CPU,
        "fp16" on GPU); `decode` overrides the recipe's [decode] settings for every call; `threads`
        sets torch's CPU threads (process-wide; 0 leaves them). Raises `nmt_cli.errors.NmtError`
        with a one-line message for a missing or damaged checkpoint, `SettingError` (a ValueError)
        for a bad setting, and TypeError for an argument of the wrong type."""
        check_setting("threads", threads)
        paths, overrides = arguments.checkpoint_paths(model), arguments.overrides_of(decode)
        translator = load_translator(paths, arguments.device_of(device), precision, overrides)
        if threads > 0:
            torch.set_num_threads(threads)
        return translator

    @overload
    def translate(
        self,
        lines: Sequence[str],
        *,
        split_sentences: bool = True,
        alignments: Literal[False] = False,
        constraints: Iterable[Sequence[str]] | None = None,
        **options: Unpack[DecodeOptions],
    ) -> list[str]: ...

    @overload
    def translate(
        self,
        lines: Sequence[str],
        *,
        split_sentences: bool = True,
        alignments: Literal[True],
        constraints: Iterable[Sequence[str]] | None = None,
        **options: Unpack[DecodeOptions],
    ) -> list[tuple[str, Alignment]]: ...

    def translate(
        self,
        lines: Sequence[str],
        *,
        split_sentences: bool = True,
        alignments: bool = False,
        constraints: Iterable[Sequence[str]] | None = None,
        **options: Unpack[DecodeOptions],
    ) -> list[str] | list[tuple[str, Alignment]]:
        """The best translation of each line (or a sampled one), in input order; a line without
        letters or digits as it is ("" for an empty one). `alignments`: each with its word
        alignment, (source word, target word) pairs with words counted over the whole line.
        `constraints`: a list of target phrases for each line, which its translation must contain
        (such lines are translated whole); `glossary=`: terms enforced where a sentence holds their
        source side; `ordered_constraints=True`: the phrases in the order given. A phrase that
        cannot be met raises `ConstraintError` (an InputError)."""
        lines = text_lines(lines, "translate")
        arguments.check_flags(split_sentences=split_sentences, alignments=alignments)
        settings = arguments.call_settings(self.settings, options, 1, "translate")
        settings = dataclasses.replace(settings, scores=False, alignments=alignments)
        results = self.translate_texts(lines, settings, split_sentences, constraints)
        if alignments:
            return [(r.hyps[0][0], r.alignment or ()) for r in results]
        return [r.hyps[0][0] for r in results]

    def translate_html(
        self, fragments: Sequence[str], *, document: bool = False, **options: Unpack[DecodeOptions]
    ) -> list[str]:
        """Each HTML fragment translated with its markup (`decoding.markup`; needs lxml: `pip install
        "nmt-cli[html]"`): blocks whole, inline elements on the aligned words, code and attributes
        kept; a text opening with a doctype or <html> (each, with `document`) is a whole page."""
        fragments = text_lines(fragments, "translate_html", "fragments")
        arguments.check_flags(document=document)
        settings = arguments.call_settings(self.settings, options, 1, "translate_html")
        return self.translate_markup(fragments, dataclasses.replace(settings, scores=False), document)

    def translate_nbest(
        self,
        lines: Sequence[str],
        nbest: int = 1,
        *,
        split_sentences: bool = True,
        constraints: Iterable[Sequence[str]] | None = None,
        **options: Unpack[DecodeOptions],
    ) -> list[Hypotheses]:
        """`nbest` (text, score) hypotheses per line, best first; past those found (an empty line:
        one, "" scored 0.0), "" scored -inf. The settings (default: the recipe's, the beam raised
        to `nbest` when not given; `sampling` draws one hypothesis a line instead) apply to this
        call only; one out of range, or in conflict with another, raises `SettingError`. A line of
        several sentences gets as its i-th hypothesis the i-th of each sentence, joined, scored by
        their mean. `constraints`, `glossary=` and `ordered_constraints=` as `translate` takes them."""
        lines = text_lines(lines, "translate_nbest")
        arguments.check_flags(split_sentences=split_sentences)
        settings = arguments.call_settings(self.settings, options, nbest, "translate_nbest")
        return [r.hyps for r in self.translate_texts(lines, settings, split_sentences, constraints)]

    def settings(
        self,
        search: DecodeOverrides = DecodeOverrides(),
        nbest: int | None = None,
        batch_tokens: int | None = None,
        sampling: Sampling | None = None,
    ) -> DecodeSettings:
        """The checked settings of a call, over this translator's defaults (`settings.resolve`);
        `batch_tokens` None: the default of the translator's device (`default_batch_tokens`)."""
        if batch_tokens is None:
            batch_tokens = default_batch_tokens(self.device.type)
        settings = resolve(self.decode, search, nbest, batch_tokens, sampling)
        if settings.search.shortlist and self.shortlist is None:
            raise SettingError(
                "shortlist",
                True,
                literal(
                    f"{self.source} has no vocabulary shortlist; learn one with `nmt shortlist -m "
                    f"{self.source} --train PREFIX -o OUT.pt`, or leave it out"
                ),
            )
        return settings

    def __enter__(self) -> Translator:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def load_translator(
    paths: list[Path],
    device: torch.device,
    precision: str,
    overrides: DecodeOverrides = DecodeOverrides(),
) -> Translator:
    """Checkpoints loaded as one ensemble (`loading.load_models`), as a Translator."""
    return _made(load_models(paths, device, precision, overrides))


def load_translators(
    paths: list[Path], device: torch.device, precision: str, overrides: DecodeOverrides = DecodeOverrides()
) -> list[tuple[Translator, list[Path]]]:
    """One translator per language pair the checkpoints record, with its checkpoints
    (`loading.load_model_groups`)."""
    return [
        (_made(loaded), paths) for loaded, paths in load_model_groups(paths, device, precision, overrides)
    ]


def _made(loaded: Loaded) -> Translator:
    translator = Translator(**vars(loaded))
    translator.settings()  # the load-time overrides must make a valid call (a shortlist to use)
    return translator
