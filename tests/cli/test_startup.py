"""Start-up: the garbage collector is off while a command's modules are imported and back on,
with those modules' objects frozen out of its scans, before the command runs. A command that
forgot to turn it back on would run for hours with no cyclic collection. And what a command
imports before it works, measured in a fresh process as a shell starts `nmt`: torch only once its
options hold, so that a mistyped option is answered at once, and torch._dynamo (torch.compile's
machinery, about as long to import as torch itself) only where it is used: compiling, or a GPU's
attention over packed batches."""

from __future__ import annotations

import gc
import importlib
import subprocess
import sys
from typing import Any

import pytest
import typer.main
from helpers import TrainedRun, subprocess_env

from nmt_cli.cli.app import app
from nmt_cli.cli.main import main

COMMANDS: Any = typer.main.get_command(app)  # a click group (typer's own copy of click)
MODULES = {"import": "import_model"}  # command name -> module in nmt_cli.commands, where they differ


def required_arguments(command: Any) -> list[str]:
    """A value for each required option and argument: enough for them to parse."""
    args: list[str] = []
    for param in command.params:
        value = "1" if param.type.name == "integer" else "x"
        if param.param_type_name == "argument":
            args.append(value)
        elif param.required:
            args += [param.opts[0], value]
    return args


@pytest.mark.parametrize("name", sorted(COMMANDS.commands))
def test_every_command_runs_with_the_collector_on_and_start_up_objects_frozen(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = importlib.import_module(f"nmt_cli.commands.{MODULES.get(name, name)}")
    seen: list[tuple[bool, int]] = []
    monkeypatch.setattr(module, "run", lambda *a, **k: seen.append((gc.isenabled(), gc.get_freeze_count())))
    main([name, *required_arguments(COMMANDS.commands[name])])
    assert seen, f"nmt {name} did not reach its run()"
    enabled, frozen = seen[0]
    assert enabled and frozen > 0
    # and the caller's process is as it was: collecting, nothing left frozen
    assert gc.isenabled() and gc.get_freeze_count() == 0


PROBE = """
import sys
from nmt_cli.cli.main import main
code = 0
try:
    main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
print(code, "torch" in sys.modules, "torch._dynamo" in sys.modules, file=sys.stderr)
"""


def imports_of(*args: object, stdin: str = "") -> tuple[str, str]:
    """The command's exit code and which of torch and torch._dynamo it imported (the last line
    on stderr), and what it printed before that."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *(str(a) for a in args)],
        input=stdin, capture_output=True, text=True, env=subprocess_env(), timeout=120,
    )  # fmt: skip
    *said, last = done.stderr.strip().splitlines()
    return last, "\n".join(said)


@pytest.mark.parametrize(
    "args, flag",
    [
        (("translate", "-m", "absent.pt", "--beam", "0"), "--beam 0"),
        (("attend", "-m", "absent.pt", "--out-dir", "pictures", "--lenpen", "-1"), "--lenpen -1.0"),
        (("train", "--data", "absent", "--out", "run", "--threads", "-3"), "--threads -3"),
        (("serve", "-m", "absent.pt", "--max-queue", "0"), "--max-queue 0"),
    ],
)
def test_a_bad_option_is_refused_before_torch_is_imported(args: tuple[str, ...], flag: str) -> None:
    imports, said = imports_of(*args)
    assert imports == "2 False False", said
    assert said.startswith(f"nmt: error: {flag}: "), said


def test_a_translation_on_the_cpu_never_imports_torch_dynamo(trained: TrainedRun) -> None:
    imports, said = imports_of(
        "translate", "-m", trained.checkpoint, "--device", "cpu", "--quiet", stdin="apple river\n"
    )
    assert imports == "0 True False", said
