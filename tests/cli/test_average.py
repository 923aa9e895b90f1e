"""`nmt average` on the tiny copy run: the elementwise mean, the identity for one checkpoint,
the last N by update number (not file time), refusal of incompatible checkpoints, and an
output that translate loads, without optimizer state, naming its sources."""

from __future__ import annotations

import glob
import os
import shutil
import time
from pathlib import Path

import pytest
import torch
from helpers import Corpus, TrainedRun, nmt, one_line_error, refused, train_args

from nmt_cli import checkpoint


def numbered(run: TrainedRun, update: int) -> Path:
    return run.run_dir / "checkpoints" / checkpoint.numbered_name(update)


def average(*args: object) -> int:
    return nmt("-q", "average", *args)


def check_mean(output: Path, sources: list[Path]) -> None:
    """Every float tensor of `output` is the mean of the sources' (computed here in float64)."""
    got = checkpoint.load(output).model
    inputs = [checkpoint.load(p).model for p in sources]
    assert got.keys() == inputs[0].keys()
    floats = [name for name, t in got.items() if t.is_floating_point()]
    assert floats, "the model has float parameters"
    for name, tensor in got.items():
        if not tensor.is_floating_point():
            assert torch.equal(tensor, inputs[0][name]), name
            continue
        assert tensor.dtype == inputs[0][name].dtype
        mean = sum(t[name].double() for t in inputs) / len(inputs)
        torch.testing.assert_close(tensor.double(), mean, rtol=1e-6, atol=1e-7, msg=f"{name} is not the mean")


def test_two_checkpoints_average_to_their_mean(trained: TrainedRun, tmp_path: Path) -> None:
    sources = [numbered(trained, trained.save_every), numbered(trained, trained.updates)]
    output = tmp_path / "avg.pt"
    assert average(*sources, "-o", output) == 0
    check_mean(output, sources)
    # Not one of the inputs handed back: the checkpoints differ, and so does the mean from each.
    got = checkpoint.load(output).model
    for source in sources:
        theirs = checkpoint.load(source).model
        assert any(not torch.equal(got[n], theirs[n]) for n in got if got[n].is_floating_point())


def test_one_checkpoint_averages_to_itself(trained: TrainedRun, tmp_path: Path) -> None:
    output = tmp_path / "avg.pt"
    assert average(trained.checkpoint, "-o", output) == 0
    got = checkpoint.load(output).model
    want = checkpoint.load(trained.checkpoint).model
    assert got.keys() == want.keys()
    for name in want:
        assert got[name].dtype == want[name].dtype
        assert torch.equal(got[name], want[name]), name


def test_the_report_names_each_source_by_update_or_by_name(
    trained: TrainedRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = tmp_path / "first.pt"
    assert average(trained.checkpoint, "-o", first) == 0  # an average: no update of its own
    capsys.readouterr()
    output = tmp_path / "second.pt"
    assert nmt("average", first, numbered(trained, trained.save_every), "-o", output) == 0
    assert f"averaged 2 checkpoints (first.pt, {trained.save_every}) into {output}" in capsys.readouterr().err


def test_last_n_of_a_run_goes_by_update_number_not_file_time(trained: TrainedRun, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(trained.run_dir, run_dir)
    ckpts = run_dir / "checkpoints"
    updates = sorted(u for u, _ in checkpoint.numbered(ckpts))
    assert updates == list(range(trained.save_every, trained.updates + 1, trained.save_every))
    # The oldest checkpoint becomes the newest file, and the newest the oldest.
    future = time.time() + 3600
    os.utime(ckpts / checkpoint.numbered_name(updates[0]), (future, future))
    os.utime(ckpts / checkpoint.numbered_name(updates[-1]), (1_000_000, 1_000_000))

    output = tmp_path / "avg.pt"
    assert average("--run", run_dir, "--last", 2, "-o", output) == 0
    payload = checkpoint.load(output)
    assert [s["update"] for s in payload.averaged_from] == updates[-2:]
    check_mean(output, [ckpts / checkpoint.numbered_name(u) for u in updates[-2:]])


def test_the_average_loads_in_translate_without_optimizer_state(
    trained: TrainedRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "avg.pt"
    assert average("--run", trained.run_dir, "--last", 2, "-o", output) == 0
    payload = checkpoint.load(output)
    assert payload.train_state is None and not {"optimizer", "scaler", "rng"} & payload.to_dict().keys()
    assert payload.config == checkpoint.load(trained.checkpoint).config
    sources = payload.averaged_from
    assert [Path(s["path"]).name for s in sources] == [
        checkpoint.numbered_name(u) for u in (trained.updates - trained.save_every, trained.updates)
    ]
    assert [s["update"] for s in sources] == [trained.updates - trained.save_every, trained.updates]

    source = tmp_path / "in.txt"
    lines = ["apple river stone", "", "green music paper tiger"]
    source.write_text("".join(f"{x}\n" for x in lines), encoding="utf-8")
    hyp = tmp_path / "out.txt"
    assert nmt("-q", "translate", "-m", output, "-i", source, "-o", hyp, "--threads", 1) == 0
    assert hyp.read_text(encoding="utf-8").splitlines() == lines  # the average still copies


def test_checkpoints_of_different_models_are_refused(
    trained: TrainedRun, corpus: Corpus, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = tmp_path / "other"
    assert nmt(*train_args(corpus.data, other, "model.d_ff=128", "train.max_updates=1")) == 0
    output = tmp_path / "avg.pt"
    capsys.readouterr()
    assert "model.d_ff" in refused(
        capsys, "average", trained.checkpoint, other / "checkpoints" / "checkpoint_last.pt", "-o", output
    )
    assert not output.exists()


def test_a_parameter_of_another_shape_is_refused_by_name(
    trained: TrainedRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Same config, one tensor reshaped (as a foreign or damaged checkpoint might have it)."""
    payload = checkpoint.load(trained.checkpoint)
    name = next(n for n, t in payload.model.items() if t.dim() == 2)
    payload.model[name] = torch.zeros(payload.model[name].shape[0] + 1, payload.model[name].shape[1])
    changed = tmp_path / "changed.pt"
    checkpoint.save(payload, changed)
    output = tmp_path / "avg.pt"
    capsys.readouterr()
    line = refused(capsys, "average", trained.checkpoint, changed, "-o", output)
    assert name in line and "shape" in line
    assert not output.exists()


def test_a_run_records_its_languages_and_the_average_keeps_them(trained: TrainedRun, tmp_path: Path) -> None:
    assert checkpoint.load(trained.checkpoint).languages == ("src", "tgt")
    best = trained.run_dir / "checkpoints" / "checkpoint_best.pt"
    assert checkpoint.load(best).languages == ("src", "tgt")
    output = tmp_path / "avg.pt"
    assert average("--run", trained.run_dir, "--last", 2, "-o", output) == 0
    assert checkpoint.load(output).languages == ("src", "tgt")


def test_checkpoints_of_opposite_directions_are_refused(
    trained: TrainedRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A joint vocabulary serves both directions, so the sentencepiece models alone cannot tell."""
    payload = checkpoint.load(trained.checkpoint)
    payload.languages = ("tgt", "src")
    reverse = tmp_path / "reverse.pt"
    checkpoint.save(payload, reverse)
    output = tmp_path / "avg.pt"
    capsys.readouterr()
    assert "src-tgt vs tgt-src" in refused(capsys, "average", trained.checkpoint, reverse, "-o", output)
    assert not output.exists()
    # One written before checkpoints recorded languages averages with either.
    payload.languages = None
    old = tmp_path / "old.pt"
    checkpoint.save(payload, old)
    assert average(old, trained.checkpoint, "-o", output) == 0
    assert checkpoint.load(output).languages == ("src", "tgt")
    # The directions are compared with the first that records one, not only with the first.
    output.unlink()
    capsys.readouterr()
    line = refused(capsys, "average", old, trained.checkpoint, reverse, "-o", output)
    assert "different directions" in line and str(trained.checkpoint) in line and str(reverse) in line
    assert not output.exists()


def test_an_output_that_resuming_reads_is_refused(
    trained: TrainedRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    shutil.copytree(trained.run_dir, run)
    ckpts = run / "checkpoints"
    before = {p.name: p.read_bytes() for p in ckpts.iterdir()}
    for output in (ckpts / "checkpoint_last.pt", ckpts / "checkpoint_300.pt", ckpts / "checkpoint_7.pt"):
        capsys.readouterr()
        assert average("--run", run, "--last", 2, "-o", output) == 2, output
        one_line_error(capsys)
    assert {p.name: p.read_bytes() for p in ckpts.iterdir()} == before
    assert average("--run", run, "--last", 2, "-o", run / "average.pt") == 0


def test_a_checkpoint_given_twice_is_refused(
    trained: TrainedRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    link = tmp_path / "same.pt"
    link.symlink_to(trained.checkpoint)
    for twice in ([trained.checkpoint, trained.checkpoint], [trained.checkpoint, link]):
        capsys.readouterr()
        assert nmt("average", *twice, "-o", tmp_path / "avg.pt") == 2
        assert "given twice" in capsys.readouterr().err
    assert not (tmp_path / "avg.pt").exists()


def test_the_glob_example_of_the_help_averages_the_numbered_checkpoints(
    trained: TrainedRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # `checkpoint_*.pt` would also match checkpoint_last.pt (the newest numbered one under another
    # name: refused as given twice) and checkpoint_best.pt (one of them again, weighed twice).
    capsys.readouterr()
    assert nmt("average", "--help") == 0
    example = next(line for line in capsys.readouterr().out.splitlines() if "checkpoints/checkpoint_" in line)
    pattern = example.split()[2].replace("runs/m30k", str(trained.run_dir))
    matched = [Path(p) for p in sorted(glob.glob(pattern))]
    assert average(*matched, "-o", tmp_path / "avg.pt") == 0
    assert sorted(matched) == sorted(path for _, path in checkpoint.numbered(trained.run_dir / "checkpoints"))
