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
changes, and only when asked (`threads`).
"""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Literal, NoReturn, SupportsIndex, Unpack, overload

import numpy as np
import torch
from sentencepiece import SentencePieceProcessor

from nmt_cli.data.text import visible, without_nul
from nmt_cli.decoding import arguments
from nmt_cli.decoding.alignment import Alignment
from nmt_cli.decoding.line_decoding import decode_lines, with_phrases
from nmt_cli.decoding.loading import Loaded, load_model_groups, load_models
from nmt_cli.decoding.settings import DecodeOptions, DecodeSettings, Sampling, default_batch_tokens, resolve
from nmt_cli.decoding.terms import Constrained
from nmt_cli.decoding.texts import Hypotheses, Result, text_lines, translate_by_sentence
from nmt_cli.decoding.workers import (
    WorkerPool,
    can_fork,
    decoding_workers,
    fork_safe_threads,
    open_descriptors,
)
from nmt_cli.errors import SettingError, literal, optional_import_failure
from nmt_cli.ranges import check_setting
from nmt_cli.user_settings import DecodeOverrides


@dataclass(eq=False)  # one object per loaded model: equal to itself, hashable
class Translator(Loaded):
    """Loaded models with their sentencepiece processors and default decode settings.

    Safe to share between threads: calls are served one at a time (a lock), so a second caller
    waits for the first; with decoding workers (`start_workers`), calls from several threads run
    at once on different workers. Decode settings given to a call apply to that call only.
    """

    truncated: int = 0
    """Input lines cut to the model's longest source so far."""
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _pool: WorkerPool | None = field(default=None, init=False, repr=False)

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

    @property
    def aligns(self) -> bool:
        """Whether its translations can be word-aligned (sentencepiece models; not Moses + BPE)."""
        return isinstance(self.src_spm, SentencePieceProcessor)

    @property
    def max_source(self) -> int:
        return self.ensemble.max_positions - 1  # room for EOS

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

    def translate_markup(
        self, fragments: Sequence[str], settings: DecodeSettings, documents: bool = False
    ) -> list[str]:
        """`translate_html` with settings made by `settings()`; MarkupError (an InputError) if unreadable."""
        try:
            from nmt_cli.decoding import markup
        except ImportError as err:
            raise optional_import_failure(
                err, 'HTML needs lxml: pip install "nmt-cli[html]"', "lxml"
            ) from None
        # Models tokenized with Moses and BPE give no alignment: their tags go by relative position.
        aligned = dataclasses.replace(settings, alignments=self.aligns)

        def translate(texts: list[str]) -> list[tuple[str, Alignment]]:
            return [(r.hyps[0][0], r.alignment or ()) for r in self.translate_texts(texts, aligned)]

        return markup.translate_fragments(list(fragments), translate, documents)

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

    def translate_with(self, lines: Sequence[str], settings: DecodeSettings) -> list[Hypotheses]:
        """Hypotheses for each line, whole, with settings made by `settings()`."""
        lines, settings = (
            text_lines(lines, "translate_with"),
            arguments.checked_settings(settings, "translate_with"),
        )
        return [r.hyps for r in self.translate_results(lines, settings)]

    def translate_results(
        self,
        lines: Sequence[str | Constrained],
        settings: DecodeSettings,
        constraints: Iterable[Sequence[str]] | None = None,
    ) -> list[Result]:
        """Each line translated whole, with its alignment where `settings.alignments` asks, and
        with its `constraints` and the glossary's terms it matches (`decoding.terms`)."""
        checked = text_lines(lines, "translate_results", kinds=(str, Constrained))
        lines = [without_nul(line) if isinstance(line, str) else line for line in checked]
        settings = arguments.checked_settings(settings, "translate_results")
        if settings.alignments and not self.aligns:
            raise SettingError(
                "alignments", True, literal(f"{self.source} tokenizes with Moses and BPE: no word alignment")
            )
        units: list[str | Constrained] = list(lines)
        if constraints is not None or settings.glossary is not None:
            units = self.constrained(lines, settings, constraints)
            settings = dataclasses.replace(settings, glossary=None)  # applied: no need to ship it
        if (pool := self._pool) is None or pool.forked():  # read once: close() may clear it meanwhile
            with self._lock, fork_safe_threads():
                return decode_lines(self, units, settings)
        results, truncated = pool.map(units, settings)
        with self._lock:
            self.truncated += truncated
        return results

    def translate_texts(
        self,
        texts: Sequence[str],
        settings: DecodeSettings,
        split: bool = True,
        constraints: Iterable[Sequence[str]] | None = None,
    ) -> list[Result]:
        """Each text translated sentence by sentence (`split`; else whole), the translations joined
        with the whitespace between the sentences; an alignment counts words over the whole text.
        Texts with `constraints` of their own are translated whole: a phrase belongs to the text,
        not to one of its sentences."""
        texts = [without_nul(text) for text in texts]  # before the sentences are cut
        if not split or constraints is not None:
            return self.translate_results(texts, settings, constraints)
        language = self.languages[0] if self.languages else "en"
        return translate_by_sentence(self.translate_results, texts, settings, language)

    @property
    def workers(self) -> int:
        """Decoding processes (1 when decoding in this process, as a fork of the pool's does)."""
        return 1 if self._pool is None or self._pool.forked() else self._pool.workers

    def workers_alive(self) -> int:
        """Decoding processes alive now (1 when decoding in this process)."""
        return self._pool.alive() if self._pool is not None else 1

    def heal_workers(self) -> bool:
        """Replace dead decoding processes now rather than at the next call (a server between
        requests); whether any were replaced."""
        return self._pool.heal() if self._pool is not None else False

    def start_workers(self, workers: int, close_fds: Iterable[int] = ()) -> None:
        """Decode in `workers` processes of one thread each from now on (CPU; 0: one per core, as
        `nmt translate --workers` counts them). Call it before starting threads of your own: the
        processes are forked. `close_fds`: descriptors the workers must not hold (a server's
        listening socket). A worker that dies fails its call with `WorkerDied`; the next call gets
        fresh workers. Stop them with `close()`."""
        check_setting("workers", workers)
        if self.device.type != "cpu" and workers > 1:
            raise SettingError("workers", workers, f"several workers are for CPU decoding, not {self.device}")
        workers = decoding_workers(workers, 0, self.device)
        fds = open_descriptors(close_fds)  # before the running workers stop: a refusal keeps them
        self.close()  # the workers started before, if any
        if workers > 1 and can_fork():
            self._pool = WorkerPool(self._translate_part, workers, fds)

    def close(self) -> None:
        """Stop the decoding workers, if any (`with Translator.load(...) as t:` does at the end).
        A Translator no longer referenced stops them too, when it is collected."""
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def __enter__(self) -> Translator:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __reduce_ex__(self, protocol: SupportsIndex) -> NoReturn:
        # Loaded models, a lock and worker processes: nothing another process could take over.
        raise TypeError("a Translator cannot be pickled or copied; call Translator.load in the other process")

    def _translate_part(
        self, lines: list[str | Constrained], settings: DecodeSettings
    ) -> tuple[list[Result], int]:
        """A worker's share of a call: its lines' results and how many it truncated."""
        before = self.truncated
        return decode_lines(self, lines, settings), self.truncated - before

    def source_ids(self, line: str, count: bool = True) -> np.ndarray:
        """The source pieces of `line` as decoding takes them: cut to the model's positions
        (counted in `truncated` where `count`), invisible characters left out; none for a blank line."""
        # A Python string may hold lone surrogates, which are not UTF-8: they become "?".
        line = visible(line.encode("utf-8", "replace").decode("utf-8"))
        pieces = self.src_spm.encode(line.strip()) if line.strip() else []
        if len(pieces) > self.max_source:
            pieces = pieces[: self.max_source]
            if count:
                self.truncated += 1
        return np.asarray(pieces, dtype=np.int64)

    def constrained(
        self,
        lines: Sequence[str | Constrained],
        settings: DecodeSettings,
        given: Iterable[Sequence[str]] | None,
    ) -> list[str | Constrained]:
        """`lines` with the phrases their translations must contain, checked (`decoding.terms`)."""
        return with_phrases(self, lines, settings, given)


def load_translator(
    paths: list[Path],
    device: torch.device,
    precision: str,
    overrides: DecodeOverrides = DecodeOverrides(),
) -> Translator:
    """Checkpoints loaded as one ensemble (`loading.load_models`), as a Translator."""
    return _made(load_models(paths, device, precision, overrides))


def load_translators(
    paths: list[Path],
    device: torch.device,
    precision: str,
    overrides: DecodeOverrides = DecodeOverrides(),
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
