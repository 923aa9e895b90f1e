"""How `nmt import`, `nmt average` and `nmt export` write their outputs when something stops
them: a signal in the middle of torch's writer or between export's two renames, an output the
system will not write, a name near the file system's limit. One line, the exit code of the
cause, and the output either the old one or the complete new one."""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
import torch
from helpers import TrainedRun, nmt, one_line_error

from nmt_cli import checkpoint, files
from nmt_cli.commands import export
from nmt_cli.errors import Terminated

FAIRSEQ = Path(__file__).resolve().parents[1] / "fixtures" / "fairseq-multi30k-tiny" / "checkpoint.pt"


class _StoppedWriter:
    """A file whose writes raise `stop` once `room` bytes are written, as a signal handler raises
    in the middle of torch's zip writer."""

    def __init__(self, stream: Any, room: int, stop: BaseException) -> None:
        self.stream, self.room, self.stop = stream, room, stop

    def write(self, data: bytes) -> int:
        if len(data) > self.room:
            raise self.stop
        self.room -= len(data)
        return self.stream.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


@pytest.mark.parametrize("command", ["import", "average"])
@pytest.mark.parametrize(
    ("stop", "code", "words"),
    [(KeyboardInterrupt(), 130, "interrupted"), (Terminated(), 143, "terminated by SIGTERM")],
    ids=["SIGINT", "SIGTERM"],
)
def test_a_signal_inside_torchs_writer_exits_as_the_signal(
    command: str,
    stop: BaseException,
    code: int,
    words: str,
    trained: TrainedRun,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real_save = torch.save
    monkeypatch.setattr(
        torch, "save", lambda obj, f, *a, **k: real_save(obj, _StoppedWriter(f, 4096, stop), *a, **k)
    )
    out = tmp_path / "out"
    out.mkdir()
    source = FAIRSEQ if command == "import" else trained.checkpoint
    capsys.readouterr()
    assert nmt("-q", command, source, "-o", out / "model.pt") == code
    line = one_line_error(capsys)
    assert line.startswith(f"nmt: error: {words}") and "internal error" not in line, line
    assert list(out.iterdir()) == []


def test_ctrl_c_between_the_renames_of_force_keeps_the_old_export(
    trained: TrainedRun, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "ct2"
    assert nmt("-q", "export", "-m", trained.checkpoint, "-o", out) == 0
    (out / "model.bin").write_bytes(b"old")
    real = os.replace

    def replace(src: Any, dst: Any) -> None:
        real(src, dst)
        if Path(dst).name == "replaced":  # the old export moved aside, the new one not yet in place
            raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", replace)
    assert nmt("-q", "export", "-m", trained.checkpoint, "-o", out, "--force") == 130
    assert (out / "model.bin").read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ct2"]  # no temporary directory left


def _refused_write(err: OSError) -> Any:
    def fail(*_args: object, **_kwargs: object) -> Any:
        raise err

    return fail


@pytest.mark.parametrize(
    ("where", "error", "code", "hint"),
    [
        ("making the directory", errno.EACCES, 2, "check the permissions of its directory"),
        ("making the directory", errno.EROFS, 2, "choose another --output"),
        ("writing the model", errno.ENOSPC, 1, "free some disk space"),
    ],
)
def test_an_export_the_system_will_not_write_is_one_line_naming_the_output(
    where: str,
    error: int,
    code: int,
    hint: str,
    trained: TrainedRun,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Injected: the tests may run as root, whom permissions do not stop.
    failure = OSError(error, os.strerror(error), str(tmp_path / ".ct2.tmp-x"))
    if where == "making the directory":
        monkeypatch.setattr(tempfile, "mkdtemp", _refused_write(failure))
    else:
        monkeypatch.setattr(export, "write_model", _refused_write(failure))
    capsys.readouterr()
    assert nmt("-q", "export", "-m", trained.checkpoint, "-o", tmp_path / "ct2") == code
    line = one_line_error(capsys)
    assert f"--output {tmp_path / 'ct2'}: cannot write ({os.strerror(error)}); {hint}" in line, line
    assert ".tmp-" not in line and list(tmp_path.iterdir()) == []


def test_an_import_the_system_will_not_write_is_one_line_with_the_right_hint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    denied = OSError(errno.EACCES, "Permission denied")
    monkeypatch.setattr(files, "open", _refused_write(denied), raising=False)  # atomic_write's open
    capsys.readouterr()
    assert nmt("-q", "import", FAIRSEQ, "-o", tmp_path / "x.pt") == 2
    line = one_line_error(capsys)
    assert f"--output {tmp_path / 'x.pt'}: cannot write (Permission denied); check the permissions" in line
    assert "disk space" not in line and list(tmp_path.iterdir()) == []


def test_outputs_with_names_near_the_limit_are_written(trained: TrainedRun, tmp_path: Path) -> None:
    # 245 bytes is a legal name; `.NAME.tmp-PID` beside it would not be.
    exported, imported = tmp_path / ("e" * 245), tmp_path / ("é" * 121 + ".pt")
    assert nmt("-q", "export", "-m", trained.checkpoint, "-o", exported) == 0
    assert nmt("-q", "import", FAIRSEQ, "-o", imported) == 0
    assert (exported / "model.bin").is_file() and checkpoint.load(imported).kind == "import"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([exported.name, imported.name])


def test_temporary_names_fit_and_stay_apart() -> None:
    long = ["a" * 250 + "1", "a" * 250 + "2", "é" * 127]
    names = [files.temporary_name(Path(name)).name for name in long]
    assert all(len(os.fsencode(name)) <= files.NAME_MAX for name in names) and len(set(names)) == 3
    assert all(checkpoint.TEMPORARY.match(name) for name in names)  # cleaned up after a crash
    assert files.temporary_name(Path("model.pt")).name == f".model.pt.tmp-{os.getpid()}"
    for name in names:
        name.encode("utf-8")  # cut between characters, never inside one: a name any file system takes
