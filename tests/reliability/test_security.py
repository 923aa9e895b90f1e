"""Security: checkpoints load with `weights_only=True` only, so a checkpoint cannot run code;
nothing in the package runs a shell, a subprocess, eval or exec; values from recipes, meta.json
and checkpoints are data, never commands. Checked on the source (AST) and by behaviour."""

from __future__ import annotations

import ast
import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from helpers import Corpus, TrainedRun, nmt, train_args

PACKAGE = Path(__file__).resolve().parents[2] / "nmt_cli"
SOURCES = sorted(PACKAGE.rglob("*.py"))


def calls() -> list[tuple[Path, ast.Call, str]]:
    """Every call in the package with the dotted name of what it calls ("torch.load", "eval")."""
    found = []
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Call):
                found.append((path, node, _dotted(node.func)))
    return found


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


def _where(path: Path, node: ast.AST) -> str:
    return f"{path.relative_to(PACKAGE.parent)}:{node.lineno}"


def test_the_sources_are_found() -> None:
    assert len(SOURCES) > 20 and PACKAGE / "checkpoint.py" in SOURCES


def test_every_torch_load_is_weights_only() -> None:
    loads = [(p, c) for p, c, name in calls() if name.endswith(".load") and name.split(".")[0] in ("torch",)]
    assert loads, "the package loads checkpoints somewhere"
    for path, call in loads:
        flags = {k.arg: k.value for k in call.keywords}
        assert "weights_only" in flags, f"{_where(path, call)}: torch.load without weights_only=True"
        value = flags["weights_only"]
        assert isinstance(value, ast.Constant) and value.value is True, f"{_where(path, call)}"


def test_no_pickle_and_no_pickled_numpy() -> None:
    for path in SOURCES:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                modules = (
                    [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                )
                for module in modules:
                    assert module.split(".")[0] not in (
                        "pickle",
                        "dill",
                        "marshal",
                        "shelve",
                        "cloudpickle",
                    ), f"{_where(path, node)}: imports {module}"
    for path, call, _ in calls():
        for keyword in call.keywords:
            if keyword.arg == "allow_pickle":
                value = keyword.value
                assert isinstance(value, ast.Constant) and value.value is False, _where(path, call)


FORBIDDEN_CALLS = {
    "eval",
    "exec",
    "compile",
    "__import__",
    "os.system",
    "os.popen",
    "os.execv",
    "os.execvp",
    "os.execl",
    "os.execlp",
    "os.spawnv",
    "os.spawnl",
    "os.posix_spawn",
    "importlib.import_module",
}
FORBIDDEN_MODULES = ("subprocess", "pty", "runpy", "code")


def test_nothing_runs_a_shell_or_evaluates_code() -> None:
    for path, call, name in calls():
        assert name not in FORBIDDEN_CALLS, f"{_where(path, call)}: calls {name}"
        for keyword in call.keywords:
            assert not (
                keyword.arg == "shell" and isinstance(keyword.value, ast.Constant) and keyword.value.value
            ), f"{_where(path, call)}: shell=True"
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import | ast.ImportFrom):
                modules = (
                    [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                )
                for module in modules:
                    assert module.split(".")[0] not in FORBIDDEN_MODULES, (
                        f"{_where(path, node)}: imports {module}"
                    )


class Payload:
    """A pickle that, when unpickled without weights_only, creates a directory: stands for any code."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (os.mkdir, (str(self.marker),))


@pytest.fixture
def evil_checkpoint(trained: TrainedRun, tmp_path: Path) -> tuple[Path, Path]:
    """A checkpoint that looks like the trained one but carries a code-running pickle."""
    payload = torch.load(trained.checkpoint, map_location="cpu", weights_only=True)
    marker = tmp_path / "code-ran"
    path = tmp_path / "evil.pt"
    torch.save({**payload, "extra": Payload(marker)}, path)
    torch.load(path, weights_only=False)  # the payload is live: an unsafe load runs it
    assert marker.is_dir()
    marker.rmdir()
    return path, marker


@pytest.mark.parametrize("command", ["translate", "average", "train"])
def test_a_checkpoint_with_code_in_it_is_refused_and_runs_nothing(
    command: str, evil_checkpoint: tuple[Path, Path], corpus: Corpus, tmp_path: Path, capsys
) -> None:
    path, marker = evil_checkpoint
    if command == "translate":
        source = tmp_path / "in.txt"
        source.write_text("apple river\n", encoding="utf-8")
        args = ["-q", "translate", "-m", path, "-i", source, "-o", tmp_path / "out.txt", "--threads", 1]
    elif command == "average":
        args = ["-q", "average", path, "-o", tmp_path / "avg.pt"]
    else:
        run_dir = tmp_path / "run"
        (run_dir / "checkpoints").mkdir(parents=True)
        shutil.copyfile(path, run_dir / "checkpoints" / "checkpoint_last.pt")
        args = train_args(corpus.data, run_dir, "train.max_updates=1")
    capsys.readouterr()
    assert nmt(*args) == 2
    err = capsys.readouterr().err
    assert err.startswith("nmt: error: checkpoint ") and err.count("\n") == 1 and "Traceback" not in err
    assert not marker.exists()
    assert not (tmp_path / "out.txt").exists() and not (tmp_path / "avg.pt").exists()


SHELLY = "$(mkdir pwned-a); `mkdir pwned-b` | mkdir pwned-c"


def test_values_from_a_recipe_are_never_run(
    corpus: Corpus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.chdir(tmp_path)
    recipe = tmp_path / "recipe.toml"
    recipe.write_text(f"[model]\nnorm = {json.dumps(SHELLY)}\n", encoding="utf-8")
    capsys.readouterr()
    assert nmt(*train_args(corpus.data, tmp_path / "run", "train.max_updates=1"), "--recipe", recipe) == 2
    assert "model.norm" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["recipe.toml"]


def test_file_names_from_meta_json_are_only_opened(
    corpus: Corpus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    data = tmp_path / "data"
    shutil.copytree(corpus.data, data)
    meta = json.loads((data / "meta.json").read_text(encoding="utf-8"))
    meta["spm"] = {"src": SHELLY, "tgt": SHELLY}
    (data / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    assert nmt(*train_args(data, tmp_path / "run", "train.max_updates=1")) == 2
    err = capsys.readouterr().err
    assert err.startswith("nmt: error: ") and "sentencepiece model" in err
    assert not list(tmp_path.glob("pwned*")) and not list(data.glob("pwned*"))
