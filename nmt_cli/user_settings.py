"""What a user gives a command beside the recipe: decode settings that override the checkpoint's
[decode] for a call (the command line, the Python API, an HTTP request), where and how a command
computes, and what `nmt prepare`, `nmt translate` and `nmt attend` are asked for. The CLI builds
them from options once and hands them to the commands; none is part of a recipe or stored in a
checkpoint. (The server's bounds are `serving.limits.ServeLimits`.)"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from nmt_cli.config import DecodeConfig
from nmt_cli.ranges import check_setting


@dataclass(frozen=True)
class DecodeOverrides:
    """Search settings given on the command line, to the Python API or in a request; None keeps
    the checkpoint's recipe value. Each given value is checked on creation (`SettingError`).
    Its fields are `DecodeConfig`'s but `RECIPE_ONLY`, in the same order."""

    beam: int | None = None
    lenpen: float | None = None
    lenpen_style: str | None = None
    max_len_a: float | None = None
    max_len_b: int | None = None
    min_len: int | None = None
    shortlist: bool | None = None

    def __post_init__(self) -> None:
        for name, value in self.given().items():
            check_setting(name, value)

    def given(self) -> dict[str, object]:
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return {name: value for name, value in values.items() if value is not None}

    def apply(self, base: DecodeConfig) -> DecodeConfig:
        """`base` with the given settings in place."""
        return dataclasses.replace(base, **self.given())  # type: ignore[arg-type]


SEARCH_FIELDS = tuple(f.name for f in dataclasses.fields(DecodeOverrides))
"""The search settings a call may give, by name: `nmt translate`'s options, the Python API's
keywords and nmt's HTTP request fields of these names all fill a `DecodeOverrides`."""
RECIPE_ONLY = ("early_stopping",)
"""`DecodeConfig`'s settings that no call overrides (a recipe's or an imported model's own): every
other field of `DecodeConfig` is one of `DecodeOverrides`, of the same name and type or None
(tests/unit/test_decode_settings_declared.py holds the two equal)."""


@dataclass(frozen=True)
class RuntimeConfig:
    """Where and how a command computes: not part of a recipe, never stored in a checkpoint."""

    device: str = "auto"  # auto, cpu or cuda (cuda:N)
    precision: str | None = "fp32"
    """fp32, bf16 or fp16; which ones a command accepts is its own check. None: the recipe's."""
    threads: int = 0
    """CPU threads; 0 keeps torch's default."""
    workers: int = 1  # decoding processes (CPU); 0: one per core, of one thread each

    def __post_init__(self) -> None:
        check_setting("threads", self.threads)
        check_setting("workers", self.workers)


@dataclass(frozen=True)
class PrepareConfig:
    """What `nmt prepare` is asked for; the defaults are the command line's."""

    train: tuple[str, ...]
    """Prefixes of the training corpora (PREFIX.SRC and PREFIX.TGT each), binarized one after the
    other into one train split; meta.json records where each begins."""
    valid: str
    src: str
    tgt: str
    out: Path
    test: str | None = None
    train_tags: tuple[str, ...] = ()
    """Empty, or one per training corpus: a tag written before each of its source sentences ("" for
    none), e.g. <BT> for back-translated text (Caswell et al., 2019)."""
    reserve: tuple[str, ...] = ()
    """Pieces a newly learned vocabulary keeps whole for tags of later corpora."""
    spm_from: Path | None = None
    """A checkpoint or prepared corpus whose sentencepiece model(s) encode this corpus: nothing is
    learned, and the vocabulary options do not apply."""
    # The vocabulary learned (unless spm_from gives one).
    vocab_size: int = 32000
    joint: bool = True
    character_coverage: float = 1.0
    byte_fallback: bool = True
    normalization: str = "identity"
    spm_sample: int = 2_000_000
    # Which train pairs are kept (valid and test keep every line).
    max_len: int = 250
    max_ratio: float = 2.0
    # Reading the text and encoding it.
    errors: str = "strict"
    workers: int = 1

    def __post_init__(self) -> None:
        if isinstance(self.train, str):  # one prefix, as before several corpora were possible
            object.__setattr__(self, "train", (self.train,))


@dataclass(frozen=True)
class TranslateJob:
    """What `nmt translate` is asked to translate, where to and in what shape; the defaults are the
    command line's. Its search and its hardware are a `DecodeOverrides` and a `RuntimeConfig`."""

    models: list[Path]  # more than one: an ensemble
    input_path: Path | None = None  # None: stdin
    output_path: Path | None = None  # None: stdout
    nbest: int = 1
    batch_tokens: int | None = None  # None: the device's default
    buffer_size: int = 5000
    split_sentences: bool = False
    alignments: bool = False
    text_format: str = "text"  # "html": each line a fragment, its markup kept; "html-document": one page
    # Each line the source, then a tab before each phrase its translation must contain.
    constraints: bool = False
    ordered_constraints: bool = False
    glossary: Path | None = None  # a TSV of terms


@dataclass(frozen=True)
class AttendJob:
    """What `nmt attend` is asked to draw, and where; the defaults are the command line's."""

    model: Path
    out_dir: Path
    input_path: Path | None = None  # None: stdin
    layer: int | None = None  # 1..N; None: the last
    head: int | None = None  # 1..h; None: the mean over heads
    picture_format: str = "png"
    batch_tokens: int | None = None  # None: the device's default
