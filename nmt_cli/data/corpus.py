"""The binarized corpus on disk: its layout, meta.json, and a memory-mapped reader.

Layout of a prepared DATA_DIR (format 1):
    meta.json                  written last; its presence means the corpus is complete
    spm.model                  joint vocabulary, or spm.SRC.model and spm.TGT.model
    {split}.{lang}.bin         all token ids of the split's side back to back (dtype in meta.json)
    {split}.{lang}.idx         int64 offsets, pairs + 1 of them, offsets[0] == 0
Sentence i of a side is tokens[offsets[i]:offsets[i + 1]], without bos/eos.

`corpus_writer` writes a run into a hidden staging directory inside DATA_DIR and renames its
files into place only when all are complete, meta.json last, so an interrupted run never
leaves something that looks like data.
"""

from __future__ import annotations

import json
import mmap
import os
import weakref
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from nmt_cli.errors import InputError

FORMAT = 1
META = "meta.json"


@dataclass
class CorpusMeta:
    """meta.json of a prepared corpus; `to_dict`/`from_dict` are the only code that knows its keys."""

    src: str
    tgt: str
    joint: bool
    dtype: str
    """numpy dtype of the token ids (uint16 below 65,536 pieces)."""
    vocab_size: dict[str, int]
    spm: dict[str, str]
    """File names of the sentencepiece models, by side ("src", "tgt")."""
    spm_sha256: dict[str, str]
    special_ids: dict[str, int]
    splits: dict[str, dict[str, int]]
    """Per split: pairs, src_tokens, tgt_tokens."""
    dropped: dict[str, int]
    """Train pairs dropped, by reason."""
    flagged: dict[str, Any]
    options: dict[str, Any]
    inputs: dict[str, dict[str, str]]
    files: dict[str, int]
    """Every file of the corpus with its size, so a reused corpus is known complete."""
    nmt_version: str
    fingerprint: str = ""
    format: int = field(default=FORMAT)
    corpora: list[dict[str, Any]] = field(default_factory=list)
    """The training corpora in the order they were binarized: src, tgt, pairs (kept), tag. Empty in
    corpora prepared before several were possible: then the train split is one corpus."""

    def corpus_sizes(self) -> list[int]:
        """Pairs of each training corpus; corpus i is the range after the first i."""
        return [int(c["pairs"]) for c in self.corpora] or [self.splits["train"]["pairs"]]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: object, path: Path) -> CorpusMeta:
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            found = data.get("format") if isinstance(data, dict) else None
            raise InputError(
                f"{path}: corpus format {found!r}, this version reads format {FORMAT}; "
                "run `nmt prepare` again"
            )
        try:
            meta = cls(**data)
        except TypeError as err:  # a key missing or unknown
            raise InputError(f"{path}: damaged ({err}); run `nmt prepare` again") from None
        if meta.dtype not in DTYPES:
            raise InputError(f"{path}: damaged (token dtype {meta.dtype!r}); run `nmt prepare` again")
        return meta


def bin_name(split: str, lang: str) -> str:
    return f"{split}.{lang}.bin"


def idx_name(split: str, lang: str) -> str:
    return f"{split}.{lang}.idx"


DTYPES = ("uint16", "int32")


def load_meta(data_dir: Path) -> CorpusMeta:
    """meta.json of a prepared corpus, or an InputError saying what to run."""
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise InputError(f"{data_dir}: no such directory; run `nmt prepare --out {data_dir}` first")
    path = data_dir / META
    if not path.is_file():
        raise InputError(f"{data_dir}: not a prepared corpus (no meta.json); run `nmt prepare` first")
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise InputError(f"{path}: unreadable ({err}); run `nmt prepare` again") from None
    return CorpusMeta.from_dict(meta, path)


LENGTH_DTYPE = np.uint16
MAX_LENGTH = int(np.iinfo(LENGTH_DTYPE).max) - 1  # room for the +1 of EOS/BOS in batching
OFFSETS_CHUNK = 1 << 16  # sentences whose offsets are read at a time (512 KB)


class TokenArray:
    """One side of a split: a flat token array and sentence offsets, both memory-mapped.

    Training reads sentences at random, so with files behind it a sentence and its offsets are
    read with pread instead of through the mappings: the pages stay in the shared page cache
    rather than in each process's resident memory, where touched pages of a 36M-pair corpus
    would otherwise pile up update after update (docs/benchmarks.md, training start-up memory)."""

    def __init__(
        self,
        tokens: np.ndarray,
        offsets: np.ndarray,
        files: tuple[Path, Path] | None = None,
        vocab_size: int | None = None,
    ) -> None:
        self.tokens = tokens
        self.offsets = offsets
        self.vocab_size = vocab_size
        """Ids must be below it: a damaged file is found at the sentence read, without a scan."""
        self.files = files
        """(tokens, offsets) files, when the arrays map them."""
        self._fds: tuple[int, int] | None = None
        if files is not None:
            self._fds = (os.open(files[0], os.O_RDONLY), os.open(files[1], os.O_RDONLY))
            weakref.finalize(self, _close, self._fds)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> np.ndarray:
        ids = self._read(i)
        if self.vocab_size is not None and ids.size and int(ids.max()) >= self.vocab_size:
            where = self.files[0] if self.files is not None else "the corpus"
            raise InputError(
                f"{where}: sentence {int(i) % len(self) + 1:,} has id {int(ids.max())}, beyond the "
                f"vocabulary of {self.vocab_size}; the corpus is damaged, run `nmt prepare` again"
            )
        return ids

    def _read(self, i: int) -> np.ndarray:
        if self._fds is None:
            return np.asarray(self.tokens[self.offsets[i] : self.offsets[i + 1]])
        if not -len(self) <= i < len(self):
            raise IndexError(f"sentence {i} of {len(self)}")
        i = int(i) % len(self)  # a Python int: 8 * a numpy int32 index wraps around past 2**28 pairs
        start, stop = np.frombuffer(os.pread(self._fds[1], 16, 8 * i), dtype=np.int64).tolist()
        size = self.tokens.dtype.itemsize
        return np.frombuffer(
            os.pread(self._fds[0], (stop - start) * size, start * size), dtype=self.tokens.dtype
        )

    def lengths(self) -> np.ndarray:
        """Pieces per sentence without BOS/EOS, as uint16 (capped at MAX_LENGTH): 2 bytes a
        sentence, so that the batch index of a 36M-pair corpus stays small. The offsets are read
        a chunk at a time, not through the mapping (8 bytes a sentence would stay resident)."""
        out = np.empty(len(self), dtype=LENGTH_DTYPE)
        for start in range(0, len(self), OFFSETS_CHUNK):
            stop = min(start + OFFSETS_CHUNK, len(self))
            if self._fds is None:
                offsets = np.asarray(self.offsets[start : stop + 1])
            else:
                offsets = np.frombuffer(
                    os.pread(self._fds[1], 8 * (stop + 1 - start), 8 * start), dtype=np.int64
                )
            np.minimum(np.diff(offsets), MAX_LENGTH, out=out[start:stop], casting="unsafe")
        return out


def _close(fds: tuple[int, int]) -> None:
    for fd in fds:
        os.close(fd)


class ParallelSplit:
    """Aligned source and target sides of one split: pair i is (src[i], tgt[i])."""

    def __init__(self, src: TokenArray, tgt: TokenArray) -> None:
        self.src = src
        self.tgt = tgt

    def __len__(self) -> int:
        return len(self.src)


def _map(path: Path, dtype: str) -> np.ndarray:
    if not path.is_file():
        raise InputError(f"{path}: missing from the prepared corpus; run `nmt prepare` again")
    size, itemsize = path.stat().st_size, np.dtype(dtype).itemsize
    if size % itemsize:  # cut short: numpy could not even view it
        raise InputError(
            f"{path}: {size:,} bytes, not a whole number of {itemsize}-byte {dtype} values; the corpus "
            "is damaged, run `nmt prepare` again"
        )
    if size == 0:
        return np.zeros(0, dtype)  # mmap cannot map an empty file
    with open(path, "rb") as file:
        mapped = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
    if hasattr(mapped, "madvise"):
        # Training reads pairs at random: without this, each page fault also maps the pages
        # around it, and every update left more of the corpus resident (docs/benchmarks.md).
        mapped.madvise(mmap.MADV_RANDOM)
    return np.frombuffer(mapped, dtype=dtype)


def load_array(
    data_dir: Path, split: str, lang: str, dtype: str, vocab_size: int | None = None
) -> TokenArray:
    data_dir = Path(data_dir)
    tokens = _map(data_dir / bin_name(split, lang), dtype)
    offsets = _map(data_dir / idx_name(split, lang), "int64")
    # Only O(1) checks: a full scan would touch every page of a 36M-pair corpus.
    if len(offsets) == 0 or offsets[0] != 0 or offsets[-1] != len(tokens):
        raise InputError(
            f"{data_dir / idx_name(split, lang)}: offsets do not match "
            f"{bin_name(split, lang)}; the corpus is damaged, run `nmt prepare` again"
        )
    files = (data_dir / bin_name(split, lang), data_dir / idx_name(split, lang))
    return TokenArray(tokens, offsets, files if len(tokens) else None, vocab_size)


def load_split(data_dir: Path, split: str) -> ParallelSplit:
    """A memory-mapped split ("train", "valid" or "test"): no Python object per sentence."""
    meta = load_meta(data_dir)
    if split not in meta.splits:
        raise InputError(f"{data_dir}: no {split!r} split (has {', '.join(meta.splits)})")
    src = load_array(data_dir, split, meta.src, meta.dtype, meta.vocab_size["src"])
    tgt = load_array(data_dir, split, meta.tgt, meta.dtype, meta.vocab_size["tgt"])
    if len(src) != len(tgt) or len(src) != meta.splits[split]["pairs"]:
        raise InputError(
            f"{data_dir}: {split} has {len(src)} source and {len(tgt)} target sentences, "
            f"meta.json says {meta.splits[split]['pairs']}; run `nmt prepare` again"
        )
    return ParallelSplit(src, tgt)
