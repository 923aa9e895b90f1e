"""`train.best_metric`: checkpoint_best.pt and early stopping follow valid loss, BLEU or chrF as
chosen. Validation is scripted (training.loop.validate replaced) so that each metric peaks at a
known update; one run uses the real validation to show that BLEU and chrF are both logged. Bad
settings are one-line errors that name train.best_metric."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

import pytest
import torch
from helpers import Corpus, nmt, refused, train_args

from nmt_cli import checkpoint
from nmt_cli.training import loop

# Four validations (every 2 of 8 updates). Loss improves every time; BLEU peaks at the second
# validation (update 4), chrF at the third (update 6); so each metric picks a different checkpoint.
LOSS = [5.0, 4.0, 3.0, 2.0]
BLEU = [10.0, 30.0, 20.0, 25.0]
CHRF = [40.0, 35.0, 50.0, 45.0]


def _records(run_dir: Path, kind: str) -> list[dict]:
    lines = (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    return [r for r in map(json.loads, lines) if r["type"] == kind]


def _progress(path: Path) -> dict:
    payload = checkpoint.load(path).progress
    assert payload is not None
    return payload


def script_validation(monkeypatch: pytest.MonkeyPatch, **series: Sequence[float]) -> list[int]:
    """Replace the loop's validation by one that returns the i-th value of each series at its i-th
    call (loss is required; ppl follows from it). Returns the list of calls, which it fills."""
    calls: list[int] = []

    def scripted(model, data, cfg, device, tgt_processor) -> dict[str, float]:
        i = len(calls)
        assert i < len(series["loss"]), "more validations than scripted"
        calls.append(i)
        result = {
            "loss": series["loss"][i],
            "nll_loss": series["loss"][i],
            "ppl": math.exp(series["loss"][i]),
        }
        result.update({name: float(values[i]) for name, values in series.items() if name != "loss"})
        return result

    monkeypatch.setattr(loop, "validate", scripted)
    return calls


def scripted_run(corpus: Corpus, out: Path, *overrides: str) -> int:
    """8 updates, validating and saving every 2, with valid BLEU on (scripted, so no decoding)."""
    return nmt(
        *train_args(
            corpus.data,
            out,
            "train.max_updates=8",
            "train.valid_every_updates=2",
            "train.save_every_updates=2",
            "train.keep_last=10",
            "train.log_every_updates=100",
            "train.valid_bleu=true",
            *overrides,
        )
    )


@pytest.mark.parametrize(
    "metric, best_update", [("bleu", 4), ("chrf", 6), ("loss", 8)], ids=["bleu", "chrf", "loss"]
)
def test_the_best_checkpoint_is_the_peak_of_the_chosen_metric(
    corpus: Corpus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, metric: str, best_update: int
) -> None:
    calls = script_validation(monkeypatch, loss=LOSS, bleu=BLEU, chrf=CHRF)
    run_dir = tmp_path / "run"
    assert scripted_run(corpus, run_dir, f'train.best_metric="{metric}"') == 0
    assert len(calls) == 4
    ckpts = run_dir / "checkpoints"
    best = checkpoint.load(ckpts / "checkpoint_best.pt")
    assert best.kind == "best"
    assert best.progress is not None and best.progress["update"] == best_update
    # The weights are the ones of that update, not of a later one.
    same_update = checkpoint.load(ckpts / checkpoint.numbered_name(best_update)).model
    assert best.model.keys() == same_update.keys()
    assert all(torch.equal(best.model[k], same_update[k]) for k in best.model)
    later = checkpoint.load(ckpts / "checkpoint_8.pt").model if best_update != 8 else None
    if later is not None:
        assert not all(torch.equal(best.model[k], later[k]) for k in best.model)

    valid = _records(run_dir, "valid")
    assert [r["update"] for r in valid] == [2, 4, 6, 8]
    assert [r["best_loss"] for r in valid] == [5.0, 4.0, 3.0, 2.0]
    if metric != "loss":
        series = {"bleu": BLEU, "chrf": CHRF}[metric]
        running_max = [max(series[: i + 1]) for i in range(len(series))]
        assert [r[f"best_{metric}"] for r in valid] == running_max
    else:
        assert not any("best_bleu" in r or "best_chrf" in r for r in valid)
    last = _progress(ckpts / "checkpoint_last.pt")
    assert last["update"] == 8
    # Validations since the best one: each metric counts its own.
    assert last["bad_validations"] == {"bleu": 2, "chrf": 1, "loss": 0}[metric]


def test_patience_follows_the_chosen_metric(
    corpus: Corpus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Loss always improves; BLEU peaks at the second validation (update 4) and then fails twice.
    loss = [6.0, 5.0, 4.0, 3.0, 2.0, 1.0]
    bleu = [10.0, 30.0, 20.0, 25.0, 40.0, 50.0]
    overrides = ("train.max_updates=12", "train.patience=2")

    calls = script_validation(monkeypatch, loss=loss, bleu=bleu, chrf=bleu)
    by_bleu = tmp_path / "bleu"
    capsys.readouterr()
    code = nmt(
        *train_args(
            corpus.data,
            by_bleu,
            *overrides,
            "train.valid_every_updates=2",
            "train.valid_bleu=true",
            'train.best_metric="bleu"',
            quiet=False,
        )
    )
    err = capsys.readouterr().err
    assert code == 0
    assert len(calls) == 4  # stopped after the validations at updates 6 and 8 did not beat 30
    assert [r["update"] for r in _records(by_bleu, "valid")] == [2, 4, 6, 8]
    last = _progress(by_bleu / "checkpoints" / "checkpoint_last.pt")
    assert last["update"] == 8 and last["bad_validations"] == 2
    assert _progress(by_bleu / "checkpoints" / "checkpoint_best.pt")["update"] == 4
    assert "early stopping" in err and "bleu" in err and "at update 8" in err

    # The same script followed by loss never runs out of patience: all 12 updates.
    calls = script_validation(monkeypatch, loss=loss, bleu=bleu, chrf=bleu)
    by_loss = tmp_path / "loss"
    code = nmt(
        *train_args(
            corpus.data,
            by_loss,
            *overrides,
            "train.valid_every_updates=2",
            "train.valid_bleu=true",
            'train.best_metric="loss"',
        )
    )
    assert code == 0
    assert len(calls) == 6
    assert _progress(by_loss / "checkpoints" / "checkpoint_last.pt")["update"] == 12
    assert _progress(by_loss / "checkpoints" / "checkpoint_best.pt")["update"] == 12


@pytest.mark.parametrize(
    "overrides, named",
    [
        (['train.best_metric="bleu"', "train.valid_bleu=false"], "train.valid_bleu"),
        (['train.best_metric="chrf"', "train.valid_bleu=false"], "train.valid_bleu"),
        (['train.best_metric="accuracy"'], "accuracy"),
        (['train.best_metric="BLEU"', "train.valid_bleu=true"], "BLEU"),
    ],
    ids=["bleu-without-valid-bleu", "chrf-without-valid-bleu", "unknown", "upper-case"],
)
def test_a_bad_best_metric_is_one_line_naming_it(
    corpus: Corpus, tmp_path: Path, capsys: pytest.CaptureFixture[str], overrides: list[str], named: str
) -> None:
    run_dir = tmp_path / "run"
    capsys.readouterr()
    line = refused(capsys, *train_args(corpus.data, run_dir, "train.max_updates=2", *overrides))
    assert line.startswith("nmt: error:")
    assert "train.best_metric" in line and named in line
    assert not run_dir.exists()  # refused before anything is written


def test_real_validation_logs_bleu_and_chrf(corpus: Corpus, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    code = nmt(
        *train_args(
            corpus.data,
            run_dir,
            "train.max_updates=4",
            "train.valid_every_updates=2",
            "train.valid_bleu=true",
            'train.best_metric="chrf"',
            "decode.beam=1",
        )
    )
    assert code == 0
    valid = _records(run_dir, "valid")
    assert [r["update"] for r in valid] == [2, 4]
    for record in valid:
        for key in ("loss", "ppl", "bleu", "chrf", "best_loss", "best_chrf"):
            assert isinstance(record[key], float) and math.isfinite(record[key]), (key, record)
        assert 0.0 <= record["bleu"] <= 100.0 and 0.0 <= record["chrf"] <= 100.0
    assert valid[1]["best_chrf"] == max(valid[0]["chrf"], valid[1]["chrf"])
    best = _progress(run_dir / "checkpoints" / "checkpoint_best.pt")
    best_update = 2 if valid[0]["chrf"] >= valid[1]["chrf"] else 4
    assert best["update"] == best_update
    assert best["best_valid_score"] == valid[best_update // 2 - 1]["chrf"]


def test_resuming_with_another_best_metric_starts_its_best_afresh(
    corpus: Corpus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_dir = tmp_path / "run"
    script_validation(monkeypatch, loss=[5.0, 4.0], bleu=[20.0, 21.0], chrf=[60.0, 61.0])
    assert scripted_run(corpus, run_dir, 'train.best_metric="chrf"', "train.max_updates=4") == 0
    assert _progress(run_dir / "checkpoints" / "checkpoint_best.pt")["update"] == 4
    # Resumed by BLEU, which improves at every validation: the best checkpoint must move on.
    script_validation(monkeypatch, loss=[3.0, 2.0], bleu=[30.0, 35.0], chrf=[50.0, 55.0])
    assert scripted_run(corpus, run_dir, 'train.best_metric="bleu"', "train.max_updates=8") == 0
    assert _progress(run_dir / "checkpoints" / "checkpoint_last.pt")["update"] == 8
    assert _progress(run_dir / "checkpoints" / "checkpoint_best.pt")["update"] == 8
