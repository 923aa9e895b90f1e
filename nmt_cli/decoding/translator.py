"""Translation as a library, and nmt's Python API:

    from nmt_cli import Translator
    t = Translator.load("avg.pt", device="cpu", precision="bf16")
    t.translate(["A man rides a bike.", "Two dogs play."], beam=4)   # one string per line
    t.translate_nbest(["A man rides a bike."], nbest=3)             # (text, score) lists
    t.translate(["A man rides a bike."], sampling=Sampling("topk", topk=10, seed=7))  # a random draw
    t.translate(["A man rides a bike."], shortlist=True)  # over the model's shortlist (`nmt shortlist`)

Checkpoints are loaded as an ensemble with their sentencepiece models; lists of raw strings go
in. `nmt translate`, `nmt attend`, `nmt serve` and the benchmarks share it. No printing and no
files besides the checkpoints it loads; torch's thread count is the one process-wide setting it
changes, and only when asked (`threads`).
"""

from __future__ import annotations

import dataclasses
import os
import platform
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict, Unpack, cast

import numpy as np
import torch
from sentencepiece import SentencePieceProcessor
from torch import nn

from nmt_cli import checkpoint
from nmt_cli.config import DecodeConfig, DecodeOverrides, RuntimeConfig
from nmt_cli.data.shortlist import Shortlist
from nmt_cli.data.spm import processors
from nmt_cli.data.text import one_line
from nmt_cli.data.tokenizer import MosesBpe
from nmt_cli.decoding import int8
from nmt_cli.decoding.search import Ensemble, translate_sentences
from nmt_cli.decoding.settings import BATCH_TOKENS, DecodeSettings, Sampling, resolve
from nmt_cli.decoding.workers import WorkerPool, can_fork, usable_cores
from nmt_cli.device import check_precision, cpu_has_amx, cpu_has_fast_bf16, resolve_device
from nmt_cli.errors import InputError, SettingError
from nmt_cli.model import Transformer
from nmt_cli.ranges import check_setting

MAX_AUTO_WORKERS = 8  # beyond this, more processes cost memory for little gain at translate's batch sizes

SEARCH_FIELDS = tuple(f.name for f in dataclasses.fields(DecodeOverrides))

Hypotheses = list[tuple[str, float]]
"""A line's (text, score) hypotheses, best first; the score is the length-normalised log-probability."""

PRECISIONS = ("fp32", "bf16", "fp16", "int8")
"""fp32 as trained; bf16 and fp16 (GPU): weights cast once at load (attention softmax and output
log-probabilities stay float32); int8: every linear layer, the output projection included, with
int8 weights per output channel and activations per row (`decoding.int8`; CPU only), so that a
line's output does not depend on the lines batched with it."""


class DecodeOptions(TypedDict, total=False):
    """What `translate` and `translate_nbest` take by keyword, as `nmt translate`'s options of the
    same names (None: the checkpoint's recipe); for that call only."""

    beam: int | None
    lenpen: float | None
    lenpen_style: str | None
    max_len_a: float | None
    max_len_b: int | None
    min_len: int | None
    shortlist: bool | None
    batch_tokens: int
    sampling: Sampling | None


def text_lines(lines: object, method: str) -> list[str]:
    """`lines` as a list of str, or a TypeError naming what is wrong: a single string would be
    translated character by character, and a None or a number has no text."""
    if isinstance(lines, str | bytes):
        raise TypeError(
            f"{method}(lines): a list of strings, not one {type(lines).__name__}; write {method}([text])"
        )
    try:
        items = list(lines)  # type: ignore[call-overload]
    except TypeError:
        raise TypeError(f"{method}(lines): a list of strings, not {type(lines).__name__}") from None
    for i, line in enumerate(items):
        if not isinstance(line, str):
            raise TypeError(f"{method}(lines): lines[{i}] is {type(line).__name__}, not str")
    return items


@dataclass
class Translator:
    """Loaded models with their sentencepiece processors and default decode settings.

    Safe to share between threads: calls are served one at a time (a lock), so a second caller
    waits for the first; with decoding workers (`start_workers`), calls from several threads run
    at once on different workers. Decode settings given to a call apply to that call only.
    """

    ensemble: Ensemble
    decode: DecodeConfig
    """The recipe's [decode] settings with the load-time overrides applied."""
    src_spm: SentencePieceProcessor | MosesBpe
    """Source text -> ids: the sentencepiece model, or an imported model's Moses + BPE."""
    tgt_spm: SentencePieceProcessor | MosesBpe
    device: torch.device
    precision: str
    languages: tuple[str, str] | None = None
    """(source, target) of the training corpus; None for checkpoints that do not record it."""
    shortlist: Shortlist | None = None
    """The vocabulary shortlist stored with the (first) checkpoint, used by calls whose settings
    ask for it (`shortlist`); None when the checkpoint has none."""
    source: Path | None = None
    """The (first) checkpoint, for messages."""
    truncated: int = 0
    """Input lines cut to the model's longest source so far."""
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _pool: WorkerPool | None = field(default=None, init=False, repr=False)

    @classmethod
    def load(
        cls,
        model: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
        device: str = "auto",
        precision: str = "fp32",
        decode: DecodeOverrides = DecodeOverrides(),
        threads: int = 0,
    ) -> Translator:
        """Load a checkpoint (or several, as an ensemble) on `device` ("auto", "cpu", "cuda",
        "cuda:N") to decode in `precision` ("fp32", "bf16", "int8" on CPU, "fp16" on GPU);
        `decode` overrides the recipe's [decode] settings for every call; `threads` sets torch's
        CPU threads (process-wide; 0 leaves them). Raises `nmt_cli.errors.NmtError` with a
        one-line message for a missing or damaged checkpoint, and `SettingError` (a ValueError)
        for a bad setting."""
        check_setting("threads", threads)
        paths = [Path(model)] if isinstance(model, str | os.PathLike) else [Path(p) for p in model]
        if not paths:
            raise InputError("Translator.load: no checkpoint given")
        translator = load_translator(paths, resolve_device(device), precision, decode)
        if threads > 0:
            torch.set_num_threads(threads)
        return translator

    @property
    def max_source(self) -> int:
        return self.ensemble.max_positions - 1  # room for EOS

    def translate(self, lines: Sequence[str], **options: Unpack[DecodeOptions]) -> list[str]:
        """The best translation of each line (or a sampled one), in input order; "" for an empty line."""
        lines = text_lines(lines, "translate")
        settings = dataclasses.replace(self._settings_of(options, 1), scores=False)
        return [hyps[0][0] for hyps in self.translate_with(lines, settings)]

    def translate_nbest(
        self, lines: Sequence[str], nbest: int = 1, **options: Unpack[DecodeOptions]
    ) -> list[Hypotheses]:
        """Up to `nbest` (text, score) hypotheses per line, best first; an empty line gets one
        empty hypothesis. The settings (default: the recipe's, the beam raised to `nbest` when not
        given; `sampling` draws one hypothesis per line instead of searching) apply to this call
        only; one out of range, or in conflict with another, raises `SettingError`."""
        lines = text_lines(lines, "translate_nbest")
        return self.translate_with(lines, self._settings_of(options, nbest))

    def _settings_of(self, options: DecodeOptions, nbest: int) -> DecodeSettings:
        unknown = sorted(set(options) - set(DecodeOptions.__annotations__))
        if unknown:
            raise TypeError(f"translate_nbest() got an unexpected keyword argument {unknown[0]!r}")
        given = cast(dict[str, Any], options)
        search = DecodeOverrides(**{name: given[name] for name in SEARCH_FIELDS if name in given})
        return self.settings(search, nbest, given.get("batch_tokens", BATCH_TOKENS), given.get("sampling"))

    def settings(
        self,
        search: DecodeOverrides = DecodeOverrides(),
        nbest: int | None = None,
        batch_tokens: int = BATCH_TOKENS,
        sampling: Sampling | None = None,
    ) -> DecodeSettings:
        """The checked settings of a call, over this translator's defaults (`settings.resolve`)."""
        settings = resolve(self.decode, search, nbest, batch_tokens, sampling)
        if settings.search.shortlist and self.shortlist is None:
            raise SettingError(
                "shortlist",
                True,
                f"{self.source} has no vocabulary shortlist; learn one with `nmt shortlist -m "
                f"{self.source} --train PREFIX -o OUT.pt`, or leave it out",
            )
        return settings

    def translate_with(self, lines: Sequence[str], settings: DecodeSettings) -> list[Hypotheses]:
        """Hypotheses for each line with settings made by `settings()`."""
        if self._pool is None:
            with self._lock:
                return self._translate(list(lines), settings)
        results, truncated = self._pool.map(list(lines), settings)
        with self._lock:
            self.truncated += truncated
        return results

    @property
    def workers(self) -> int:
        """Decoding processes (1 when decoding in this process)."""
        return self._pool.workers if self._pool is not None else 1

    def workers_alive(self) -> int:
        """Decoding processes alive now (1 when decoding in this process)."""
        return self._pool.alive() if self._pool is not None else 1

    def heal_workers(self) -> bool:
        """Replace dead decoding processes now rather than at the next call (a server between
        requests); whether any were replaced."""
        return self._pool.heal() if self._pool is not None else False

    def start_workers(self, workers: int, close_fds: Sequence[int] = ()) -> None:
        """Decode in `workers` processes of one thread each from now on (CPU; 0: one per core, as
        `nmt translate --workers` counts them). Call it before starting threads of your own: the
        processes are forked. `close_fds`: descriptors the workers must not hold (a server's
        listening socket). A worker that dies fails its call with `WorkerDied`; the next call gets
        fresh workers. Stop them with `close()`."""
        check_setting("workers", workers)
        if self.device.type != "cpu" and workers > 1:
            raise SettingError("workers", workers, f"several workers are for CPU decoding, not {self.device}")
        workers = decoding_workers(RuntimeConfig(workers=workers), self.device)
        if workers > 1 and can_fork():
            self._pool = WorkerPool(self._translate_part, workers, close_fds)

    def close(self) -> None:
        """Stop the decoding workers, if any."""
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def _translate_part(self, lines: list[str], settings: DecodeSettings) -> tuple[list[Hypotheses], int]:
        """A worker's share of a call: its lines' results and how many it truncated."""
        before = self.truncated
        return self._translate(lines, settings), self.truncated - before

    def source_ids(self, line: str) -> np.ndarray:
        """The source pieces of `line` as decoding takes them: cut to the model's positions
        (counted in `truncated`); none for a blank line."""
        # A Python string may hold lone surrogates, which are not UTF-8: they become "?".
        line = line.encode("utf-8", "replace").decode("utf-8")
        pieces = self.src_spm.encode(line.strip()) if line.strip() else []
        if len(pieces) > self.max_source:
            pieces = pieces[: self.max_source]
            self.truncated += 1
        return np.asarray(pieces, dtype=np.int64)

    def _translate(self, lines: list[str], settings: DecodeSettings) -> list[Hypotheses]:
        ids = [self.source_ids(line) for line in lines]
        todo = [i for i, x in enumerate(ids) if len(x)]
        results: list[Hypotheses] = [_padded([("", 0.0)], settings.nbest) for _ in lines]
        hyps = translate_sentences(
            self.ensemble,
            [ids[i] for i in todo],
            settings.search,
            settings.batch_tokens,
            self.device,
            settings.nbest,
            settings.sampling,
            self.shortlist if settings.search.shortlist else None,
            settings.scores,
        )
        for i, sentence in zip(todo, hyps, strict=True):
            found = [(one_line(self.tgt_spm.decode(h.tokens)), h.score) for h in sentence]
            results[i] = _padded(found or [("", 0.0)], settings.nbest)
        return results


def _padded(hyps: Hypotheses, nbest: int) -> Hypotheses:
    """Exactly `nbest` hypotheses: where the search found fewer distinct ones (an empty line, tight
    length limits), the rest are empty with score -inf."""
    return hyps + [("", float("-inf"))] * (nbest - len(hyps))


def default_precision(device: torch.device) -> str:
    """The fastest precision that keeps quality on `device` (see bench/decode_vs_ctranslate2.py)."""
    if device.type == "cuda":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    # fbgemm's int8 runs on any x86 CPU and was the fastest there within 0.3 BLEU of fp32: on an
    # AVX2-only AMD EPYC (15% faster than fp32, where bf16 is emulated and tens of times slower),
    # and ahead of bf16 where the CPU multiplies bf16 with AVX512-BF16 alone: bf16 took 1.10x
    # int8's time on an AMD EPYC (5,000 lines, beam 4, paired whole-process runs) and 1.69x on an
    # Intel Xeon (bench/decode_vs_ctranslate2.py). With AMX, bf16 is ahead: 16.3 s against 20.0 s
    # for int8 on an Intel Xeon (the same lines, paired runs). Elsewhere int8 has no tuned kernel
    # here: bf16 where the hardware has it, else fp32.
    if platform.machine().lower() in ("x86_64", "amd64"):
        return "bf16" if cpu_has_amx() else "int8"
    return "bf16" if cpu_has_fast_bf16() else "fp32"


def decoding_workers(runtime: RuntimeConfig, device: torch.device) -> int:
    """Decoding processes: as asked; by default one per core on CPU (each of one thread), unless a
    thread count is given, which then goes to a single process."""
    if device.type != "cpu":
        return 1
    if runtime.workers == 0:
        return 1 if runtime.threads > 0 else min(usable_cores(), MAX_AUTO_WORKERS)
    return runtime.workers


def load_translator(
    paths: list[Path],
    device: torch.device,
    precision: str,
    overrides: DecodeOverrides = DecodeOverrides(),
) -> Translator:
    """Load one or more checkpoints as an ensemble; they must share the target vocabulary."""
    check_precision(precision, device, PRECISIONS)
    return _ensemble([(path, checkpoint.load(path)) for path in paths], device, precision, overrides)


def load_translators(
    paths: list[Path],
    device: torch.device,
    precision: str,
    overrides: DecodeOverrides = DecodeOverrides(),
) -> list[tuple[Translator, list[Path]]]:
    """One translator per language pair that the checkpoints record, with its checkpoints, in the
    order of first appearance; checkpoints of the same pair form an ensemble. Checkpoints that
    record no languages (an older nmt's) can only be served alone or with each other: nothing
    would route to them."""
    check_precision(precision, device, PRECISIONS)
    pairs: dict[tuple[str, str] | None, list[tuple[Path, checkpoint.Checkpoint]]] = {}
    for path in paths:
        ckpt = checkpoint.load(path)
        pairs.setdefault(ckpt.languages, []).append((path, ckpt))
    if None in pairs and len(pairs) > 1:
        path = pairs[None][0][0]
        raise InputError(
            f"checkpoint {path}: records no languages, so requests cannot be routed to it beside "
            "other language pairs; serve it on its own"
        )
    return [
        (_ensemble(group, device, precision, overrides), [path for path, _ in group])
        for group in pairs.values()
    ]


def _ensemble(
    loaded: list[tuple[Path, checkpoint.Checkpoint]],
    device: torch.device,
    precision: str,
    overrides: DecodeOverrides,
) -> Translator:
    if precision == "int8" and device.type != "cpu":
        raise InputError(f"precision int8 is for CPU decoding; on {device} use bf16 or fp16")
    paths = [path for path, _ in loaded]
    models, spm_models, tokenizers, cfg, direction, shortlist = [], None, None, None, None, None
    for path, ckpt in loaded:
        run_cfg = ckpt.run_config(path)
        if spm_models is None:
            spm_models, tokenizers, cfg = ckpt.spm, ckpt.tokenizers, run_cfg
            if ckpt.shortlist is not None:
                sizes = (run_cfg.model.src_vocab_size, run_cfg.model.tgt_vocab_size)
                shortlist = Shortlist.from_dict(ckpt.shortlist, *sizes, f"checkpoint {path}").to(device)
        elif ckpt.spm != spm_models or ckpt.tokenizers != tokenizers:
            raise InputError(
                f"cannot ensemble {paths[0]} and {path}: they were trained with different "
                "sentencepiece models"
            )
        direction = checkpoint.one_direction(direction, ckpt, path, "ensemble")
        model = Transformer.holding(run_cfg.model, ckpt.model)
        models.append(for_decoding(model.eval().to(device), precision))
    assert cfg is not None and spm_models is not None
    translator = Translator(
        Ensemble(models),
        overrides.apply(cfg.decode),
        *processors(spm_models, tokenizers),
        device,
        precision,
        direction[1] if direction else None,
        shortlist,
        paths[0],
    )
    translator.settings()  # the load-time overrides must make a valid call (a shortlist to use)
    return translator


def for_decoding(model: Transformer, precision: str) -> Transformer:
    """The model in the form that decodes fastest at `precision`, converted once at load: per-step
    casts (autocast) cost more than the arithmetic they save at decoding's small batches."""
    if precision in ("bf16", "fp16"):
        return model.to(torch.bfloat16 if precision == "bf16" else torch.float16)
    if precision != "int8":
        return model
    if model.output_proj is None:
        # A projection of its own that shares the embedding matrix, so that it is quantized too:
        # it holds most of a small model's arithmetic per step.
        # Made on the meta device: drawing initial weights only to replace them took 30 ms of
        # every start with a 32,000-piece vocabulary.
        tied = nn.Linear(model.cfg.d_model, model.cfg.tgt_vocab_size, bias=False, device="meta")
        tied.weight = model.tgt_embed.tokens.weight
        model.output_proj = tied
    return cast(Transformer, int8.quantize(model))
