"""setuptools' build as pyproject.toml declares it, plus one thing pyproject cannot say: the git
commit a package is built from goes into nmt_cli/COMMIT (in the sdist, and in a wheel built from
the checkout or from that sdist), where `nmt --version` reads it."""

import shutil
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

HERE = Path(__file__).resolve().parent


def checkout_commit() -> str | None:
    """HEAD's short hash when building from a git checkout (not from an unpacked sdist)."""
    if not (HERE / ".git").exists():
        return None
    try:
        done = subprocess.run(
            ["git", "-C", str(HERE), "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True
        )
    except OSError:  # no git on this machine
        return None
    return done.stdout.strip() or None


class BuildPy(build_py):
    def run(self) -> None:
        super().run()
        if self.editable_mode:  # `pip install -e`: nmt runs from the checkout and reads .git itself
            return
        target = Path(self.build_lib) / "nmt_cli" / "COMMIT"
        commit = checkout_commit()
        if commit:
            target.write_text(commit + "\n")
        elif (HERE / "nmt_cli" / "COMMIT").is_file():  # an unpacked sdist
            shutil.copyfile(HERE / "nmt_cli" / "COMMIT", target)


class Sdist(sdist):
    def make_release_tree(self, base_dir: str, files: list[str]) -> None:
        super().make_release_tree(base_dir, files)
        commit = checkout_commit()
        if commit:
            (Path(base_dir) / "nmt_cli" / "COMMIT").write_text(commit + "\n")


setup(cmdclass={"build_py": BuildPy, "sdist": Sdist})
