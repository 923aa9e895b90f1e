"""Sentencepiece BPE: learn a model from sentences, load one from bytes, read a prepared
corpus's models. Models travel as bytes so that checkpoints can carry them.

Every model is trained with the fixed ids of `config` (pad 0, unk 1, bos 2, eos 3);
binarized data holds no bos/eos, training adds them.
"""

from __future__ import annotations

import hashlib
import io
import itertools
import multiprocessing
import os
import re
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import sentencepiece

from nmt_cli.data import tokenizer
from nmt_cli.errors import InputError, NmtError, RunFailure, Terminated
from nmt_cli.special_ids import BOS_ID, EOS_ID, PAD_ID, UNK_ID

if TYPE_CHECKING:
    from nmt_cli.data.corpus import CorpusMeta

T = TypeVar("T")
R = TypeVar("R")

Tokenizers = dict[str, dict[str, Any]]
"""How a model reads text besides its sentencepiece models, by side (`Checkpoint.tokenizers`)."""

NORMALIZATIONS = ("identity", "nmt_nfkc", "nfkc", "nmt_nfkc_cf", "nfkc_cf")


def train_spm(
    sentences: Iterable[str],
    *,
    vocab_size: int,
    character_coverage: float,
    byte_fallback: bool,
    normalization: str,
    threads: int,
    what: str,
    user_symbols: Iterable[str] = (),
) -> bytes:
    """Learn a BPE model from `sentences` (already sampled) and return its serialized bytes.

    `what` names the corpus in error messages; `user_symbols` are pieces kept whole (tags). What
    is raised while iterating `sentences` (an NmtError such as invalid UTF-8, or the
    KeyboardInterrupt / Terminated of a signal) is re-raised as is: sentencepiece's C++ loop would
    otherwise turn it into a RuntimeError that names only the Python frame it came from.
    """
    failure: list[BaseException] = []
    count = [0]

    def guarded() -> Iterator[str]:
        try:
            for sentence in sentences:
                count[0] += 1
                yield sentence
        except (NmtError, KeyboardInterrupt, Terminated) as err:
            failure.append(err)
            raise  # stops sentencepiece at once instead of learning from a partial sample

    model = io.BytesIO()
    try:
        sentencepiece.SentencePieceTrainer.train(
            sentence_iterator=guarded(),
            model_writer=model,
            model_type="bpe",
            vocab_size=vocab_size,
            character_coverage=character_coverage,
            byte_fallback=byte_fallback,
            normalization_rule_name=normalization,
            pad_id=PAD_ID,
            unk_id=UNK_ID,
            bos_id=BOS_ID,
            eos_id=EOS_ID,
            num_threads=max(1, threads),
            input_sentence_size=0,
            minloglevel=2,
            user_defined_symbols=",".join(user_symbols),  # "" adds none: the same bytes as without
        )
    except RuntimeError as err:
        if failure:
            raise failure[0] from None
        raise _training_error(str(err), vocab_size, what, count[0]) from None
    if failure:
        raise failure[0]
    return model.getvalue()


def _training_error(message: str, vocab_size: int, what: str, sentences: int) -> NmtError:
    """Turn sentencepiece's CHECK failures into advice on --vocab-size."""
    too_high = re.search(r"Vocabulary size too high \((\d+)\)\. Please set it to a value <= (\d+)", message)
    if too_high:
        return InputError(
            f"--vocab-size {vocab_size} is larger than {what} can support; the largest that "
            f"works is {too_high.group(2)}"
        )
    too_low = re.search(r"smaller than required_chars\. (\d+) vs (\d+)", message)
    if too_low:
        return InputError(
            f"--vocab-size {vocab_size} is too small for the {too_low.group(2)} characters and "
            f"special pieces of {what}; use at least {too_low.group(2)} or lower "
            "--character-coverage"
        )
    if sentences == 0:
        return InputError(f"{what}: no non-empty lines to learn a vocabulary from")
    return RunFailure(f"sentencepiece could not learn a model from {what}: {message.splitlines()[-1]}")


def load_processor(model_bytes: bytes) -> sentencepiece.SentencePieceProcessor:
    """A processor from a serialized model (as stored in a corpus or a checkpoint): sentencepiece's,
    or an imported model's Moses + BPE (`tokenizer.serialized`), which has the same methods."""
    if tokenizer.is_serialized(model_bytes):
        return tokenizer.deserialized(model_bytes)  # type: ignore[return-value]
    processor = sentencepiece.SentencePieceProcessor()
    processor.LoadFromSerializedProto(model_bytes)
    return processor


def same_pieces(a: bytes, b: bytes) -> bool:
    """Whether two models have the same pieces under the same ids."""
    if a == b:
        return True
    first, second = load_processor(a), load_processor(b)
    size = first.get_piece_size()
    return size == second.get_piece_size() and all(
        first.id_to_piece(i) == second.id_to_piece(i) for i in range(size)
    )


def processors(spm_models: dict[str, bytes], tokenizers: Tokenizers | None) -> tuple[Any, Any]:
    """The (source, target) text <-> ids converters of a checkpoint: its sentencepiece models, or
    the tokenizers an imported model came with."""
    return tuple(_processor(side, spm_models, (tokenizers or {}).get(side)) for side in ("src", "tgt"))


def _processor(side: str, spm_models: dict[str, bytes], spec: dict[str, Any] | None) -> Any:
    processor = load_processor(spm_models[side])
    return (
        tokenizer.LanguageCodes(processor)
        if spec is not None and spec.get("kind") == tokenizer.LANGUAGE_CODES
        else processor
    )


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_models(data_dir: Path, meta: CorpusMeta) -> tuple[bytes, bytes]:
    """The (source, target) model bytes of a prepared corpus, checked against meta.json's
    checksums; identical bytes when the vocabulary is joint."""
    models = []
    for side in ("src", "tgt"):
        path = Path(data_dir) / meta.spm[side]
        try:
            data = path.read_bytes()
        except OSError as err:
            raise InputError(
                f"{path}: cannot read the sentencepiece model ({err.strerror}); run `nmt prepare` again"
            ) from None
        if sha256(data) != meta.spm_sha256[side]:
            raise InputError(
                f"{path}: checksum differs from meta.json; the corpus was changed after "
                "`nmt prepare`, run it again"
            )
        models.append(data)
    return models[0], models[1]


def read_tokenizers(data_dir: Path, meta: CorpusMeta) -> Tokenizers | None:
    """How a prepared corpus's text was read besides its sentencepiece models: the tokenizers of
    the model of --spm-from, which prepare records among the options (None in corpora prepared
    before it did, and in those of nmt's own models)."""
    found = meta.options.get("tokenizers")
    if found is not None and not (
        isinstance(found, dict) and all(isinstance(v, dict) for v in found.values())
    ):
        raise InputError(f"{Path(data_dir) / 'meta.json'}: damaged (its tokenizers); run `nmt prepare` again")
    return found or None


def encode_lines(
    processor: sentencepiece.SentencePieceProcessor, lines: list[str]
) -> tuple[np.ndarray, np.ndarray]:
    """Ids of many sentences as one flat int32 array plus the number of pieces of each."""
    ids = processor.encode(lines, num_threads=1)  # parallelism comes from ParallelEncoder's processes
    lengths = np.fromiter(map(len, ids), np.int64, count=len(ids))
    flat = np.fromiter(itertools.chain.from_iterable(ids), np.int32, count=int(lengths.sum()))
    return flat, lengths


# The processors of a ParallelEncoder's worker process (or of the main one, when inline).
_PROCESSORS: dict[str, sentencepiece.SentencePieceProcessor] = {}
PARENT_CHECK_S = 1.0


class WorkerDied(RunFailure):
    """A ParallelEncoder worker process ended (killed, or out of memory) before its task was done."""


def _init_processors(models: tuple[bytes, bytes], tokenizers: Tokenizers | None) -> None:
    if tokenizers:
        _PROCESSORS["src"], _PROCESSORS["tgt"] = processors({"src": models[0], "tgt": models[1]}, tokenizers)
        return
    _PROCESSORS["src"] = load_processor(models[0])
    _PROCESSORS["tgt"] = _PROCESSORS["src"] if models[1] == models[0] else load_processor(models[1])


def _start_worker(parent: int, models: tuple[bytes, bytes], tokenizers: Tokenizers | None) -> None:
    # Ctrl-C reaches the whole process group: the parent stops the workers and reports it once.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # A worker waits on a queue whose writing end it holds itself, so it would outlive a parent
    # killed with SIGKILL: it watches the parent instead.
    threading.Thread(target=_exit_with, args=(parent,), daemon=True).start()
    _init_processors(models, tokenizers)


def _exit_with(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(PARENT_CHECK_S)
    os._exit(1)


def worker_processor(side: str) -> sentencepiece.SentencePieceProcessor:
    """Inside a function run by `ParallelEncoder.map`: the processor of "src" or "tgt"."""
    return _PROCESSORS[side]


class ParallelEncoder:
    """Maps a function over tasks, in order, in `workers` processes that each hold the source and
    target processors, with `tokenizers` where given (`processors`; inline when workers == 1). At
    most two tasks per worker are in flight, so memory stays flat however many tasks there are. A
    worker that dies fails the map with WorkerDied (a ProcessPoolExecutor notices; a
    multiprocessing.Pool would wait for the lost task forever)."""

    def __init__(
        self, models: tuple[bytes, bytes], workers: int, tokenizers: Tokenizers | None = None
    ) -> None:
        self.models, self.workers, self.tokenizers = models, workers, tokenizers
        self.executor: ProcessPoolExecutor | None = None

    def __enter__(self) -> ParallelEncoder:
        if self.workers > 1:
            # spawn rather than fork: the parent may run threads (tqdm's monitor).
            self.executor = ProcessPoolExecutor(
                self.workers,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_start_worker,
                initargs=(os.getpid(), self.models, self.tokenizers),
            )
        else:
            _init_processors(self.models, self.tokenizers)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.executor is None:
            return
        # End the workers now, busy or not: shutdown alone would wait for the tasks in flight.
        processes = list((getattr(self.executor, "_processes", None) or {}).values())  # None once broken
        self.executor.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            process.kill()
        for process in processes:
            process.join()

    def map(self, function: Callable[[T], R], tasks: Iterable[T]) -> Iterator[R]:
        if self.executor is None:
            yield from map(function, tasks)
            return
        pending: deque[Future[R]] = deque()
        try:
            for task in tasks:
                pending.append(self.executor.submit(function, task))
                if len(pending) >= 2 * self.workers:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        except BrokenProcessPool:
            raise WorkerDied("an encoding worker process died (killed, or out of memory?)") from None
