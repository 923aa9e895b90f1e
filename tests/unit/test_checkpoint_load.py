"""Checkpoints that load but do not make a model (written with torch.save, without nmt's own
checks: a weight of another shape, one missing, tokenizer bytes that are no model) and files cut
short: one line naming the file and the problem, exit 2, and InputError from the Python API."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from helpers import TrainedRun, nmt, one_line_error

from nmt_cli import Translator, checkpoint
from nmt_cli.errors import InputError

Edit = Callable[[dict[str, Any]], None]


def _reshaped(payload: dict[str, Any]) -> None:
    payload["model"]["src_embed.tokens.weight"] = payload["model"]["src_embed.tokens.weight"][:10].clone()


def _missing(payload: dict[str, Any]) -> None:
    del payload["model"]["decoder.0.ffn.linear1.bias"]


def _extra(payload: dict[str, Any]) -> None:
    payload["model"]["decoder.9.ffn.linear1.bias"] = torch.zeros(3)


def _whole_numbers(payload: dict[str, Any]) -> None:
    payload["model"]["decoder.0.ffn.linear1.bias"] = payload["model"]["decoder.0.ffn.linear1.bias"].long()


def _bad_spm(payload: dict[str, Any]) -> None:
    payload["spm"] = {"src": b"not a sentencepiece model", "tgt": b"not a sentencepiece model"}


MISFITS: dict[str, tuple[Edit, str]] = {
    "a weight of another shape": (
        _reshaped,
        "weight src_embed.tokens.weight has shape (10, 32), the config needs (",
    ),
    "a missing weight": (_missing, "weight decoder.0.ffn.linear1.bias is missing"),
    "a weight the config has not": (_extra, "weight decoder.9.ffn.linear1.bias is not one"),
    "an integer weight": (_whole_numbers, "weight decoder.0.ffn.linear1.bias is torch.int64"),
    "tokenizer bytes that are no model": (_bad_spm, "sentencepiece models cannot be read"),
}


@pytest.fixture(scope="module")
def misfits(trained: TrainedRun, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("misfits")
    paths = {}
    for n, (case, (edit, _)) in enumerate(MISFITS.items()):
        payload = checkpoint.load(trained.checkpoint).to_dict()
        assert "decoder.0.ffn.linear1.bias" in payload["model"]  # the names the edits use
        edit(payload)
        paths[case] = root / f"misfit{n}.pt"
        torch.save(payload, paths[case])
    return paths


@pytest.mark.parametrize("case", MISFITS)
def test_the_api_refuses_a_checkpoint_whose_parts_do_not_fit(case: str, misfits: dict[str, Path]) -> None:
    with pytest.raises(InputError) as caught:
        Translator.load(misfits[case], device="cpu")
    message = str(caught.value)
    assert message.startswith(f"checkpoint {misfits[case]}: not a usable nmt checkpoint (")
    assert MISFITS[case][1] in message and "\n" not in message


@pytest.mark.parametrize("case", ["a weight of another shape", "tokenizer bytes that are no model"])
def test_translate_refuses_a_checkpoint_whose_parts_do_not_fit_in_one_line(
    case: str, misfits: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    assert nmt("translate", "-m", misfits[case], "-i", misfits[case], "--device", "cpu") == 2
    line = one_line_error(capsys)
    assert str(misfits[case]) in line and MISFITS[case][1] in line and "internal error" not in line


def test_a_checkpoint_cut_short_is_named_so_in_one_clean_line(
    trained: TrainedRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = trained.checkpoint.read_bytes()
    for n, cut in enumerate((good[: len(good) // 2], good[:-1], b"")):
        half = tmp_path / f"cut{n}.pt"
        half.write_bytes(cut)
        capsys.readouterr()
        assert nmt("average", trained.checkpoint, half, "-o", tmp_path / "avg.pt") == 2
        line = one_line_error(capsys)
        assert line == (
            f"nmt: error: checkpoint {half}: not a complete checkpoint (the file is cut short or damaged); "
            "use another one, e.g. an earlier checkpoint_N.pt of the run"
        )
    assert not (tmp_path / "avg.pt").exists()


def test_a_whole_zip_that_torch_did_not_write_is_not_called_cut_short(
    trained: TrainedRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import zipfile

    foreign = tmp_path / "arrays.npz"  # what numpy.savez writes: a zip of .npy members
    with zipfile.ZipFile(foreign, "w") as archive:
        archive.writestr("weights.npy", b"\x93NUMPY")
    assert nmt("translate", "-m", foreign, "-i", foreign, "--device", "cpu") == 2
    line = one_line_error(capsys)
    assert line == (
        f"nmt: error: checkpoint {foreign}: not an nmt checkpoint (a zip archive torch did not write); "
        "give a .pt file written by `nmt train` or `nmt average`"
    )


def test_a_checkpoint_of_a_newer_torch_is_not_called_damaged(
    trained: TrainedRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import zipfile

    newer = tmp_path / "newer.pt"  # torch's own layout, with a format version this torch does not read
    with zipfile.ZipFile(trained.checkpoint) as source, zipfile.ZipFile(newer, "w") as archive:
        for name in source.namelist():
            archive.writestr(name, b"99\n" if name.endswith("/version") else source.read(name))
    assert nmt("translate", "-m", newer, "-i", trained.checkpoint, "--device", "cpu") == 2
    line = one_line_error(capsys)
    assert line.startswith(
        f"nmt: error: checkpoint {newer}: this torch ({torch.__version__}) cannot read it: "
    )
    assert "version 99" in line and line.endswith("; load it with the torch that wrote it")


def test_a_checkpoint_the_system_will_not_open_says_why(
    trained: TrainedRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Tests may run as root, whom file modes do not stop: the refusal is torch.load's.
    def refuse(path: object, *args: object, **kwargs: object) -> None:
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(torch, "load", refuse)
    with pytest.raises(InputError, match=r": cannot read it \(Permission denied\); check its permissions$"):
        checkpoint.load(trained.checkpoint)


def test_export_refuses_a_checkpoint_whose_weights_do_not_fit_in_one_line(
    misfits: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("ctranslate2")
    case = "a weight of another shape"
    capsys.readouterr()
    assert nmt("export", "-m", misfits[case], "--format", "ctranslate2", "-o", tmp_path / "ct2") == 2
    line = one_line_error(capsys)
    assert str(misfits[case]) in line and MISFITS[case][1] in line and "internal error" not in line
    assert not (tmp_path / "ct2").exists()
