"""Checkpoints that fit a disk: numbered checkpoints hold weights only (optionally in the training
precision), checkpoint_last.pt the training state that resume reads, and `nmt average` streams,
holding one checkpoint at a time besides its fp32 sum."""

from __future__ import annotations

import os
import weakref
from pathlib import Path

import pytest
import torch
from helpers import Corpus, TrainedRun, nmt, train_args

from nmt_cli import averaging, checkpoint
from nmt_cli.recipe import load_recipe


def tied(weights: dict[str, torch.Tensor]) -> list[list[str]]:
    """The groups of names that hold one tensor (tied embeddings)."""
    groups: dict[tuple[int, int], list[str]] = {}
    for name, tensor in weights.items():
        groups.setdefault((tensor.untyped_storage().data_ptr(), tensor.storage_offset()), []).append(name)
    return sorted(names for names in groups.values() if len(names) > 1)


def trained_saving_every(corpus: Corpus, tmp_path: Path, updates: int, every: int) -> tuple[Path, Path]:
    """A run trained in `tmp_path`/run to `updates`, a numbered checkpoint every `every` updates: its
    folder and its checkpoints folder."""
    run = tmp_path / "run"
    saving = (f"train.max_updates={updates}", f"train.save_every_updates={every}")
    assert nmt(*train_args(corpus.data, run, *saving)) == 0
    return run, run / "checkpoints"


def test_numbered_checkpoints_hold_the_weights_and_last_the_training_state(trained: TrainedRun) -> None:
    directory = trained.run_dir / "checkpoints"
    last = checkpoint.load(directory / "checkpoint_last.pt")
    assert last.train_state is not None and last.update == trained.updates
    found = checkpoint.numbered(directory)
    assert [update for update, _ in found][-1] == trained.updates
    for update, path in found:
        saved = checkpoint.load(path)
        assert saved.train_state is None, f"{path.name} holds the optimizer's state"
        assert saved.update == update and saved.kind == "train"
    newest = checkpoint.load(found[-1][1])
    assert not os.path.samefile(found[-1][1], directory / "checkpoint_last.pt")
    assert newest.model.keys() == last.model.keys()
    assert all(torch.equal(newest.model[name], last.model[name]) for name in last.model)
    assert "checkpoint_last.pt" in (directory / "README.txt").read_text()


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_weights_in_the_training_precision(precision: str) -> None:
    weights = {"w": torch.randn(4, 4), "steps": torch.tensor([3])}
    kept = checkpoint.numbered_weights(weights, "train", precision)
    want = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]
    assert kept["w"].dtype == want and torch.equal(kept["w"], weights["w"].to(want))
    assert torch.equal(kept["steps"], weights["steps"])
    assert checkpoint.numbered_weights(weights, "fp32", precision)["w"].dtype == torch.float32


def test_bf16_numbered_checkpoints_average_in_fp32_and_translate(corpus: Corpus, tmp_path: Path) -> None:
    run = tmp_path / "run"
    options = ['train.precision="bf16"', 'train.checkpoint_precision="train"']
    assert (
        nmt(*train_args(corpus.data, run, *options, "train.max_updates=20", "train.save_every_updates=10"))
        == 0
    )
    # A CPU without bf16 trains in fp32 (with a warning), and its checkpoints are fp32.
    trained_in = load_recipe(run / "config.toml").train.precision
    want = torch.bfloat16 if trained_in == "bf16" else torch.float32
    found = checkpoint.numbered(run / "checkpoints")
    assert [update for update, _ in found] == [10, 20]
    saved = [checkpoint.load(path).model for _, path in found]
    last = checkpoint.load(run / "checkpoints" / "checkpoint_last.pt").model
    for name, tensor in last.items():
        assert tensor.dtype == torch.float32
        assert saved[1][name].dtype == want and torch.equal(saved[1][name], tensor.to(want))

    assert tied(last) and tied(saved[1]) == tied(last)  # a tied embedding is saved once, still tied

    output = tmp_path / "average.pt"
    assert nmt("-q", "average", "--run", run, "--last", 2, "-o", output) == 0
    averaged = checkpoint.load(output).model
    assert tied(averaged) == tied(last)
    for name, tensor in averaged.items():
        assert tensor.dtype == torch.float32
        assert torch.equal(tensor, (saved[0][name].float() + saved[1][name].float()) / 2)
    source = tmp_path / "in.txt"
    source.write_text("\n".join(corpus.test_src[:5]) + "\n")
    translated = tmp_path / "out.txt"
    assert nmt("-q", "translate", "-m", output, "-i", source, "-o", translated, "--device", "cpu") == 0
    assert len(translated.read_text().splitlines()) == 5


def test_average_holds_one_checkpoint_at_a_time(trained: TrainedRun, monkeypatch: pytest.MonkeyPatch) -> None:
    held: list[weakref.ref[torch.Tensor]] = []  # a weight of each checkpoint loaded so far
    real_load = checkpoint.load

    def load(path: Path) -> checkpoint.Checkpoint:
        still = [ref for ref in held if ref() is not None]
        assert not still, f"{len(still)} checkpoint(s) still held when {path.name} is read"
        loaded = real_load(path)
        held.append(weakref.ref(next(iter(loaded.model.values()))))
        return loaded

    monkeypatch.setattr(averaging, "load", load)
    paths = [path for _, path in checkpoint.numbered(trained.run_dir / "checkpoints")]
    assert len(paths) >= 3
    averaged = averaging.average(paths)
    assert averaged.train_state is None and len(averaged.averaged_from or []) == len(paths)


def test_a_save_cut_between_the_numbered_and_the_last_checkpoint_is_made_whole(
    corpus: Corpus, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    last = run / "checkpoints" / "checkpoint_last.pt"
    assert nmt(*train_args(corpus.data, run, "train.max_updates=2", "train.save_every_updates=2")) == 0
    at_2 = last.read_bytes()
    assert nmt(*train_args(corpus.data, run, "train.max_updates=4", "train.save_every_updates=2")) == 0
    last.write_bytes(at_2)  # as a kill after checkpoint_4.pt and before checkpoint_last.pt leaves it
    assert nmt(*train_args(corpus.data, run, "train.max_updates=4", "train.save_every_updates=2")) == 0
    assert checkpoint.load(last).update == 4  # the run's end is saved, though checkpoint_4.pt was there


def test_a_last_checkpoint_without_the_training_state_is_refused_before_any_change(
    corpus: Corpus, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run, checkpoints = trained_saving_every(corpus, tmp_path, updates=2, every=1)
    last = checkpoints / "checkpoint_last.pt"
    last.write_bytes((checkpoints / "checkpoint_1.pt").read_bytes())  # weights only
    metrics = (run / "metrics.jsonl").read_bytes()
    capsys.readouterr()
    assert nmt(*train_args(corpus.data, run, "train.max_updates=4", quiet=False)) == 2
    line = capsys.readouterr().err.strip()
    assert "not the training state" in line and f"--init-from {last} --out NEW_DIR" in line
    assert (run / "metrics.jsonl").read_bytes() == metrics


def test_a_run_of_an_earlier_nmt_without_its_last_checkpoint_is_told_to_link_the_newest(
    corpus: Corpus, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run, checkpoints = trained_saving_every(corpus, tmp_path, updates=2, every=2)
    # An earlier nmt's numbered checkpoints held the training state.
    (checkpoints / "checkpoint_2.pt").write_bytes((checkpoints / "checkpoint_last.pt").read_bytes())
    (checkpoints / "checkpoint_last.pt").unlink()
    capsys.readouterr()
    assert nmt(*train_args(corpus.data, run, "train.max_updates=4", quiet=False)) == 2
    line = capsys.readouterr().err.strip()
    assert f"ln -f {checkpoints / 'checkpoint_2.pt'} {run / 'checkpoints' / 'checkpoint_last.pt'}" in line
