"""`nmt --version`: the package's version, and the commit it was built from where that is known
(a build writes nmt_cli/COMMIT; a git checkout says its HEAD). .ci/wheel_check checks a wheel's."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_version_names_the_package_version_and_the_checkouts_commit() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "nmt_cli", "--version"], capture_output=True, text=True, check=True, cwd=ROOT
    )
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert done.stdout.startswith(f"nmt {version}"), done.stdout
    recorded = ROOT / "nmt_cli" / "COMMIT"
    if recorded.is_file():
        expected: str | None = recorded.read_text().strip()
    elif (ROOT / ".git").is_dir() and shutil.which("git"):  # a checkout (a worktree's .git is a file)
        head = ["git", "-C", str(ROOT), "rev-parse", "--short=12", "HEAD"]
        expected = subprocess.run(head, capture_output=True, text=True, check=True).stdout.strip()
    else:
        expected = None
    if expected:
        assert done.stdout == f"nmt {version} (commit {expected})\n"
    else:
        assert done.stdout == f"nmt {version}\n"
