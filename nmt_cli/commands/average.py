"""`nmt average`: average the parameters of several checkpoints into one that `translate` loads."""

from __future__ import annotations

import os
from pathlib import Path

from nmt_cli import averaging, checkpoint
from nmt_cli.errors import InputError
from nmt_cli.files import not_an_input, output_target
from nmt_cli.report import Reporter


def run(checkpoints: list[Path], output: Path, run_dir: Path | None, last: int | None, quiet: bool) -> None:
    reporter = Reporter(quiet)
    if run_dir is not None and checkpoints:
        raise InputError("give either checkpoint files or --run RUN_DIR, not both")
    if run_dir is not None:
        checkpoints = latest(run_dir, last, reporter)
    elif not checkpoints:
        raise InputError("nothing to average: give checkpoint files or --run RUN_DIR [--last N]")
    if last is not None and run_dir is None:
        raise InputError("--last needs --run RUN_DIR")
    _each_once(checkpoints)
    output_target(output, "--output")  # before the work: a directory or a missing parent is refused
    not_an_input(output, checkpoints, "--output")
    if checkpoint.numbered_or_last(output):
        raise InputError(
            f"--output {output}: the name of a training checkpoint, which resuming the run would read; "
            "choose another name (say, average.pt)"
        )
    averaged = averaging.average(
        checkpoints,
        progress=lambda rest: reporter.progress(rest, "averaging", total=len(rest), unit=" checkpoints"),
    )
    checkpoint.save(averaged, output, "--output")
    # An average, best or imported checkpoint has no update of its own (-1): its name says what it is.
    sources = averaged.averaged_from or []
    made = [str(s["update"]) if s["update"] >= 0 else Path(s["path"]).name for s in sources]
    reporter.info(f"averaged {len(checkpoints)} checkpoints ({', '.join(made)}) into {output}")


def _each_once(checkpoints: list[Path]) -> None:
    """Refuse a checkpoint given twice (by any name): it would weigh twice in the average."""
    seen: dict[tuple[int, int], Path] = {}
    for path in checkpoints:
        try:
            info = os.stat(path)
        except OSError:
            continue  # loading names what is wrong with it
        first = seen.get((info.st_dev, info.st_ino))
        seen[(info.st_dev, info.st_ino)] = path
        if first is not None:
            shown = "" if str(first) == str(path) else f" (as {first})"
            raise InputError(f"{path}: given twice{shown}; each checkpoint counts once in an average")


def latest(run_dir: Path, last: int | None, reporter: Reporter) -> list[Path]:
    """The newest numbered checkpoints of a run by update number; N defaults to the recipe's average.last."""
    if not run_dir.is_dir():
        raise InputError(f"--run {run_dir}: no such run directory")
    found = checkpoint.numbered(run_dir / "checkpoints")
    if not found:
        raise InputError(f"--run {run_dir}: no numbered checkpoints in {run_dir / 'checkpoints'}")
    if last is None:
        last = checkpoint.load(found[-1][1]).run_config(found[-1][1]).average.last
    if last < 1:
        raise InputError(f"--last {last}: must be at least 1")
    if len(found) < last:
        reporter.warn(f"{run_dir} has only {len(found)} numbered checkpoints; averaging those, not {last}")
    return [path for _, path in found[-last:]]
