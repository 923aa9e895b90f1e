"""`nmt attend`: translate, and draw each translation's encoder-decoder attention.

Translation is `nmt translate`'s beam search, untouched: the search never computes attention
probabilities, so it costs what it always costs. Afterwards one teacher-forced pass of the model
over (source, best hypothesis) gives the cross-attention of one decoder layer
(Transformer.cross_attention), and each input sentence gets a picture: target pieces (rows) by
source pieces (columns), the mean over heads or one head. Translations go to stdout, one line
per input line, as `nmt translate` writes them.

"""

from __future__ import annotations

import sys
import warnings
from typing import TYPE_CHECKING

import numpy as np
import torch

from nmt_cli.config import ModelConfig
from nmt_cli.data.text import check_readable, one_line, read_lines
from nmt_cli.decoding.batches import translate_sentences
from nmt_cli.decoding.search import Hypothesis
from nmt_cli.decoding.settings import DecodeSettings, check_before_load
from nmt_cli.decoding.translator import Translator, load_translator
from nmt_cli.device import configure_cpu, resolve_device
from nmt_cli.errors import InputError
from nmt_cli.figures import new_figure, require_matplotlib, save_figure
from nmt_cli.model import Transformer
from nmt_cli.report import Reporter
from nmt_cli.special_ids import EOS_ID
from nmt_cli.training.precision import autocast
from nmt_cli.user_settings import AttendJob, DecodeOverrides, RuntimeConfig

if TYPE_CHECKING:
    from pathlib import Path

    from matplotlib.figure import Figure

CELL = 0.28  # inches per piece: tick labels stay readable at 100 dpi
FORMATS = ("png", "svg")


def check_choice(cfg: ModelConfig, layer: int | None, head: int | None) -> tuple[int, int | None]:
    """1-based --layer/--head as 0-based indices; the last layer and the mean (None) by default."""
    if layer is not None and not 1 <= layer <= cfg.decoder_layers:
        raise InputError(f"--layer {layer}: the model's decoder has layers 1..{cfg.decoder_layers}")
    if head is not None and not 1 <= head <= cfg.heads:
        raise InputError(f"--head {head}: the model has heads 1..{cfg.heads}")
    return (layer or cfg.decoder_layers) - 1, None if head is None else head - 1


def attention_map(
    model: Transformer, source: list[int], hypothesis: list[int], layer: int, head: int | None
) -> np.ndarray:
    """(T, S) attention of the target pieces and EOS over the source pieces and EOS."""
    device = next(model.parameters()).device
    src = torch.tensor([[*source, EOS_ID]], device=device)  # (1, S)
    # (1, T): row t predicts token t
    tgt_in = torch.tensor([[model.cfg.start_id, *hypothesis]], device=device)
    with torch.inference_mode():
        weights = model.cross_attention(src, tgt_in, layer)[0].float()  # (h, T, S)
    chosen = weights.mean(dim=0) if head is None else weights[head]
    return chosen.cpu().numpy()


def attention_figure(weights: np.ndarray, src_pieces: list[str], tgt_pieces: list[str], title: str) -> Figure:
    """A heat map with the pieces as tick labels, sized so that each piece gets one cell."""
    t, s = weights.shape
    figure = new_figure(min(2.5 + CELL * s, 40.0), min(1.8 + CELL * t, 40.0))
    ax = figure.add_subplot()
    image = ax.imshow(weights, cmap="Blues", vmin=0.0, vmax=1.0, aspect="equal", interpolation="nearest")
    ax.set_xticks(range(s), labels=src_pieces, rotation=90, fontsize=8)
    ax.set_yticks(range(t), labels=tgt_pieces, fontsize=8)
    ax.set_xlabel("source pieces")
    ax.set_ylabel("target pieces (best hypothesis)")
    ax.set_title(title, fontsize=9)
    figure.colorbar(image, ax=ax, shrink=0.8, label="attention")
    return figure


def _check_out_dir(out_dir: Path) -> None:
    """Refuse before any work an --out-dir that is a file or would have to be made under one."""
    for path in (out_dir, *out_dir.parents):
        if path.exists():
            if not path.is_dir():
                what = "is a file" if path == out_dir else f"{path} is a file"
                raise InputError(f"--out-dir {out_dir}: {what}, expected a directory")
            return


def _refuse_earlier_pictures(out_dir: Path, picture_format: str) -> None:
    """Refuse an --out-dir that holds pictures in this format from an earlier run: they would be
    mixed with this run's, or be in the way."""
    earlier = (
        sorted(p.name for p in out_dir.glob(f"attention_*.{picture_format}")) if out_dir.is_dir() else []
    )
    if earlier:
        shown = ", ".join(earlier[:2]) + (", ..." if len(earlier) > 2 else "")
        raise InputError(
            f"--out-dir {out_dir}: holds pictures of an earlier run ({shown}); choose another directory "
            "or move them"
        )


def _best_hypotheses(
    translator: Translator, sources: list[list[int]], settings: DecodeSettings, dev: torch.device
) -> dict[int, Hypothesis]:
    """The best hypothesis of each source by its index; empty sources and those without one are left out."""
    todo = [i for i, ids in enumerate(sources) if ids]
    with autocast(dev, "fp32"):
        found = translate_sentences(
            translator.ensemble,
            [np.asarray(sources[i], dtype=np.int64) for i in todo],
            settings,
            dev,
        )
    return {i: hyps[0] for i, hyps in zip(todo, found, strict=True) if hyps}


def run(job: AttendJob, *, decode: DecodeOverrides, runtime: RuntimeConfig, quiet: bool = False) -> None:
    """Translate `job.input_path` (stdin) to stdout, then draw each translation's attention into
    `job.out_dir`."""
    input_path, out_dir, batch_tokens = job.input_path, job.out_dir, job.batch_tokens
    reporter = Reporter(quiet)
    if job.picture_format not in FORMATS:
        raise InputError(f"--format {job.picture_format!r}: expected png or svg")
    require_matplotlib()
    check_before_load(decode, None, batch_tokens)
    if input_path is not None:
        check_readable(input_path, f"--input {input_path}")
    _check_out_dir(out_dir)
    _refuse_earlier_pictures(out_dir, job.picture_format)
    configure_cpu(runtime.threads)
    dev = resolve_device(runtime.device)
    # Attention pictures are drawn from an fp32 pass, whatever precision translation could use.
    translator = load_translator([job.model], dev, "fp32")
    settings = translator.settings(decode, None, batch_tokens)
    net = translator.ensemble.models[0]
    layer_index, head_index = check_choice(net.cfg, job.layer, job.head)
    source = input_path if input_path is not None else sys.stdin.buffer
    lines = read_lines(source, str(input_path or "stdin"), errors="replace", nul=" ")  # as translate reads
    sources = [translator.source_ids(line).tolist() for line in lines]
    best = _best_hypotheses(translator, sources, settings, dev)
    for i in range(len(lines)):
        print(one_line(translator.tgt_spm.decode(best[i].tokens)) if i in best else "")
    sys.stdout.flush()
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise InputError(f"--out-dir {out_dir}: cannot create ({err.strerror or err})") from None
    what = f"layer {layer_index + 1} of {net.cfg.decoder_layers}, " + (
        f"mean of {net.cfg.heads} heads" if head_index is None else f"head {head_index + 1}"
    )
    digits = max(4, len(str(len(lines))))
    for i in reporter.progress(sorted(best), desc="pictures", unit="sentence"):
        weights = attention_map(net, sources[i], best[i].tokens, layer_index, head_index)
        figure = attention_figure(
            weights,
            [translator.src_spm.id_to_piece(p) for p in sources[i]] + ["</s>"],
            [translator.tgt_spm.id_to_piece(p) for p in best[i].tokens] + ["</s>"],
            f"line {i + 1}, {what}",
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # glyphs the font lacks (CJK, emoji)
            save_figure(figure, out_dir / f"attention_{i + 1:0{digits}d}.{job.picture_format}", "--out-dir")
    reporter.info(f"wrote {len(best)} picture{'s' * (len(best) != 1)} ({what}) to {out_dir}")
    if translator.truncated:
        reporter.warn(
            f"{translator.truncated} input lines were longer than the model's {translator.max_source} "
            "pieces and were truncated"
        )
