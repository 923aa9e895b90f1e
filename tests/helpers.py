"""The tests' shared helpers (imported as `from helpers import ...`): the tiny copy corpus, running
nmt in this process or as a command, refusals read as one line, tiny models. The fixtures that
build them once a session stay in conftest.py.

The task is to copy short sentences over a 16-word vocabulary. With --vocab-size 100 and no
byte fallback every word is one sentencepiece piece, so a 1-layer, 32-wide model learns it
to over 95% exact match in a few seconds on one CPU thread. Nothing here reads ../shared.
"""

from __future__ import annotations

import contextlib
import os
import random
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

from nmt_cli.cli.main import main
from nmt_cli.config import ModelConfig
from nmt_cli.model import Transformer

WORDS = (
    "apple river stone cloud green music paper tiger silver window orange garden yellow friend summer winter"
).split()

# A tiny model: every Table-3 size shrunk; max_positions small so that truncation is cheap to test.
TINY_MODEL = [
    "model.encoder_layers=1",
    "model.decoder_layers=1",
    "model.d_model=32",
    "model.d_ff=64",
    "model.heads=2",
    "model.d_k=16",
    "model.d_v=16",
    "model.max_positions=64",
]

# A short, fast schedule for the copy task (valid BLEU off: decoding the valid set costs time).
FAST_TRAIN = [
    'train.lr_schedule="inverse_sqrt"',
    "train.lr=5e-3",
    "train.warmup=100",
    "train.max_tokens=512",
    "train.label_smoothing=0.0",
    'train.precision="fp32"',
    "train.save_every_minutes=0",
    "train.valid_bleu=false",
]

TRAINED_UPDATES = 1200
TRAINED_SAVE_EVERY = 300


def sentences(n: int, seed: int, min_words: int = 1, max_words: int = 6) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(min_words, max_words))) for _ in range(n)]


def write_split(prefix: Path, src: Sequence[str], tgt: Sequence[str]) -> None:
    Path(f"{prefix}.src").write_text("".join(f"{line}\n" for line in src), encoding="utf-8")
    Path(f"{prefix}.tgt").write_text("".join(f"{line}\n" for line in tgt), encoding="utf-8")


def nmt(*args: object) -> int:
    """Run the CLI in this process and return its exit code. `--threads` changes torch's thread
    count for the whole process, so it is put back afterwards for the tests that follow."""
    threads = torch.get_num_threads()
    try:
        main([str(a) for a in args])
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        torch.set_num_threads(threads)
    return 0


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """Torch on one thread for a block. On two cores shared with other jobs, torch's default of
    one thread per core can run a tiny model a hundred times slower (threads spin on each other)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def nmt_command(*args: object) -> list[str]:
    """The argv of the CLI as a separate process (for stdin pipes and signals)."""
    return [sys.executable, "-m", "nmt_cli", *(str(a) for a in args)]


def subprocess_env() -> dict[str, str]:
    """The environment of a child `python -m nmt_cli`: it imports this checkout whatever the
    working directory, on one thread (the tests share two cores)."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    env["OMP_NUM_THREADS"] = "1"
    return env


def one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    """The one line a failed command wrote to stderr (no traceback)."""
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("nmt: error: "), err
    return lines[0]


def refused(capsys: pytest.CaptureFixture[str], *args: object) -> str:
    """Run the CLI with `args`, which it must refuse as bad input or usage (exit code 2), and
    return the one line it wrote to stderr (no traceback)."""
    assert nmt(*args) == 2, f"nmt {' '.join(map(str, args))}: not refused"
    return one_line_error(capsys)


def wait_until(
    condition: Callable[[], object],
    what: str,
    *,
    timeout: float = 60.0,
    process: subprocess.Popen | None = None,
    poll_s: float = 0.02,
) -> None:
    """Until `condition()` holds, checking it every `poll_s` seconds: the test fails, naming `what`,
    if it does not hold within `timeout` seconds, or at once if `process` ends first (with the end
    of what it wrote to stderr). The timeout only bounds a hang; the test waits for the state."""
    deadline = time.monotonic() + timeout
    while not condition():
        if process is not None and process.poll() is not None:
            err = process.communicate()[1]
            if isinstance(err, bytes):
                err = err.decode(errors="replace")
            ended = f"the process ended (exit code {process.returncode}) before {what}"
            pytest.fail(f"{ended}:\n{(err or '')[-3000:]}")
        if time.monotonic() > deadline:
            pytest.fail(f"not within {timeout:g} s: {what}")
        time.sleep(poll_s)


def exported_to_ctranslate2(model: Path, out: Path) -> Any:
    """`nmt export` of the checkpoint `model` into the folder `out`, and a CTranslate2 translator
    of it on the CPU (the test is skipped where ctranslate2 is not installed)."""
    ctranslate2 = pytest.importorskip("ctranslate2")
    assert nmt("-q", "export", "-m", model, "-o", out) == 0
    return ctranslate2.Translator(str(out), device="cpu")


def prepare_args(out: Path, *train: Path, valid: Path, quiet: bool = True) -> list[object]:
    """Arguments of `nmt prepare` for copy-task files PREFIX.src and PREFIX.tgt: a joint BPE of 100
    pieces without byte fallback (options given after these win)."""
    corpora = [part for prefix in train for part in ("--train", prefix)]
    return [
        *(["-q"] if quiet else []),
        "prepare",
        *corpora,
        *("--valid", valid, "--src", "src", "--tgt", "tgt", "--out", out),
        *("--vocab-size", 100, "--no-byte-fallback"),
    ]


def sets(*overrides: str) -> list[str]:
    """`--set a --set b ...` for the given overrides."""
    return [part for item in overrides for part in ("--set", item)]


def train_args(data: Path, out: Path, *overrides: str, quiet: bool = True) -> list[str]:
    """Arguments of `nmt train` for the tiny model on one CPU thread; later overrides win."""
    return [
        *(["-q"] if quiet else []),
        "train",
        "--data",
        str(data),
        "--out",
        str(out),
        "--device",
        "cpu",
        "--threads",
        "1",
        *sets(*TINY_MODEL, *FAST_TRAIN, *overrides),
    ]


@dataclass(frozen=True)
class Corpus:
    raw: Path
    """Directory of train/valid/test .src/.tgt text files."""
    data: Path
    """The prepared (binarized) corpus."""
    test_src: list[str]
    test_tgt: list[str]


@dataclass(frozen=True)
class TrainedRun:
    run_dir: Path
    checkpoint: Path
    """checkpoints/checkpoint_last.pt"""
    updates: int
    save_every: int


# The architecture variants the model, search and attention tests run over (ModelConfig overrides).
VARIANTS = {
    "post": {},
    "pre": {"norm": "pre"},
    "realformer": {"residual_attention": True},
    "windowed": {"attention_window": 2},
    "learned-pre-realformer-windowed": {
        "positions": "learned",
        "norm": "pre",
        "residual_attention": True,
        "attention_window": 3,
    },
}


def tiny_model(vocab: int = 40, seed: int = 0, **overrides: object) -> Transformer:
    """A small Transformer in eval mode for the model, search and attention tests: 2+2 layers,
    d_model 32, 4 heads of 8, no dropout; any ModelConfig field can be overridden."""
    torch.manual_seed(seed)
    fields: dict = {
        "encoder_layers": 2,
        "decoder_layers": 2,
        "d_model": 32,
        "d_ff": 64,
        "heads": 4,
        "d_k": 8,
        "d_v": 8,
        "dropout": 0.0,
        "max_positions": 64,
    }
    fields.update(overrides)
    return Transformer(ModelConfig(**fields, src_vocab_size=vocab, tgt_vocab_size=vocab)).eval()


@dataclass(frozen=True)
class Pairs:
    """Two tiny models with ISO language codes, for a server of several language pairs: en-de
    copies its input and de-en reverses the order of its words, so that a misrouted request shows."""

    en_de: Path
    de_en: Path


# A status as Mastodon renders it: a mention (in its h-card), a hashtag and a link whose text is
# split into an invisible scheme and the rest.
MASTODON_ANNA = '<a href="https://mastodon.social/@anna" class="u-url mention">@<span>anna</span></a>'
MASTODON_MENTION = f'<span class="h-card">{MASTODON_ANNA}</span>'
MASTODON_HASHTAG = (
    '<a href="https://mastodon.social/tags/summer" class="mention hashtag" rel="tag">#<span>summer</span></a>'
)
MASTODON_LINK = (
    '<a href="https://example.org/a?b=1&amp;c=2" target="_blank" rel="nofollow noopener noreferrer">'
    '<span class="invisible">https://</span><span class="ellipsis">example.org/a?b=1&amp;c=2</span></a>'
)
