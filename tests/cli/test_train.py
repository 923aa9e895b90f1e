"""`nmt train` end to end on the tiny copy task: it learns, it resumes exactly, it refuses bad
recipes and a changed model in one line, it stops cleanly on SIGTERM/SIGINT, and it writes
metrics.jsonl and config.toml that can be read back."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
import torch
from helpers import (
    Corpus,
    TrainedRun,
    nmt,
    nmt_command,
    prepare_args,
    refused,
    sentences,
    subprocess_env,
    train_args,
    wait_until,
    write_split,
)
from test_checkpoint_disk import trained_saving_every

from nmt_cli import checkpoint
from nmt_cli.data import corpus as corpus_io
from nmt_cli.data.batching import make_batches
from nmt_cli.model import Transformer
from nmt_cli.recipe import load_recipe


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def _state(path: Path) -> tuple[dict[str, torch.Tensor], dict]:
    payload = checkpoint.load(path)
    return payload.model, payload.progress


def test_a_tiny_model_learns_to_copy(trained: TrainedRun, corpus: Corpus, tmp_path: Path) -> None:
    hyp = tmp_path / "test.hyp"
    code = nmt(
        "-q", "translate", "-m", trained.checkpoint, "-i", corpus.raw / "test.src", "-o", hyp, "--threads", 1
    )
    assert code == 0
    outputs = _lines(hyp)
    assert len(outputs) == len(corpus.test_tgt)
    exact = sum(h == r for h, r in zip(outputs, corpus.test_tgt, strict=True)) / len(outputs)
    assert exact > 0.95, f"exact match {exact:.2%} after {trained.updates} updates"


def test_metrics_and_config_are_readable(trained: TrainedRun) -> None:
    records = [json.loads(line) for line in _lines(trained.run_dir / "metrics.jsonl")]
    train_records = [r for r in records if r["type"] == "train"]
    valid_records = [r for r in records if r["type"] == "valid"]
    assert [r["update"] for r in train_records] == list(range(50, trained.updates + 1, 50))
    assert [r["update"] for r in valid_records] == list(
        range(trained.save_every, trained.updates + 1, trained.save_every)
    )
    for record in train_records:
        assert record["loss"] > 0 and record["lr"] > 0 and record["tokens_per_s"] > 0
    for record in valid_records:
        assert record["loss"] > 0 and record["ppl"] >= 1.0
    assert train_records[-1]["loss"] < train_records[0]["loss"]

    cfg = load_recipe(trained.run_dir / "config.toml")
    assert (cfg.model.d_model, cfg.model.heads, cfg.model.max_positions) == (32, 2, 64)
    assert cfg.train.max_updates == trained.updates
    assert cfg.train.lr_schedule == "inverse_sqrt"
    assert cfg.model.src_vocab_size == cfg.model.tgt_vocab_size == 100


def _epoch_batches(data: Path, max_tokens: int = 512, seed: int = 1) -> int:
    """How many batches (= updates, with update_freq 1) the first epoch of the tiny run has."""
    split = corpus_io.load_split(data, "train")
    return len(make_batches(split.src.lengths(), split.tgt.lengths(), max_tokens, seed, 1))


RESUME = [
    "model.dropout=0.3",
    "model.attention_dropout=0.1",
    "model.activation_dropout=0.1",
    "train.label_smoothing=0.1",
    "train.valid_every_updates=0",
    "train.log_every_updates=1000",
    "train.keep_last=1000",
]


@pytest.fixture(scope="module")
def uninterrupted(corpus: Corpus, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    """One run through the first epoch and half of the second, saving after every update."""
    epoch = _epoch_batches(corpus.data)
    assert epoch >= 6, "the copy corpus should give several batches per epoch"
    run_dir = tmp_path_factory.mktemp("resume") / "uninterrupted"
    end = epoch + epoch // 2
    args = train_args(corpus.data, run_dir, *RESUME, f"train.max_updates={end}", "train.save_every_updates=1")
    assert nmt(*args) == 0
    return run_dir, epoch


@pytest.mark.parametrize(
    "where",
    ["mid-epoch", "across an epoch boundary", "at an epoch boundary"],
)
def test_an_interrupted_run_resumes_exactly(
    where: str, uninterrupted: tuple[Path, int], corpus: Corpus, tmp_path: Path
) -> None:
    reference_dir, epoch = uninterrupted
    stop, end = {
        "mid-epoch": (epoch // 3, 2 * epoch // 3),
        "across an epoch boundary": (epoch // 2, epoch + epoch // 2),
        "at an epoch boundary": (epoch, epoch + 2),
    }[where]
    run_dir = tmp_path / "run"
    first = train_args(
        corpus.data, run_dir, *RESUME, f"train.max_updates={stop}", "train.save_every_updates=0"
    )
    assert nmt(*first) == 0
    _, progress = _state(run_dir / "checkpoints" / "checkpoint_last.pt")
    assert progress["update"] == stop
    if where == "at an epoch boundary":
        assert (progress["epoch"], progress["batch"]) == (2, 0)
    else:
        assert (progress["epoch"], progress["batch"]) == (1, stop)

    # The second invocation names only the new stop: everything else comes from the run.
    resumed = ["-q", "train", "--data", corpus.data, "--out", run_dir, "--device", "cpu", "--threads", "1"]
    assert nmt(*resumed, "--set", f"train.max_updates={end}") == 0

    got, got_progress = _state(run_dir / "checkpoints" / "checkpoint_last.pt")
    want, want_progress = _state(reference_dir / "checkpoints" / checkpoint.numbered_name(end))
    assert got_progress["update"] == want_progress["update"] == end
    assert (got_progress["epoch"], got_progress["batch"]) == (want_progress["epoch"], want_progress["batch"])
    assert got.keys() == want.keys()
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=0, atol=1e-6, msg=f"{name} after resuming")
    # And the run did move: the resumed parameters are not those it stopped with.
    stopped, _ = _state(reference_dir / "checkpoints" / checkpoint.numbered_name(stop))
    assert any(not torch.equal(got[name], stopped[name]) for name in got)


@pytest.mark.parametrize(
    "overrides, named",
    [
        (["model.bogus=1"], "model.bogus"),
        (["model.dropout=1.5"], "model.dropout"),
        (["model.d_model=30", "model.heads=4"], "model.d_model"),
        (["train.max_tokens=abc"], "train.max_tokens"),
        (["nosection=1"], "nosection=1"),
        (["model.heads=0"], "model.heads"),
        (["train.log_every_updates=0"], "train.log_every_updates"),
        (["train.seed=-1"], "train.seed"),
        ([f"train.seed={2**70}"], "train.seed"),
        (["train.corpus_weights=[inf]"], "train.corpus_weights"),
        (["train.label_smoothing=nan"], "train.label_smoothing"),
        (["train.max_tokens=1"], "train.max_tokens = 1: no training pair"),
        (["train.pad_to_multiple=-8"], "train.pad_to_multiple"),
        (['train.lr_schedule="linear"', "train.max_updates=0", "train.max_minutes=0"], "train.lr_schedule"),
    ],
)
def test_a_bad_recipe_value_fails_in_one_line(
    overrides: list[str], named: str, corpus: Corpus, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    args = train_args(corpus.data, run_dir, *overrides, quiet=False)
    line = refused(capsys, *args)
    assert line.startswith("nmt: error:") and named in line
    assert not run_dir.exists()


def test_resuming_with_a_different_model_is_refused(
    corpus: Corpus, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    assert nmt(*train_args(corpus.data, run_dir, "train.max_updates=2")) == 0
    last = run_dir / "checkpoints" / "checkpoint_last.pt"
    before = last.read_bytes()
    capsys.readouterr()
    args = train_args(corpus.data, run_dir, "train.max_updates=4", "model.d_model=64", quiet=False)
    line = refused(capsys, *args)
    assert "model.d_model" in line and "resume" in line
    assert last.read_bytes() == before


@pytest.mark.parametrize(
    "limit", ["train.max_updates=6", "train.max_epochs=1"], ids=["max_updates", "max_epochs"]
)
def test_a_finished_run_run_again_stays_finished(
    limit: str, corpus: Corpus, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    args = train_args(
        corpus.data, run_dir, "train.max_updates=0", limit, "train.save_every_updates=2", quiet=False
    )
    assert nmt(*args) == 0
    checkpoints = run_dir / "checkpoints"
    files = {p.name: p.read_bytes() for p in checkpoints.iterdir()}
    metrics = (run_dir / "metrics.jsonl").read_bytes()
    capsys.readouterr()
    assert nmt(*args) == 0  # the same command again: no update past the limit, nothing pushed out
    err = capsys.readouterr().err
    assert "nothing to do: the run reached " + limit.split("=")[0] in err and "training stopped" not in err
    assert {p.name: p.read_bytes() for p in checkpoints.iterdir()} == files
    assert (run_dir / "metrics.jsonl").read_bytes() == metrics


def test_a_run_without_its_last_checkpoint_is_refused_not_restarted(
    corpus: Corpus, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir, checkpoints = trained_saving_every(corpus, tmp_path, updates=4, every=2)
    (checkpoints / "checkpoint_last.pt").unlink()
    kept = {p.name: p.read_bytes() for p in checkpoints.iterdir()}
    capsys.readouterr()
    args = train_args(corpus.data, run_dir, "train.max_updates=8", "train.keep_last=1", quiet=False)
    line = refused(capsys, *args)
    assert "checkpoint_4.pt" in line and "checkpoint_last.pt is missing" in line
    assert {p.name: p.read_bytes() for p in checkpoints.iterdir()} == kept
    (checkpoints / "checkpoint_last.pt").symlink_to(checkpoints / "gone.pt")  # a link to nowhere: refused too
    assert nmt(*args) == 2
    assert {p.name: p.read_bytes() for p in checkpoints.iterdir() if p.name != "checkpoint_last.pt"} == kept
    # Only the best checkpoint left (keep_last = 0 prunes the numbered ones): refused too.
    for name in ("checkpoint_last.pt", "checkpoint_2.pt", "checkpoint_4.pt"):
        (checkpoints / name).unlink()
    (checkpoints / "checkpoint_best.pt").write_bytes(kept["checkpoint_4.pt"])
    capsys.readouterr()
    assert "holds checkpoint_best.pt of a run" in refused(capsys, *args)
    assert (checkpoints / "checkpoint_best.pt").read_bytes() == kept["checkpoint_4.pt"]


def test_a_damaged_last_checkpoint_says_which_checkpoint_to_train_on_from(
    corpus: Corpus, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir, checkpoints = trained_saving_every(corpus, tmp_path, updates=4, every=2)
    last = checkpoints / "checkpoint_last.pt"
    assert not last.samefile(checkpoints / "checkpoint_4.pt")  # the damage leaves update 4's weights
    os.truncate(last, last.stat().st_size // 2)
    capsys.readouterr()
    line = refused(capsys, *train_args(corpus.data, run_dir, "train.max_updates=6", quiet=False))
    assert "not a complete checkpoint" in line
    assert f"--init-from {checkpoints / 'checkpoint_4.pt'} --out NEW_DIR" in line
    for update in (2, 4):  # no other checkpoint: the damage alone is reported
        os.remove(checkpoints / f"checkpoint_{update}.pt")
    capsys.readouterr()
    line = refused(capsys, *train_args(corpus.data, run_dir, "train.max_updates=6", quiet=False))
    assert "not a complete checkpoint" in line and "--init-from" not in line


def test_a_directory_of_other_files_is_refused_as_a_run(
    corpus: Corpus, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "mine"
    run_dir.mkdir()
    (run_dir / "config.toml").write_text("[tool.mine]\nx = 1\n", encoding="utf-8")
    line = refused(capsys, *train_args(corpus.data, run_dir, "train.max_updates=2", quiet=False))
    assert "holds files that are not an nmt run's (config.toml)" in line
    assert (run_dir / "config.toml").read_text(encoding="utf-8") == "[tool.mine]\nx = 1\n"
    assert sorted(p.name for p in run_dir.iterdir()) == ["config.toml"]


@pytest.mark.parametrize("name", ["metrics.jsonl", "config.toml"])
def test_a_run_file_that_is_not_a_file_is_refused_before_training(
    name: str, corpus: Corpus, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    assert nmt(*train_args(corpus.data, run_dir, "train.max_updates=2")) == 0
    (run_dir / name).unlink()
    (run_dir / name).mkdir()
    line = refused(capsys, *train_args(corpus.data, run_dir, "train.max_updates=4", quiet=False))
    assert f"{name} is in the way and is not a file" in line
    assert checkpoint.load(run_dir / "checkpoints" / "checkpoint_last.pt").update == 2


def test_a_metrics_record_that_cannot_be_written_names_the_file_and_how_to_go_on() -> None:
    from nmt_cli.errors import RunFailure
    from nmt_cli.report import MetricsLog

    with pytest.raises(RunFailure) as failed:
        MetricsLog(Path("/dev/full")).write({"type": "train", "update": 1})  # writing fails: ENOSPC
    assert "cannot write /dev/full (No space left on device)" in str(failed.value)
    assert "run the same command to resume" in str(failed.value)


def test_records_past_the_last_checkpoint_are_not_kept_twice(corpus: Corpus, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    args = train_args(corpus.data, run_dir, "train.max_updates=4", "train.log_every_updates=1")
    assert nmt(*args, "--set", "train.save_every_updates=2") == 0
    metrics = run_dir / "metrics.jsonl"
    # What a session killed at update 6 (after its checkpoint at 4) leaves: records past 4, the
    # last cut short.
    with metrics.open("a", encoding="utf-8") as out:
        out.write('{"type": "train", "update": 5, "loss": 1.0}\n{"type": "train", "update": 6, "lo')
    assert nmt(*train_args(corpus.data, run_dir, "train.max_updates=6", "train.log_every_updates=1")) == 0
    updates = [json.loads(line)["update"] for line in _lines(metrics) if '"train"' in line]
    assert updates == [1, 2, 3, 4, 5, 6]


def _wait_for_training(metrics: Path, process: subprocess.Popen) -> None:
    """Until the run has logged an update (so its signal handlers are installed)."""
    wait_until(
        lambda: metrics.exists() and '"train"' in metrics.read_text(encoding="utf-8"),
        "training logs an update",
        timeout=90,
        process=process,
    )


@pytest.mark.parametrize(
    "sig",
    # SIGTERM's own path (143) is the same handler; the slow tier runs it, the fast tier SIGINT.
    [
        pytest.param(signal.SIGTERM, id="SIGTERM", marks=pytest.mark.slow),
        pytest.param(signal.SIGINT, id="SIGINT"),
    ],
)
def test_a_signal_stops_training_cleanly(sig: signal.Signals, corpus: Corpus, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    args = train_args(
        corpus.data,
        run_dir,
        "train.max_updates=0",  # no limit: only the signal stops it
        "train.log_every_updates=5",
        "train.save_every_updates=0",
        "train.valid_every_updates=0",
        quiet=False,
    )
    process = subprocess.Popen(
        nmt_command(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=subprocess_env()
    )
    try:
        _wait_for_training(run_dir / "metrics.jsonl", process)
        process.send_signal(sig)
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 128 + sig.value, err  # saved, but stopped: as the signal says
    assert "Traceback" not in err
    assert f"stopped by {sig.name}" in err and "run the same command to resume" in err
    # Heard at once, before the update ends and the checkpoint is written:
    assert f"{sig.name}: stopping after this update with a checkpoint" in err
    assert ("Ctrl-C again" in err) == (sig == signal.SIGINT)
    payload = checkpoint.load(run_dir / "checkpoints" / "checkpoint_last.pt")
    assert payload.update > 0
    assert payload.train_state is not None and payload.train_state.rng
    model = Transformer(payload.run_config(run_dir).model)
    model.load_state_dict(payload.model)


def test_a_run_shorter_than_its_log_interval_still_leaves_a_record(corpus: Corpus, tmp_path: Path) -> None:
    run_dir = tmp_path / "short"
    args = train_args(corpus.data, run_dir, "train.max_updates=7", "train.log_every_updates=50")
    assert nmt(*args) == 0
    records = [json.loads(line) for line in _lines(run_dir / "metrics.jsonl")]
    train_records = [r for r in records if r["type"] == "train"]
    assert [r["update"] for r in train_records] == [7]
    assert train_records[0]["loss"] > 0 and train_records[0]["tokens_per_s"] > 0


def test_the_record_written_as_an_epoch_ends_is_of_that_epoch(corpus: Corpus, tmp_path: Path) -> None:
    run_dir = tmp_path / "one_epoch"
    args = train_args(
        corpus.data, run_dir, "train.max_updates=0", "train.max_epochs=1", "train.log_every_updates=100000"
    )
    assert nmt(*args) == 0
    records = [json.loads(line) for line in _lines(run_dir / "metrics.jsonl")]
    assert [r["epoch"] for r in records if r["type"] == "train"] == [1]  # the run ends in epoch 2's place


def test_the_linear_schedule_peaks_after_warm_up_and_reaches_zero_at_the_last_update(
    corpus: Corpus, tmp_path: Path
) -> None:
    run_dir = tmp_path / "linear"
    overrides = ['train.lr_schedule="linear"', "train.lr=1e-3", "train.warmup=10", "train.max_updates=40"]
    args = train_args(corpus.data, run_dir, *overrides, "train.log_every_updates=1")
    assert nmt(*args) == 0
    records = [json.loads(line) for line in _lines(run_dir / "metrics.jsonl")]
    lr = {r["update"]: r["lr"] for r in records if r["type"] == "train"}
    assert sorted(lr) == list(range(1, 41))
    assert lr[5] == pytest.approx(5e-4)  # warming up
    assert lr[10] == pytest.approx(7.5e-4)  # 1 - 10/40 of the budget left: below the warm-up's 1e-3
    assert lr[30] == pytest.approx(2.5e-4)
    assert lr[40] == 0.0


def test_restricted_attention_in_bf16_trains_without_a_skipped_update(tmp_path: Path) -> None:
    # Source and target lengths drawn independently: batches are cut by the longer side, so a
    # batch holds short sources padded far beyond the radius next to long ones.
    raw = tmp_path / "raw"
    raw.mkdir()
    for name, n, seed in (("train", 400, 10), ("valid", 20, 11)):
        write_split(raw / name, sentences(n, seed, 1, 10), sentences(n, seed + 100, 1, 10))
    data = tmp_path / "data"
    prepare = ["-q", "prepare", "--train", raw / "train", "--valid", raw / "valid", "--src", "src"]
    prepare += ["--tgt", "tgt", "--out", data, "--vocab-size", 100, "--no-byte-fallback", "--max-ratio", 20]
    assert nmt(*prepare) == 0
    run_dir = tmp_path / "windowed"
    args = train_args(
        data,
        run_dir,
        "model.attention_window=1",
        'train.precision="bf16"',
        "train.max_updates=10",
        "train.log_every_updates=5",
    )
    assert nmt(*args) == 0
    records = [json.loads(line) for line in _lines(run_dir / "metrics.jsonl")]
    assert [r for r in records if r["type"] == "skip"] == []
    assert [r["update"] for r in records if r["type"] == "train"] == [5, 10]


def test_a_run_saved_without_loss_scaling_resumes_into_an_enabled_scaler(trained: TrainedRun) -> None:
    from nmt_cli.training.run_state import restore_scaler

    saved = checkpoint.load(trained.checkpoint).train_state.scaler  # fp32 run: the scaler was off
    fresh = torch.amp.GradScaler("cpu", enabled=True)
    restore_scaler(fresh, saved)
    assert fresh.get_scale() == torch.amp.GradScaler("cpu", enabled=True).get_scale()
    # An fp16 run's scale carries over; a disabled scaler (bf16, fp32) ignores it.
    fp16 = torch.amp.GradScaler("cpu", enabled=True, init_scale=1024.0)
    fp16.scale(torch.ones(()))  # the scale exists once used
    resumed = torch.amp.GradScaler("cpu", enabled=True)
    restore_scaler(resumed, fp16.state_dict())
    assert resumed.get_scale() == 1024.0
    restore_scaler(torch.amp.GradScaler("cpu", enabled=False), fp16.state_dict())


def test_update_tokens_sets_update_freq_and_the_start_line_says_so(
    corpus: Corpus, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    args = train_args(corpus.data, run, "train.max_updates=2", "train.update_tokens=1500", quiet=False)
    assert nmt(*args) == 0
    # max_tokens 512 on one process: ceil(1500 / 512) = 3 batches per update.
    assert load_recipe(run / "config.toml").train.update_freq == 3
    assert "up to 1,536 tokens per update" in capsys.readouterr().err


def test_resuming_on_data_of_another_sentencepiece_model_is_refused(
    corpus: Corpus, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same vocabulary size, other pieces: the ids would silently mean other words."""
    run_dir = tmp_path / "run"
    assert nmt(*train_args(corpus.data, run_dir, "train.max_updates=2")) == 0
    raw = tmp_path / "other"
    raw.mkdir()
    other = [line.upper() for line in sentences(2000, seed=7)]  # other characters, other pieces
    write_split(raw / "train", other, other)
    write_split(raw / "valid", other[:40], other[:40])
    data = tmp_path / "other_data"
    assert nmt(*prepare_args(data, raw / "train", valid=raw / "valid")) == 0
    assert corpus_io.load_meta(data).vocab_size == corpus_io.load_meta(corpus.data).vocab_size
    last = run_dir / "checkpoints" / "checkpoint_last.pt"
    before = last.read_bytes()
    capsys.readouterr()
    line = refused(capsys, *train_args(data, run_dir, "train.max_updates=4", quiet=False))
    assert "another sentencepiece model" in line and "resume" in line
    assert last.read_bytes() == before


def test_a_sentence_longer_than_the_model_holds_is_refused_before_training(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The tiny model holds 64 positions; a valid sentence of 70 words (prepare keeps every valid
    # line) used to crash the first validation, after all the training before it.
    raw, data, run_dir = tmp_path / "raw", tmp_path / "data", tmp_path / "run"
    raw.mkdir()
    write_split(raw / "train", sentences(200, seed=3), sentences(200, seed=3))
    long = " ".join(["apple"] * 70)
    write_split(raw / "valid", [*sentences(5, seed=4), long], [*sentences(5, seed=4), long])
    assert nmt(*prepare_args(data, raw / "train", valid=raw / "valid")) == 0
    capsys.readouterr()
    line = refused(capsys, *train_args(data, run_dir, "train.max_updates=20", "train.valid_every_updates=10"))
    assert "valid sentence 6 has 70 pieces" in line and "model.max_positions = 64" in line
    assert not run_dir.exists()  # refused before anything was written


@pytest.mark.parametrize(
    ("speedup", "forced", "expected", "warning"),
    [
        (0.0, False, "fp32", "no hardware bf16"),
        (0.0, True, "bf16", None),
        (0.58, False, "fp32", "bf16 at 0.58x the speed of fp32"),
        (0.58, True, "bf16", None),
        (2.0, False, "bf16", None),
    ],
)
def test_recipe_bf16_becomes_fp32_with_a_warning_where_the_cpu_multiplies_bf16_no_faster(
    corpus: Corpus,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    speedup: float,
    forced: bool,
    expected: str,
    warning: str | None,
) -> None:
    """Emulated bf16 ran a 1024-square matmul 80x slower than fp32 on an AVX2-only CPU; an Intel
    Xeon's hardware bf16 without AMX ran at 0.58x fp32."""
    import nmt_cli.commands.train as train_command

    monkeypatch.setattr(train_command, "cpu_bf16_speedup", lambda: speedup)
    run = tmp_path / "run"
    args = train_args(corpus.data, run, 'train.precision="bf16"', "train.max_updates=1", quiet=False)
    assert nmt(*args, *(["--precision", "bf16"] if forced else [])) == 0
    assert load_recipe(run / "config.toml").train.precision == expected
    err = capsys.readouterr().err
    if warning is None:
        assert "training in fp32" not in err
    else:
        assert warning in err and "training in fp32 instead of the recipe's bf16" in err


def test_the_bf16_speedup_is_measured_on_this_cpu() -> None:
    """A ratio of two measured times, or 0.0 where bf16 would be emulated (never measured)."""
    from nmt_cli.device import cpu_bf16_speedup, cpu_has_fast_bf16

    speedup = cpu_bf16_speedup()
    if cpu_has_fast_bf16():
        assert 0.05 < speedup < 50.0
    else:
        assert speedup == 0.0
