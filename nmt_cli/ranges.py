"""The values each setting a user gives may take: the decode settings (from the recipe's
[decode], the command line, the Python API or an HTTP request), sampling's, and the CPU threads
and processes that run them. `check_setting` raises a `SettingError` naming the setting; the
rules between settings are `decoding.settings.resolve`'s. Nothing else checks these values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from nmt_cli.errors import SettingError


@dataclass(frozen=True)
class Range:
    """Integers, or finite numbers, from `low` to `high` (`low` itself excluded when `above`)."""

    kind: type
    low: int | float
    high: int | float
    above: bool = False

    def problem(self, value: object) -> str | None:
        if self.kind is int:
            ok, what = isinstance(value, int) and not isinstance(value, bool), "an integer"
        else:
            ok = isinstance(value, int | float) and not isinstance(value, bool) and _finite(value)
            what = "a number"
        if ok:  # compared as given: an integer past 2**53 is not rounded to a float
            number: float = value  # type: ignore[assignment]
            ok = (number > self.low if self.above else number >= self.low) and number <= self.high
        bounds = f"above {self.low:,} and at most" if self.above else f"from {self.low:,} to"
        return None if ok else f"must be {what} {bounds} {self.high:,}"


@dataclass(frozen=True)
class Flag:
    """true or false (a Python bool; JSON's true and false)."""

    def problem(self, value: object) -> str | None:
        return None if isinstance(value, bool) else "must be true or false"


def _finite(value: int | float) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:  # an integer past the largest float
        return False


MAX_BEAM = 128  # bounds the work and memory one call may ask for (beam x nbest x vocabulary scores)
SETTINGS: dict[str, Range | Flag | tuple[str, ...]] = {
    "beam": Range(int, 1, MAX_BEAM),
    "nbest": Range(int, 1, MAX_BEAM),
    # Bounded so that the length penalty of any length stays far inside float64.
    "lenpen": Range(float, 0, 10),
    "lenpen_style": ("gnmt", "fairseq"),
    "max_len_a": Range(float, 0, 100),
    "max_len_b": Range(int, 0, 100_000),
    "min_len": Range(int, 0, 100_000),
    "shortlist": Flag(),
    "early_stopping": Flag(),
    "batch_tokens": Range(int, 1, 1_000_000),
    "sampling": ("topk", "topp"),
    "topk": Range(int, 0, 1_000_000),
    "topp": Range(float, 0, 1, above=True),
    "temperature": Range(float, 0, 100, above=True),
    "seed": Range(int, 0, 2**63 - 1),
    "threads": Range(int, 0, 1024),
    "workers": Range(int, 0, 256),
}


def setting_problem(name: str, value: object) -> str | None:
    """What is wrong with `value` for setting `name`, or None."""
    allowed = SETTINGS[name]
    if isinstance(allowed, Range | Flag):
        return allowed.problem(value)
    return None if isinstance(value, str) and value in allowed else one_of(allowed)


def check_setting(name: str, value: object) -> None:
    """Raise SettingError when `value` is not one that setting `name` takes."""
    problem = setting_problem(name, value)
    if problem is not None:
        raise SettingError(name, value, problem)


def one_of(choices: tuple[str, ...]) -> str:
    quoted = [f'"{c}"' for c in choices]
    return f"use {', '.join(quoted[:-1])} or {quoted[-1]}"
