"""`nmt plot`: training curves from the metrics.jsonl of one or more runs.

A picture (PNG or SVG, by the file extension) of four panels against updates or wall time:
train and valid loss, valid BLEU, learning rate and tokens/s, the runs overlaid in one colour
each. `--terminal` draws the loss curve as text instead (rich; no matplotlib needed), for a
remote shell. A run that is still training can be plotted at any time: its last line may be
cut short (skipped), and a resumed run's repeated updates keep their latest records.

matplotlib is an optional extra (`pip install 'nmt-cli[plot]'`); pictures use its Agg
canvas directly, never pyplot's global state; matplotlib is imported only inside functions.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, TypeGuard

import numpy as np
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from nmt_cli.errors import InputError
from nmt_cli.figures import check_picture_path, new_figure, require_matplotlib, save_figure
from nmt_cli.files import not_an_input, output_target
from nmt_cli.report import Reporter

if TYPE_CHECKING:
    from matplotlib.figure import Figure

CURVES_SIZE = (11.0, 7.5)  # inches: 1100 x 750 pixels at DPI
X_AXES = ("update", "wall")
COLOURS = ("cyan", "magenta", "yellow", "green", "blue", "red")


@dataclass(frozen=True)
class Glyphs:
    """The characters of the terminal chart: marks of each run's train and valid loss, and the frame."""

    train: str = "•+x*"
    valid: str = "◆#X@"
    tick: str = "┤"
    rule: str = "│"
    corner: str = "└"
    line: str = "─"


UNICODE = Glyphs()
ASCII = Glyphs(".+x*", "o#X@", "+", "|", "+", "-")  # for a stdout whose encoding is not UTF-8


@dataclass
class Run:
    label: str
    train: list[dict]
    valid: list[dict]
    left_out: tuple[int, ...] = ()
    """Line numbers of metrics.jsonl that are no plottable record (damaged, NaN or infinite)."""


def read_run(path: Path) -> Run:
    """The train and valid records of a run directory (or of a metrics.jsonl file itself)."""
    metrics = path / "metrics.jsonl" if path.is_dir() else path
    if not path.exists():
        raise InputError(f"{path}: no such run directory")
    label = shown((path if path.is_dir() else path.parent).resolve().name or str(path))
    if not metrics.exists() and (path / "config.toml").is_file():
        return Run(label, [], [])  # `nmt train` writes config.toml at once, metrics.jsonl at its first log
    if not metrics.is_file():
        raise InputError(f"{path}: no metrics.jsonl here; expected the --out directory of `nmt train`")
    records, left_out = _records(metrics)
    return Run(label, _latest(records, "train"), _latest(records, "valid"), left_out)


def shown(name: str) -> str:
    """A file name as text that fonts and streams take: bytes that are not UTF-8 (os.fsdecode's
    surrogates, which matplotlib refuses) as \\xNN."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _records(metrics: Path) -> tuple[list[dict], tuple[int, ...]]:
    """The plottable records of a metrics.jsonl, and the numbers of the lines that are none (a
    last line still being written, without its newline, is neither)."""
    lines = metrics.read_bytes().split(b"\n")
    records, left_out = [], []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError):
            record = None
        if isinstance(record, dict) and _plottable(record):
            records.append(record)
        elif number < len(lines):
            left_out.append(number)
    return records, tuple(left_out)


def _plottable(record: dict) -> bool:
    """A record whose numbers a figure can hold: finite and of a sane size (a damaged or
    hand-edited line with 1e308 would overflow the axes); others are left out like cut lines."""
    numbers = [v for v in record.values() if isinstance(v, int | float) and not isinstance(v, bool)]
    # A comparison, not math.isfinite: that overflows on an integer too large for a float.
    return all(abs(v) < 1e100 for v in numbers)  # False for NaN and infinities too


def _latest(records: list[dict], kind: str) -> list[dict]:
    """Records of one type in update order. A resumed run logs again the updates after its
    last checkpoint: a record supersedes the earlier ones at the same or later updates."""
    kept: list[dict] = []
    for record in records:
        if record.get("type") != kind or not _finite(record.get("update")):  # true is no update
            continue
        while kept and kept[-1]["update"] >= record["update"]:
            kept.pop()
        kept.append(record)
    return kept


@dataclass(frozen=True)
class XAxis:
    """What the horizontal axis shows: a record field, scaled to the unit of its label."""

    key: str
    divisor: float
    label: str
    unit: str = ""


UPDATES = XAxis("update", 1.0, "update")


def x_axis_for(name: str, runs: list[Run]) -> XAxis:
    """Updates, or training wall time in minutes (runs under two hours) or hours."""
    if name == "update":
        return UPDATES
    walls = [r["wall_s"] for run in runs for r in run.train + run.valid if _finite(r.get("wall_s"))]
    if max(walls, default=0) < 7200:
        return XAxis("wall_s", 60.0, "wall time (minutes of training)", " min")
    return XAxis("wall_s", 3600.0, "wall time (hours of training)", " h")


def series(records: list[dict], key: str, x_axis: XAxis = UPDATES) -> tuple[list[float], list[float]]:
    """(x, y) of the records that hold a finite `key`."""
    xs, ys = [], []
    for record in records:
        x, y = record.get(x_axis.key), record.get(key)
        if _finite(x) and _finite(y):
            xs.append(float(x) / x_axis.divisor)
            ys.append(float(y))
    return xs, ys


def _finite(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def curves_figure(runs: list[Run], x_axis: XAxis) -> Figure:
    """Four panels: loss (train solid, valid dashed), valid BLEU, learning rate, tokens/s."""
    figure = new_figure(*CURVES_SIZE)
    loss_ax, bleu_ax, lr_ax, speed_ax = figure.subplots(2, 2, sharex=True).flat
    any_bleu = False
    for i, run in enumerate(runs):
        colour = f"C{i % 10}"
        loss_ax.plot(*series(run.train, "loss", x_axis), color=colour, lw=1.2, label=run.label)
        loss_ax.plot(*series(run.valid, "loss", x_axis), color=colour, ls="--", marker="o", ms=3)
        bleu = series(run.valid, "bleu", x_axis)
        any_bleu |= bool(bleu[0])
        bleu_ax.plot(*bleu, color=colour, marker="o", ms=3, label=run.label)
        lr_ax.plot(*series(run.train, "lr", x_axis), color=colour, lw=1.2, label=run.label)
        speed_ax.plot(*series(run.train, "tokens_per_s", x_axis), color=colour, lw=1.2, label=run.label)
    loss_ax.set_title("loss: train (solid), valid (dashed)")
    loss_ax.set_ylabel("loss per target token")
    loss_ax.legend(fontsize="small")
    bleu_ax.set_title("validation BLEU")
    bleu_ax.set_ylabel("BLEU")
    if not any_bleu:
        note = "no validation BLEU in these runs\n(train.valid_bleu = false)"
        bleu_ax.text(0.5, 0.5, note, ha="center", va="center", transform=bleu_ax.transAxes, color="grey")
        bleu_ax.set_yticks([])
    lr_ax.set_title("learning rate")
    lr_ax.set_ylabel("learning rate")
    lr_ax.ticklabel_format(axis="y", style="sci", scilimits=(-2, 2))
    speed_ax.set_title("training speed")
    speed_ax.set_ylabel("tokens/s")
    for ax in (loss_ax, bleu_ax, lr_ax, speed_ax):
        ax.grid(alpha=0.3)
    for ax in (lr_ax, speed_ax):
        ax.set_xlabel(x_axis.label)
    return figure


def terminal_chart(
    runs: list[Run], x_axis: XAxis, width: int, height: int = 16, glyphs: Glyphs = UNICODE
) -> Text:
    """The loss curves as text: train loss a line of dots, valid loss a mark per validation."""
    lines: list[tuple[list[float], list[float], str, str, bool]] = []
    for i, run in enumerate(runs):
        colour = COLOURS[i % len(COLOURS)]
        lines.append((*series(run.train, "loss", x_axis), glyphs.train[i % 4], colour, True))
        lines.append((*series(run.valid, "loss", x_axis), glyphs.valid[i % 4], colour, False))
    all_x = [x for xs, *_ in lines for x in xs]
    all_y = [y for _, ys, *_ in lines for y in ys]
    if not all_x:
        return Text("no finite loss values to draw\n")
    x0, x1 = min(all_x), max(all_x)
    y0, y1 = min(all_y), max(all_y)
    if y1 - y0 < 1e-9:
        y0, y1 = y0 - 0.5, y1 + 0.5
    cols = np.linspace(x0, x1, width) if x1 > x0 else np.full(width, x0)
    grid: list[list[tuple[str, str]]] = [[(" ", "")] * width for _ in range(height)]

    def mark(col: int, y: float, char: str, colour: str) -> None:
        row = round((y1 - y) / (y1 - y0) * (height - 1))
        grid[row][col] = (char, colour)

    for xs, ys, char, colour, joined in lines:
        if not xs:
            continue
        if joined:  # train: the curve at every column it spans
            for col in np.nonzero((cols >= xs[0] - 1e-9) & (cols <= xs[-1] + 1e-9))[0]:
                mark(int(col), float(np.interp(cols[col], xs, ys)), char, colour)
        else:
            for x, y in zip(xs, ys, strict=True):
                mark(_column(x, x0, x1, width), y, char, colour)
    return _frame(runs, grid, (x0, x1, y0, y1), x_axis, glyphs)


def _column(x: float, x0: float, x1: float, width: int) -> int:
    return round((x - x0) / (x1 - x0) * (width - 1)) if x1 > x0 else 0


def _frame(
    runs: list[Run], grid: list[list[tuple[str, str]]], bounds: tuple, x_axis: XAxis, glyphs: Glyphs
) -> Text:
    """Axes, tick values and a legend around the grid of marks."""
    x0, x1, y0, y1 = bounds
    height, width = len(grid), len(grid[0])
    text = Text(f"loss per target token against {x_axis.label}\n", style="bold")
    for row, cells in enumerate(grid):
        y = y1 - row * (y1 - y0) / (height - 1)
        label = f"{y:>9.3g} {glyphs.tick}" if row in (0, height // 2, height - 1) else " " * 10 + glyphs.rule
        text.append(label)
        for char, colour in cells:
            text.append(char, style=colour or None)
        text.append("\n")
    text.append(" " * 10 + glyphs.corner + glyphs.line * width + "\n")
    left, right = _tick(x0, x_axis), _tick(x1, x_axis)
    text.append(" " * 11 + left + right.rjust(width - len(left)) + "\n")
    for i, run in enumerate(runs):
        colour = COLOURS[i % len(COLOURS)]
        text.append(" " * 11)
        text.append(glyphs.train[i % 4], style=colour)
        text.append(" train  ")
        text.append(glyphs.valid[i % 4], style=colour)
        text.append(f" valid  {run.label}\n")
    return text


def _tick(x: float, x_axis: XAxis) -> str:
    return f"{x:,.0f}" if x_axis.key == "update" else f"{x:,.1f}{x_axis.unit}"


def summary_table(runs: list[Run]) -> Table:
    table = Table(box=box.SIMPLE_HEAD)
    table.add_column("run", no_wrap=True)
    for column in ["updates", "train loss", "best valid", "best BLEU", "tok/s", "hours"]:
        table.add_column(column, justify="right")
    for run in runs:
        last = run.train[-1] if run.train else {}
        updates = max((r["update"] for r in run.train + run.valid), default=0)
        wall = max((r.get("wall_s", 0) for r in run.train + run.valid if _finite(r.get("wall_s"))), default=0)
        table.add_row(
            run.label,
            f"{updates:,}",
            _fmt(last.get("loss")),
            _fmt(min(series(run.valid, "loss")[1], default=None)),
            _fmt(max(series(run.valid, "bleu")[1], default=None), ".2f"),
            _fmt(last.get("tokens_per_s"), ",.0f"),
            f"{wall / 3600:.2f}",
        )
    return table


def _fmt(value: object, spec: str = ".3f") -> str:
    return format(value, spec) if _finite(value) else "-"


def _labelled(runs: Iterable[Run], paths: list[Path]) -> list[Run]:
    """Runs with the same directory name are told apart by their whole path."""
    runs = list(runs)
    names = [run.label for run in runs]
    for run, path in zip(runs, paths, strict=True):
        if names.count(run.label) > 1:
            run.label = shown(str(path))
    return runs


def run(run_dirs: list[Path], output: Path | None, terminal: bool, x_axis: str, quiet: bool) -> None:
    reporter = Reporter(quiet)
    if x_axis not in X_AXES:
        raise InputError(f"--x-axis {x_axis!r}: expected one of {', '.join(X_AXES)}")
    if output is None and not terminal:
        output = Path("curves.png")
    if output is not None:
        check_picture_path(output)
        output_target(output, "--output")  # a directory or a missing parent, before the work
        not_an_input(output, [p / "metrics.jsonl" if p.is_dir() else p for p in run_dirs], "--output")
        require_matplotlib()  # before reading anything: the one-line hint comes first
    runs = []
    for run_dir, one in zip(run_dirs, _labelled([read_run(p) for p in run_dirs], run_dirs), strict=True):
        if one.left_out:
            lines = ", ".join(map(str, one.left_out[:3])) + (", ..." if len(one.left_out) > 3 else "")
            reporter.warn(
                f"{run_dir}: left out {len(one.left_out)} line(s) of metrics.jsonl that are no record a "
                f"figure can hold (damaged, or NaN or infinite values): line {lines}"
            )
        if one.train or one.valid:
            runs.append(one)
        else:
            reporter.warn(f"{run_dir}: no training records yet; left out")
    if not runs:
        raise InputError("no training records yet in " + ", ".join(map(str, run_dirs)))
    axis = x_axis_for(x_axis, runs)
    if terminal:
        console = Console(highlight=False)
        printed, glyphs = runs, UNICODE
        if console.options.ascii_only:  # stdout is not UTF-8: ASCII only, as rich's tables turn
            printed = [replace(r, label=r.label.encode("ascii", "backslashreplace").decode()) for r in runs]
            glyphs = ASCII
        console.print(terminal_chart(printed, axis, max(20, min(console.width - 12, 120)), glyphs=glyphs))
        console.print(summary_table(printed))
    if output is not None:
        save_figure(curves_figure(runs, axis), output)
        reporter.info(f"wrote {output}")
