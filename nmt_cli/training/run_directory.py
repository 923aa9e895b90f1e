"""A run directory (`nmt train --out`): the rules that protect earlier work (which checkpoint a
run resumes from, and where a new run may start), and what a session writes there before its
first update."""

from __future__ import annotations

from pathlib import Path

from nmt_cli import checkpoint
from nmt_cli.config import RunConfig
from nmt_cli.errors import InputError
from nmt_cli.files import atomic_write
from nmt_cli.recipe import dump_toml
from nmt_cli.report import MetricsLog, Reporter

LAST = Path("checkpoints") / "checkpoint_last.pt"

RUN_FILES = {".lock", "config.toml", "metrics.jsonl", "checkpoints"}


def last_checkpoint(last: Path) -> checkpoint.Checkpoint:
    """The checkpoint to resume, checked before anything of the run is touched; a damaged one, or
    one without the training state, says how to go on from another of the run."""
    try:
        resume = checkpoint.load(last)
    except checkpoint.DamagedCheckpoint as err:
        others = [path for _, path in checkpoint.numbered(last.parent) if not _same_file(path, last)]
        if not others:
            raise
        raise InputError(f"{err}; {_start_from(others[-1], last)}") from None
    if resume.train_state is None or resume.progress is None:
        raise InputError(
            f"{last}: holds the weights but not the training state (Adam's moments, the place in the "
            f"data), so the run cannot resume; train on from it in a new run with --init-from {last} "
            "--out NEW_DIR"
        )
    return resume


def _start_from(numbered: Path, last: Path) -> str:
    """What to do where checkpoint_last.pt is lost and `numbered` is the run's newest checkpoint:
    resume from it where it holds the training state (an earlier nmt wrote it so), else start a
    new run from its weights."""
    if checkpoint.load(numbered).train_state is not None:
        # A hard link: `ln -f` replaces the last, where `cp` would write through a link to another.
        return f"to resume from {numbered.name}: ln -f {numbered} {last}"
    return (
        f"numbered checkpoints hold weights only: train on from {numbered.name} in a new run with "
        f"--init-from {numbered} --out NEW_DIR"
    )


def checkpoints_to_start(
    out: Path, init_from: Path | None, reporter: Reporter
) -> tuple[checkpoint.Checkpoint | None, checkpoint.Checkpoint | None]:
    """The run's last checkpoint to resume, or else the --init-from one to start from (or neither)."""
    last = out / LAST
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {out}: exists and is not a directory")
    # A link to nowhere is loaded too, for its one-line error: never taken for a new run.
    resume = last_checkpoint(last) if last.exists() or last.is_symlink() else None
    if resume is None:
        nothing_else_in(out)
    if init_from is not None and resume is not None:
        reporter.info(f"{out} has checkpoints: resuming it (--init-from applies to a new run only)")
    init = checkpoint.load(init_from) if init_from is not None and resume is None else None
    return resume, init


def place_in_data(resume: checkpoint.Checkpoint | None) -> tuple[int, int]:
    """The (epoch, batch) a resumed run goes on from."""
    progress = resume.progress if resume is not None and resume.progress is not None else {}
    return int(progress.get("epoch", 1)), int(progress.get("batch", 0))


def prepare(out: Path, cfg: RunConfig, update: int, place: tuple[int, int]) -> None:
    """checkpoints/ (without what a killed run left half-written), the resolved config.toml, and
    metrics.jsonl without the records past `update` (a killed session's, which this one redoes)."""
    try:
        (out / "checkpoints").mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise InputError(
            f"--out {out}: cannot create the run directory ({err.strerror or err}); choose a writable --out"
        ) from None
    checkpoint.remove_stale_temporaries(out / "checkpoints")
    for name in ("config.toml", "metrics.jsonl"):  # found now, not at the first log hours in
        path = out / name
        if path.exists() and not path.is_file() or path.is_symlink():
            raise InputError(f"--out {out}: {name} is in the way and is not a file; move it")
    with atomic_write(out / "config.toml") as stream:
        stream.write(dump_toml(cfg))
    MetricsLog(out / "metrics.jsonl").keep_until(update, place)


def describe(directory: Path, kept_in: str) -> None:
    """checkpoints/README.txt: what each file holds, for whoever lists the directory."""
    text = (
        f"checkpoint_<update>.pt  the model's weights at that update ({kept_in}), for `nmt average`, "
        "`nmt translate` and --init-from\n"
        "checkpoint_last.pt      the newest weights (fp32) with Adam's moments, the loss scaler, the random "
        "states and the place in the data: what `nmt train` resumes from\n"
        "checkpoint_best.pt      the weights of the best validation so far (train.best_metric)\n"
    )
    target = directory / "README.txt"
    if not target.is_file() or target.read_text(encoding="utf-8") != text:
        with atomic_write(target) as out:
            out.write(text)


def _checkpoint_files(directory: Path) -> list[str]:
    """The checkpoints in a run's checkpoints/, leaving out what a killed writer left half-written."""
    if not directory.is_dir():
        return []
    return sorted(p.name for p in directory.iterdir() if p.suffix == ".pt" and not p.name.startswith("."))


def _same_file(one: Path, other: Path) -> bool:
    try:
        return one.samefile(other)
    except OSError:
        return False


def nothing_else_in(out: Path) -> None:
    """A new run starts in a new or empty directory, or in one of a run killed before its first
    checkpoint: never over another run's checkpoints, nor over files nmt did not write."""
    if not out.is_dir():
        return
    saved = checkpoint.numbered(out / "checkpoints")
    if saved:
        newest = saved[-1][1]
        advice = _start_from(newest, out / LAST)
        raise InputError(f"--out {out}: its run saved {newest.name} but {LAST} is missing; {advice}")
    kept = _checkpoint_files(out / "checkpoints")
    if kept:  # checkpoint_best.pt, say, where keep_last = 0 pruned every numbered one
        # or where a full disk failed the first save: the best alone holds no training state.
        raise InputError(
            f"--out {out}: holds {kept[0]} of a run but {LAST} is missing, and no numbered checkpoint "
            "(checkpoint_best.pt and averages cannot be resumed); copy a numbered checkpoint of the run "
            f"to {LAST}, move {' and '.join(kept)} out of {out / 'checkpoints'} to start afresh, or "
            "choose a new --out"
        )
    # A run makes checkpoints/ before anything else: without it, config.toml is somebody else's.
    ours = RUN_FILES if (out / "checkpoints").is_dir() else {".lock"}
    others = sorted(entry.name for entry in out.iterdir() if entry.name not in ours)
    if others:
        shown = ", ".join(others[:3]) + (", ..." if len(others) > 3 else "")
        raise InputError(
            f"--out {out}: holds files that are not an nmt run's ({shown}); choose a new or empty directory"
        )
