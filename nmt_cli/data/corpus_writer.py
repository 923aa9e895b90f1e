"""Writing a binarized corpus (the layout is in `corpus`): the side writers, the staging
directory a run fills, and its atomic publication with meta.json last, so that an interrupted run
never leaves something that looks like data. Also whether a finished corpus can be reused."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from nmt_cli.data import corpus
from nmt_cli.errors import InputError
from nmt_cli.files import process_alive

STAGING_PREFIX = ".nmt-prepare-"


def token_dtype(vocab_size: int) -> str:
    """uint16 halves the disk and page cache when every id fits; int32 otherwise."""
    return "uint16" if vocab_size <= np.iinfo(np.uint16).max + 1 else "int32"


class SideWriter:
    """Appends sentences of one split and side to `.bin` and `.idx` files as they are encoded,
    so memory use does not depend on the corpus size."""

    def __init__(self, directory: Path, split: str, lang: str, dtype: str) -> None:
        self.dtype = np.dtype(dtype)
        self.tokens = (directory / corpus.bin_name(split, lang)).open("wb")
        self.offsets = (directory / corpus.idx_name(split, lang)).open("wb")
        self.offsets.write(np.zeros(1, np.int64).tobytes())
        self.total = 0
        self.sentences = 0

    def write(self, tokens: np.ndarray, lengths: np.ndarray) -> None:
        """`tokens`: the flat ids of a chunk of sentences; `lengths`: pieces per sentence."""
        self.tokens.write(tokens.astype(self.dtype, copy=False).tobytes())
        self.offsets.write((self.total + np.cumsum(lengths, dtype=np.int64)).tobytes())
        self.total += int(tokens.size)
        self.sentences += int(lengths.size)

    def close(self) -> None:
        for stream in (self.tokens, self.offsets):
            stream.flush()
            os.fsync(stream.fileno())
            stream.close()


def check_out_dir(out: Path) -> Path | None:
    """Fail before anything is written if `out` cannot be created or written; return the
    topmost directory a run will have to create (None if `out` exists)."""
    if out.exists():
        if not out.is_dir():
            raise InputError(f"--out {out}: exists and is not a directory")
        if not os.access(out, os.W_OK | os.X_OK):
            raise InputError(f"--out {out}: directory is not writable")
        return None
    missing = out.absolute()
    while not missing.parent.exists():
        missing = missing.parent
    parent = missing.parent
    if not parent.is_dir():
        raise InputError(f"--out {out}: cannot create it, {parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(f"--out {out}: cannot create it, {parent} is not writable")
    return missing


def remove_created(out: Path, created: Path | None) -> None:
    """Remove the (empty) directories from `out` up to `created`, so that a failed run
    leaves nothing behind."""
    if created is None:
        return
    path = out.absolute()
    while True:
        try:
            path.rmdir()
        except OSError:
            return
        if path == created:
            return
        path = path.parent


def discard_staging(staging: Path) -> None:
    shutil.rmtree(staging, ignore_errors=True)


def make_staging(out: Path) -> Path:
    """A fresh staging directory inside `out`; leftovers of dead runs are removed first."""
    for old in out.glob(f"{STAGING_PREFIX}*"):
        pid = old.name[len(STAGING_PREFIX) :]
        if not pid.isdigit() or not process_alive(int(pid)):
            shutil.rmtree(old, ignore_errors=True)
    staging = out / f"{STAGING_PREFIX}{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    return staging


def publish(staging: Path, out: Path, meta: corpus.CorpusMeta) -> None:
    """Move every staged file into `out`, then write meta.json: the last step, atomically.

    The old meta.json goes first so that old metadata never describes new files; files of
    the old corpus that the new one lacks (say, a test split no longer given) go too.
    """
    old_files = _old_files(out)
    (out / corpus.META).unlink(missing_ok=True)
    for path in sorted(staging.iterdir()):
        os.replace(path, out / path.name)
    for name in old_files - set(meta.files):
        (out / name).unlink(missing_ok=True)
    temp = staging / corpus.META
    with temp.open("w", encoding="utf-8") as stream:
        stream.write(json.dumps(meta.to_dict(), indent=2, ensure_ascii=False) + "\n")
        stream.flush()
        os.fsync(stream.fileno())  # on disk before the rename makes it count
    os.replace(temp, out / corpus.META)
    staging.rmdir()


def _old_files(out: Path) -> set[str]:
    try:
        files = json.loads((out / corpus.META).read_text(encoding="utf-8")).get("files", {})
    except (OSError, ValueError, AttributeError):
        return set()
    # Only plain names: a damaged meta.json must not make us delete outside `out`.
    return {name for name in files if isinstance(name, str) and name == Path(name).name}


def fingerprint(inputs: Mapping[str, tuple[Path, ...]], options: dict) -> str:
    """What decides a prepared corpus: the options and each input file's path, size and mtime."""
    stats = {
        split: [[str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns] for p in paths]
        for split, paths in inputs.items()
    }
    blob = json.dumps({"format": corpus.FORMAT, "options": options, "inputs": stats}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def find_reusable(out: Path, fingerprint: str) -> corpus.CorpusMeta | None:
    """meta.json of a complete corpus in `out` made from the same inputs and options, or None."""
    if not (out / corpus.META).is_file():
        return None
    try:
        meta = corpus.load_meta(out)
    except InputError:
        return None
    if meta.fingerprint != fingerprint:
        return None
    written = (out / corpus.META).stat().st_mtime_ns  # meta.json is written after every file it lists
    for name, size in meta.files.items():
        path = out / name
        # A file changed since (bytes overwritten in place keep its size) is redone, as the
        # messages about a damaged corpus tell the user to do.
        if not path.is_file() or path.stat().st_size != size or path.stat().st_mtime_ns > written:
            return None
    return meta
