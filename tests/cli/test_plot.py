"""The picture commands. `nmt plot` on synthetic metrics.jsonl files: the figure's size, axes and
curves, PNG and SVG files, a run still training (cut-short last line, a resume that logged
updates again), the terminal chart, and one-line errors (unknown extension, no run, no records,
no matplotlib). `nmt attend` with the tiny copy model: its translations are `nmt translate`'s,
one picture per non-blank input line, layer/head choices checked."""

from __future__ import annotations

import contextlib
import errno
import io
import json
import math
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import TrainedRun, nmt, sentences

from nmt_cli import figures, files
from nmt_cli.commands import plot

CURVE_LABELS = ["loss per target token", "BLEU", "learning rate", "tokens/s"]


def train_record(update: int) -> dict:
    return {
        "type": "train",
        "update": update,
        "epoch": 1 + update // 400,
        "loss": 2.0 + 6.0 * math.exp(-update / 300),
        "nll_loss": 1.5 + 6.0 * math.exp(-update / 300),
        "ppl": math.exp(1.5 + 6.0 * math.exp(-update / 300)),
        "lr": 1e-3 * min(update / 400, math.sqrt(400 / update)),
        "tokens_per_s": 6000.0 + 10 * (update % 7),
        "updates_per_s": 1.6,
        "wall_s": round(update * 0.6, 1),
    }


def valid_record(update: int, bleu: bool) -> dict:
    loss = 2.5 + 5.0 * math.exp(-update / 300)
    record = {"type": "valid", "update": update, "loss": loss, "nll_loss": loss - 0.4, "ppl": math.exp(loss)}
    if bleu:
        record["bleu"] = 30.0 * (1 - math.exp(-update / 400))
    return {**record, "best_loss": loss, "wall_s": round(update * 0.6 + 5, 1)}


def write_metrics(run_dir: Path, last: int = 1000, bleu: bool = True, cut_short: bool = True) -> list[dict]:
    """A run's metrics.jsonl as `nmt train` writes it (train every 50 updates, valid every 200);
    with cut_short, a last line half-written, as when reading while the run is writing."""
    run_dir.mkdir(parents=True, exist_ok=True)
    records = []
    for update in range(50, last + 1, 50):
        records.append(train_record(update))
        if update % 200 == 0:
            records.append(valid_record(update, bleu))
    text = "".join(json.dumps(r) + "\n" for r in records)
    (run_dir / "metrics.jsonl").write_text(text + ('{"type": "train", "upd' if cut_short else ""))
    return records


def figure_of(*run_dirs: Path, x_axis: str = "update"):
    runs = [plot.read_run(d) for d in run_dirs]
    return plot.curves_figure(runs, plot.x_axis_for(x_axis, runs))


def test_the_figure_has_its_size_axes_labels_and_the_run_curves(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    records = write_metrics(tmp_path / "base")
    figure = figure_of(tmp_path / "base")
    assert tuple(figure.get_size_inches()) == plot.CURVES_SIZE
    assert [ax.get_ylabel() for ax in figure.axes] == CURVE_LABELS
    assert [ax.get_xlabel() for ax in figure.axes] == ["", "", "update", "update"]
    loss_ax, bleu_ax, lr_ax, speed_ax = figure.axes
    train = [r for r in records if r["type"] == "train"]
    valid = [r for r in records if r["type"] == "valid"]
    train_line, valid_line = loss_ax.get_lines()
    assert list(train_line.get_xdata()) == [r["update"] for r in train]
    assert list(train_line.get_ydata()) == [r["loss"] for r in train]
    assert list(valid_line.get_ydata()) == [r["loss"] for r in valid]
    assert list(bleu_ax.get_lines()[0].get_ydata()) == [r["bleu"] for r in valid]
    assert list(lr_ax.get_lines()[0].get_ydata()) == [r["lr"] for r in train]
    assert list(speed_ax.get_lines()[0].get_ydata()) == [r["tokens_per_s"] for r in train]
    assert [t.get_text() for t in loss_ax.get_legend().get_texts()] == ["base"]


def test_several_runs_are_overlaid_with_a_legend_and_wall_time_in_minutes(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    write_metrics(tmp_path / "base")
    write_metrics(tmp_path / "big", last=600, bleu=False)
    figure = figure_of(tmp_path / "base", tmp_path / "big", x_axis="wall")
    loss_ax = figure.axes[0]
    assert [t.get_text() for t in loss_ax.get_legend().get_texts()] == ["base", "big"]
    assert len(loss_ax.get_lines()) == 4  # train and valid of each run
    assert figure.axes[2].get_xlabel() == "wall time (minutes of training)"
    assert loss_ax.get_lines()[0].get_xdata()[-1] == pytest.approx(1000 * 0.6 / 60)


def test_nmt_plot_writes_a_png_of_the_figure_size(tmp_path: Path) -> None:
    image = pytest.importorskip("matplotlib.image")
    write_metrics(tmp_path / "run")
    out = tmp_path / "curves.png"
    assert nmt("-q", "plot", tmp_path / "run", "-o", out) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = plot.CURVES_SIZE
    assert image.imread(out).shape[:2] == (height * figures.DPI, width * figures.DPI)
    assert {p.name for p in tmp_path.iterdir()} == {"run", "curves.png"}  # no temporary file left


def test_nmt_plot_writes_svg_by_extension(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    write_metrics(tmp_path / "a")
    write_metrics(tmp_path / "b", last=400)
    out = tmp_path / "curves.SVG"
    assert nmt("-q", "plot", tmp_path / "a", tmp_path / "b" / "metrics.jsonl", "-o", out) == 0
    assert "<svg" in out.read_text(encoding="utf-8")[:2000]


def test_a_run_still_training_or_resumed_is_read_tolerantly(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    write_metrics(run_dir, last=400, cut_short=False)
    # Killed after update 400, resumed from the checkpoint at 300: 350 and 400 are logged again.
    again = [train_record(350) | {"loss": 1.0}, train_record(400) | {"loss": 0.9}, valid_record(400, True)]
    with (run_dir / "metrics.jsonl").open("a") as f:
        f.write("".join(json.dumps(r) + "\n" for r in again) + '{"type": "valid", "update": 45')
    run = plot.read_run(run_dir)
    assert [r["update"] for r in run.train] == list(range(50, 401, 50))
    assert [r["loss"] for r in run.train][-2:] == [1.0, 0.9]
    assert [r["update"] for r in run.valid] == [200, 400]


def strip_ansi(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def test_terminal_draws_the_loss_curve_without_matplotlib(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    records = write_metrics(tmp_path / "m30k")
    monkeypatch.setenv("COLUMNS", "100")
    hide_matplotlib(monkeypatch)
    capsys.readouterr()
    assert nmt("-q", "plot", tmp_path / "m30k", "--terminal") == 0
    out = strip_ansi(capsys.readouterr().out)
    assert "loss per target token against update" in out
    rows = [line for line in out.splitlines() if len(line) > 11 and line[10] in "┤│"]
    assert len(rows) == 16 and all(len(line) <= 100 for line in rows)
    highest = max(r["loss"] for r in records)
    assert float(rows[0][:9]) == pytest.approx(highest, rel=1e-2)
    assert rows[0][11] == "•"  # the first update has the highest loss: top left
    assert sum(line.count("◆") for line in rows) == 5  # one mark per validation
    assert "m30k" in out and "best valid" in out
    assert not (tmp_path / "curves.png").exists()


def hide_matplotlib(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make `import matplotlib` (and its submodules) fail as if it were not installed."""
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "matplotlib", None)


@pytest.mark.parametrize("command", ["plot", "attend"])
def test_without_matplotlib_one_line_names_the_extra(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    write_metrics(tmp_path / "run")
    hide_matplotlib(monkeypatch)
    args = {
        "plot": ["plot", tmp_path / "run", "-o", tmp_path / "curves.png"],
        "attend": ["attend", "-m", tmp_path / "model.pt", "--out-dir", tmp_path / "maps"],
    }[command]
    capsys.readouterr()
    assert nmt(*args) == 2
    err = capsys.readouterr().err
    assert err == "nmt: error: pictures need matplotlib, an optional extra: pip install 'nmt-cli[plot]'\n"
    assert not (tmp_path / "curves.png").exists() and not (tmp_path / "maps").exists()


@pytest.mark.parametrize(
    "case,expected",
    [
        ("extension", "end the name in .png or .svg"),
        ("no run", "no such run directory"),
        ("not a run", "no metrics.jsonl here"),
        ("no records", "no training records yet"),
        ("x axis", "--x-axis 'time': expected one of update, wall"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    case: str, expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_metrics(tmp_path / "run")
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "metrics.jsonl").write_text("")
    args = {
        "extension": [tmp_path / "run", "-o", tmp_path / "curves.jpg"],
        "no run": [tmp_path / "missing", "--terminal"],
        "not a run": [tmp_path, "--terminal"],
        "no records": [tmp_path / "empty", "--terminal"],
        "x axis": [tmp_path / "run", "--terminal", "--x-axis", "time"],
    }[case]
    capsys.readouterr()
    assert nmt("-q", "plot", *args) == 2
    err = capsys.readouterr().err
    assert err.startswith("nmt: error: ") and expected in err and err.count("\n") == 1


def test_attend_translates_as_translate_does_and_draws_each_line(
    trained: TrainedRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("matplotlib")
    lines = sentences(8, seed=11) + [""] + sentences(3, seed=12, min_words=5, max_words=6)
    source = tmp_path / "in.txt"
    source.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    translated = tmp_path / "out.txt"
    assert (
        nmt("-q", "translate", "-m", trained.checkpoint, "-i", source, "-o", translated, "--threads", 1) == 0
    )
    capsys.readouterr()
    maps = tmp_path / "maps"
    args = ["-m", trained.checkpoint, "-i", source, "--out-dir", maps, "--threads", 1]
    assert nmt("-q", "attend", *args) == 0
    assert capsys.readouterr().out == translated.read_text(encoding="utf-8")
    drawn = sorted(p.name for p in maps.iterdir())
    assert drawn == [f"attention_{n:04d}.png" for n in range(1, len(lines) + 1) if lines[n - 1]]
    assert all((maps / name).read_bytes()[:4] == b"\x89PNG" for name in drawn)
    assert nmt("-q", "attend", *args, "--layer", 1, "--head", 2, "--format", "svg") == 0
    assert len(list(maps.glob("*.svg"))) == len(drawn)
    # Again in a format already there: refused before any work, the earlier pictures kept.
    before = {p.name: p.read_bytes() for p in maps.iterdir()}
    capsys.readouterr()
    assert nmt("attend", *args) == 2
    err = capsys.readouterr()
    assert err.out == "" and "holds pictures of an earlier run (attention_0001.png" in err.err
    assert {p.name: p.read_bytes() for p in maps.iterdir()} == before


def test_plot_says_which_lines_of_metrics_it_left_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("matplotlib")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    good = [json.dumps({"type": "train", "update": n, "loss": 5.0 - n, "lr": 1e-3}) for n in (1, 2, 3)]
    damaged = [good[0], "not json at all", good[1], '{"type": "train", "update": 3, "loss": NaN}', good[2]]
    (run_dir / "metrics.jsonl").write_text("\n".join(damaged) + '\n{"type": "tra', encoding="utf-8")
    capsys.readouterr()
    assert nmt("plot", run_dir, "-o", tmp_path / "c.png") == 0
    err = capsys.readouterr().err
    assert "left out 2 line(s) of metrics.jsonl" in err and "line 2, 4" in err  # not the cut last one


@pytest.mark.parametrize(
    "option,expected",
    [
        (["--layer", 2], "--layer 2: the model's decoder has layers 1..1"),
        (["--head", 0], "--head 0: the model has heads 1..2"),
        (["--format", "jpg"], "--format 'jpg': expected png or svg"),
    ],
)
def test_attend_refuses_a_layer_or_head_the_model_does_not_have(
    trained: TrainedRun, tmp_path: Path, capsys: pytest.CaptureFixture[str], option: list, expected: str
) -> None:
    pytest.importorskip("matplotlib")
    source = tmp_path / "in.txt"
    source.write_text("apple river\n", encoding="utf-8")
    capsys.readouterr()
    code = nmt("-q", "attend", "-m", trained.checkpoint, "-i", source, "--out-dir", tmp_path / "m", *option)
    assert code == 2
    assert capsys.readouterr().err == f"nmt: error: {expected}\n"


def test_attend_refuses_an_out_dir_under_a_file_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("matplotlib")
    source = tmp_path / "in.txt"
    source.write_text("apple river\n", encoding="utf-8")
    capsys.readouterr()
    # The model is not even read: the directory could never be made, so nothing is translated.
    code = nmt("-q", "attend", "-m", tmp_path / "model.pt", "-i", source, "--out-dir", source / "maps")
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    assert (
        captured.err == f"nmt: error: --out-dir {source / 'maps'}: {source} is a file, expected a directory\n"
    )


def test_damaged_lines_are_left_out_and_the_figure_is_drawn(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    write_metrics(run_dir, last=400, cut_short=False)
    damaged = [train_record(450) | {"loss": 1e308}, train_record(500) | {"lr": -1e308}]
    with (run_dir / "metrics.jsonl").open("ab") as f:
        f.write("".join(json.dumps(r) + "\n" for r in damaged).encode() + b"\xff\xfe not UTF-8\n")
    assert [r["update"] for r in plot.read_run(run_dir).train] == list(range(50, 401, 50))
    out = tmp_path / "curves.png"
    assert nmt("-q", "plot", run_dir, "-o", out) == 0 and out.stat().st_size > 0
    assert nmt("-q", "plot", run_dir, "--terminal") == 0


def test_attend_reads_a_nul_and_an_over_long_line_as_translate_does(
    trained: TrainedRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("matplotlib")
    source = tmp_path / "in.txt"
    long = " ".join(["apple river"] * 100)  # more pieces than the tiny model's 63 positions
    source.write_bytes(b"apple\x00river\n" + long.encode() + b"\n")
    translated = tmp_path / "out.txt"
    assert nmt("translate", "-m", trained.checkpoint, "-i", source, "-o", translated, "--threads", 1) == 0
    warned = capsys.readouterr().err
    assert "1 input lines were longer" in warned
    args = ["-m", trained.checkpoint, "-i", source, "--out-dir", tmp_path / "maps", "--threads", 1]
    assert nmt("attend", *args) == 0
    captured = capsys.readouterr()
    assert captured.out == translated.read_text(encoding="utf-8")
    assert "1 input lines were longer" in captured.err


def test_a_number_too_large_for_a_float_is_left_out_and_a_boolean_is_no_update(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    write_metrics(run_dir, last=400, cut_short=False)
    with (run_dir / "metrics.jsonl").open("a") as f:
        f.write('{"type": "train", "update": 450, "loss": 1' + "0" * 400 + "}\n")
        f.write(json.dumps(train_record(100) | {"update": True, "loss": 0.5}) + "\n")
    run = plot.read_run(run_dir)
    assert [r["update"] for r in run.train] == list(range(50, 401, 50))  # true did not supersede them
    assert run.left_out == (11,)  # 8 train and 2 valid records before it
    capsys.readouterr()
    assert nmt("plot", run_dir, "--terminal") == 0
    assert "left out 1 line(s) of metrics.jsonl" in capsys.readouterr().err


def test_a_run_that_has_not_logged_yet_is_left_out_of_a_comparison(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_metrics(tmp_path / "old")
    started = tmp_path / "new"  # what `nmt train` has written before its first log
    (started / "checkpoints").mkdir(parents=True)
    (started / "config.toml").write_text("[model]\n", encoding="utf-8")
    capsys.readouterr()
    assert nmt("plot", tmp_path / "old", started, "--terminal") == 0
    captured = capsys.readouterr()
    assert f"warning: {started}: no training records yet; left out" in captured.err.replace("\n", "")
    assert "old" in captured.out
    assert nmt("-q", "plot", started, "--terminal") == 2
    assert capsys.readouterr().err == f"nmt: error: no training records yet in {started}\n"


def test_the_terminal_chart_is_ascii_where_stdout_is_not_utf8(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    write_metrics(tmp_path / "Läufe")
    write_metrics(tmp_path / "b", last=600)
    ascii_out = io.TextIOWrapper(io.BytesIO(), encoding="ascii")  # as under LANG=C or PYTHONIOENCODING=ascii
    monkeypatch.setattr(sys, "stdout", ascii_out)
    monkeypatch.setenv("COLUMNS", "80")
    assert nmt("-q", "plot", tmp_path / "Läufe", tmp_path / "b", "--terminal") == 0
    ascii_out.flush()
    out = ascii_out.buffer.getvalue().decode("ascii")
    rows = [line for line in out.splitlines() if len(line) > 11 and line[10] in "+|"]
    assert len(rows) == 17  # 16 rows of the chart and the x axis
    assert rows[0][11] == "+"  # train loss, highest at the first update (run b drawn over the first)
    assert ". train  o valid  L\\xe4ufe" in out and "+ train  # valid  b" in out


@pytest.mark.parametrize(
    "error,code,said",
    [
        (errno.EACCES, 2, "check the permissions of its directory or choose another --output"),
        (errno.EROFS, 2, "choose another --output"),
        (errno.ENOSPC, 1, "free some disk space or choose another --output"),
    ],
)
def test_a_picture_that_cannot_be_written_gets_the_exit_code_of_its_cause(
    error: int,
    code: int,
    said: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As `translate -o` and `average -o`: 2 where the place is at fault (a read-only directory,
    which root, running these tests, cannot make), 1 where the disk is."""
    pytest.importorskip("matplotlib")
    write_metrics(tmp_path / "run")

    @contextlib.contextmanager
    def refused(path: Path, binary: bool = False, durable: bool = False) -> Iterator[None]:
        raise OSError(error, os.strerror(error))
        yield

    monkeypatch.setattr(files, "atomic_write", refused)
    out = tmp_path / "curves.png"
    capsys.readouterr()
    assert nmt("-q", "plot", tmp_path / "run", "-o", out) == code
    assert (
        capsys.readouterr().err
        == f"nmt: error: --output {out}: cannot write ({os.strerror(error)}); {said}\n"
    )
    assert not out.exists()


def test_a_run_directory_whose_name_is_not_utf8_is_labelled_with_escapes(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    run_dir = tmp_path / os.fsdecode(b"run\xff")
    write_metrics(run_dir)
    assert plot.read_run(run_dir).label == "run\\xff"
    out = tmp_path / "curves.png"
    assert nmt("-q", "plot", run_dir, "-o", out) == 0  # matplotlib's fonts refuse the surrogate
    assert out.read_bytes()[:4] == b"\x89PNG"


def test_an_output_that_is_a_run_s_metrics_is_refused_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_metrics(tmp_path / "run")
    before = (tmp_path / "run" / "metrics.jsonl").read_bytes()
    link = tmp_path / "curves.svg"
    link.symlink_to(tmp_path / "run" / "metrics.jsonl")
    capsys.readouterr()
    assert nmt("-q", "plot", tmp_path / "run", "-o", link) == 2
    said = (
        f"nmt: error: --output {link}: is an input of this command (as {tmp_path / 'run' / 'metrics.jsonl'})"
    )
    assert capsys.readouterr().err.startswith(said)
    assert (tmp_path / "run" / "metrics.jsonl").read_bytes() == before
