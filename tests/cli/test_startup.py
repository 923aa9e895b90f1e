"""Start-up: the garbage collector is off while a command's modules are imported and back on,
with those modules' objects frozen out of its scans, before the command runs. A command that
forgot to turn it back on would run for hours with no cyclic collection."""

from __future__ import annotations

import gc
import importlib
from typing import Any

import pytest
import typer.main

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
