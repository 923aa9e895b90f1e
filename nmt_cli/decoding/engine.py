"""The decoding engine under the Translator: loaded models with the state of decoding (the lines
truncated so far, a lock, the worker processes), and the batch translation: lines, each whole,
with their phrases, through the search in this process or in the decoding workers; texts and
HTML fragments through the text pipeline (`decoding.text_plan`: cut into sentences and joined
back, the markup rebuilt around the translations). The user's API over it is `decoding.translator`.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import NoReturn, SupportsIndex

import numpy as np
from sentencepiece import SentencePieceProcessor

from nmt_cli.data.text import visible, without_nul
from nmt_cli.decoding import arguments
from nmt_cli.decoding.line_decoding import decode_lines, with_phrases
from nmt_cli.decoding.loading import Loaded
from nmt_cli.decoding.settings import DecodeSettings
from nmt_cli.decoding.terms import Constrained
from nmt_cli.decoding.text_plan import Html, TextPlan, parse_html, plan_texts
from nmt_cli.decoding.texts import Result, text_lines
from nmt_cli.decoding.workers import (
    WorkerPool,
    can_fork,
    decoding_workers,
    fork_safe_threads,
    open_descriptors,
)
from nmt_cli.errors import SettingError, literal
from nmt_cli.ranges import check_setting


@dataclass(eq=False)  # one object per loaded model: equal to itself, hashable
class Engine(Loaded):
    """Loaded models that translate batches of lines with settings made by `Translator.settings`.

    Safe to share between threads: calls are served one at a time (a lock), so a second caller
    waits for the first; with decoding workers (`start_workers`), calls from several threads run
    at once on different workers.
    """

    truncated: int = 0
    """Input lines cut to the model's longest source so far."""
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _pool: WorkerPool | None = field(default=None, init=False, repr=False)

    @property
    def aligns(self) -> bool:
        """Whether its translations can be word-aligned (sentencepiece models; not Moses + BPE)."""
        return isinstance(self.src_spm, SentencePieceProcessor)

    @property
    def max_source(self) -> int:
        return self.ensemble.max_positions - 1  # room for EOS

    def translate_markup(
        self, fragments: Sequence[str], settings: DecodeSettings, documents: bool = False
    ) -> list[str]:
        """`translate_html` with settings made by `settings()`; MarkupError (an InputError) if unreadable."""
        html = parse_html(list(fragments), documents)
        # Models tokenized with Moses and BPE give no alignment: their tags go by relative position.
        aligned = dataclasses.replace(settings, alignments=self.aligns)
        texts = [without_nul(text) for text in html.texts]
        return [r.hyps[0][0] for r in self._translated(self.plan(texts, aligned, html=html))]

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
        plan = self.plan(lines, settings, split=False, constraints=constraints)
        if (pool := self._pool) is None or pool.forked():  # read once: close() may clear it meanwhile
            with self._lock, fork_safe_threads():
                return decode_lines(self, plan.units, plan.settings)
        results, truncated = pool.map(plan.units, plan.settings)
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
        return self._translated(self.plan(texts, settings, split, constraints))

    def plan(
        self,
        texts: Sequence[str | Constrained],
        settings: DecodeSettings,
        split: bool = True,
        constraints: Iterable[Sequence[str]] | None = None,
        html: Html | None = None,
    ) -> TextPlan:
        """The checked `settings` and the units `texts` become with this model's language and
        phrases (`text_plan.plan_texts`; `texts` are `html.texts` where they come from HTML)."""
        settings = arguments.checked_settings(settings, "translate_results")
        if settings.alignments and not self.aligns:
            raise SettingError(
                "alignments", True, literal(f"{self.source} tokenizes with Moses and BPE: no word alignment")
            )
        language = self.languages[0] if self.languages else "en"
        return plan_texts(texts, settings, self.constrained, language, split, constraints, html)

    def _translated(self, plan: TextPlan) -> list[Result]:
        """The answers of `plan`, its units translated whole (`translate_results`)."""
        return plan.answers(self.translate_results(plan.units, plan.settings))

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
