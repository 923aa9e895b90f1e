"""What a new user meets first: the README's commands make what the README says, the commands it
names exist, options say what their output means, and the WMT14 preparation scripts fail at once
on a missing tool rather than after hours of downloads."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import typer.main

from nmt_cli.cli.app import app

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _vocab_size(command: str) -> int:
    found = re.search(r"--vocab-size (\d+)", command)
    assert found, command
    return int(found.group(1))


def test_the_five_commands_learn_the_vocabulary_the_small_recipe_was_tuned_with() -> None:
    five = README.split("### Your own corpus in five commands", 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    prepare = next(line for line in five.splitlines() if line.startswith("nmt prepare"))
    assert "recipes/multi30k/small.toml" in five
    recipe_readme = (ROOT / "recipes" / "multi30k" / "README.md").read_text(encoding="utf-8")
    tuned = next(line for line in recipe_readme.splitlines() if "--vocab-size" in line)
    assert _vocab_size(prepare) == _vocab_size(tuned) == 8000


def test_the_docs_download_with_a_command_the_hub_client_has() -> None:
    docs = [README, *(path.read_text(encoding="utf-8") for path in (ROOT / "docs").glob("*.md"))]
    assert not any("huggingface-cli" in text for text in docs)  # gone from huggingface_hub 1.0
    assert "hf download Helsinki-NLP/opus-mt-en-de --local-dir opus-mt-en-de" in README
    hf = Path(sys.executable).parent / "hf"
    if not hf.exists():
        pytest.skip("huggingface_hub (the import extra) is not installed")
    done = subprocess.run([hf, "download", "--help"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "--local-dir" in done.stdout


def test_nbest_says_its_line_numbers_count_from_0() -> None:
    translate = typer.main.get_command(app).commands["translate"]  # type: ignore[attr-defined]
    nbest = next(param for param in translate.params if param.name == "nbest")
    assert "counted from 0" in nbest.help
    assert "counted from 0" in (ROOT / "docs" / "decoding.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("pair", ["wmt14_en_de", "wmt14_en_fr"])
def test_prepare_sh_checks_its_tools_before_downloading(pair: str, tmp_path: Path) -> None:
    # A PATH with the shell's tools and a wget that notes being called, but no nmt or sacrebleu.
    tools = tmp_path / "bin"
    tools.mkdir()
    for name in ("bash", "mkdir", "tar", "cat", "wc", "zcat", "nproc", "basename", "dirname"):
        found = shutil.which(name)
        if found is not None:
            (tools / name).symlink_to(found)
    called = tmp_path / "wget-called"
    wget = tools / "wget"
    wget.write_text(f'#!{shutil.which("bash")}\n: > "{called}"\nexit 1\n', encoding="utf-8")
    wget.chmod(0o755)
    script = ROOT / "recipes" / pair / "prepare.sh"
    done = subprocess.run(
        [tools / "bash", script, tmp_path / "work"],
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": str(tools)},
        timeout=60,
    )
    assert done.returncode == 2 and not called.exists()
    advice = "install it (nmt and sacrebleu: make setup, then put .venv/bin on PATH)"
    assert done.stderr.strip().splitlines() == [f"{script}: nmt is not on PATH; {advice}"]
