"""Whether an existing `nmt prepare --out` directory is a corpus of ours, which a run may replace,
or holds files of somebody else's, which it must not."""

from __future__ import annotations

import json
from dataclasses import MISSING, fields
from pathlib import Path

from nmt_cli.data.corpus import META, CorpusMeta
from nmt_cli.errors import InputError


def refuse_foreign(out: Path) -> None:
    """Refuse an existing `out` that holds files and is not a corpus of ours: a run would replace
    any of them that has the name of a corpus file (meta.json, spm.model, ...)."""
    if not out.is_dir():
        return  # the run creates it
    try:
        names = sorted(p.name for p in out.iterdir())
    except OSError as err:
        raise InputError(f"--out {out}: cannot list the directory ({err.strerror})") from None
    # Hidden files (a killed run's staging folder, .DS_Store) and a file system's lost+found are
    # not what a run would replace.
    others = [name for name in names if not name.startswith(".") and name != "lost+found"]
    if not others or _is_corpus_meta(out / META):
        return
    binarized = any(name.endswith((".bin", ".idx")) for name in others)
    if META not in names and binarized and all(_corpus_shaped(name) for name in others):
        return  # a run stopped while it moved its files in: they are ours, meta.json was not written yet
    listed = ", ".join(others[:3]) + (", ..." if len(others) > 3 else "")
    raise InputError(
        f"--out {out}: not empty ({listed}) and not a corpus written by `nmt prepare`; choose "
        "another directory or empty it"
    )


def _corpus_shaped(name: str) -> bool:
    """A name `nmt prepare` gives its files: SPLIT.LANG.bin / .idx and the sentencepiece models."""
    return name.endswith((".bin", ".idx")) or (name.startswith("spm") and name.endswith(".model"))


def _is_corpus_meta(path: Path) -> bool:
    """Whether `path` is a meta.json as `corpus_writer.publish` writes it: a JSON object with every key
    that CorpusMeta requires. Its values are not checked: a corpus of another version, or a
    damaged one, is still ours to replace."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    required = {f.name for f in fields(CorpusMeta) if f.default is MISSING and f.default_factory is MISSING}
    return isinstance(data, dict) and required <= data.keys()
