"""The values each setting a user gives may take: the decode settings (from the recipe's
[decode], the command line, the Python API or an HTTP request), sampling's, and the CPU threads
and processes that run them; the other settings' tables (a recipe's sections, `nmt prepare`'s and
`nmt serve`'s options) are declared the same way beside what they bound. `check_setting` and
`check_each` raise a `SettingError` naming the setting; the rules between settings are their
owners' (`decoding.settings.resolve` for the decode settings).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from nmt_cli.errors import SettingError


@dataclass(frozen=True)
class Range:
    """Integers, or finite numbers, from `low` to `high` (`low` itself excluded when `above`,
    `high` when `below`); with no `high`, any larger one."""

    kind: type
    low: int | float
    high: int | float = math.inf
    above: bool = False
    below: bool = False

    def problem(self, value: object) -> str | None:
        if self.kind is int:
            ok, what = isinstance(value, int) and not isinstance(value, bool), "an integer"
        else:
            ok = isinstance(value, int | float) and not isinstance(value, bool) and _finite(value)
            what = "a number"
        if ok:  # compared as given: an integer past 2**53 is not rounded to a float
            number: float = value  # type: ignore[assignment]
            ok = (number > self.low if self.above else number >= self.low) and (
                number < self.high if self.below else number <= self.high
            )
        return None if ok else f"must be {what} {self._bounds()}"

    def _bounds(self) -> str:
        low, high = f"{self.low:,}", f"{self.high:,}"
        if self.high == math.inf:
            return f"above {low}" if self.above else f"of at least {low}"
        if self.below:
            return f"{'above' if self.above else 'at least'} {low} and below {high}"
        return f"above {low} and at most {high}" if self.above else f"from {low} to {high}"


@dataclass(frozen=True)
class Flag:
    """true or false (a Python or numpy bool; JSON's true and false), never a number or a string
    that Python would take as one."""

    def problem(self, value: object) -> str | None:
        return None if isinstance(value, bool | np.bool_) else "must be true or false"


def _finite(value: int | float) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:  # an integer past the largest float
        return False


Allowed = Range | Flag | tuple[str, ...]  # a tuple: the strings allowed


MAX_BEAM = 128  # bounds the work and memory one call may ask for (beam x nbest x vocabulary scores)
SETTINGS: dict[str, Allowed] = {
    "beam": Range(int, 1, MAX_BEAM),
    "nbest": Range(int, 1, MAX_BEAM),
    # Bounded so that the length penalty of any length stays far inside float64.
    "lenpen": Range(float, 0, 10),
    "lenpen_style": ("gnmt", "fairseq"),
    "max_len_a": Range(float, 0, 100),
    "max_len_b": Range(int, 0, 100_000),
    "min_len": Range(int, 0, 100_000),
    "shortlist": Flag(),
    "ordered_constraints": Flag(),
    "early_stopping": Flag(),
    "split_sentences": Flag(),
    "alignments": Flag(),
    "document": Flag(),
    "batch_tokens": Range(int, 1, 1_000_000),
    "sampling": ("topk", "topp"),
    "topk": Range(int, 0, 1_000_000),
    "topp": Range(float, 0, 1, above=True),
    "temperature": Range(float, 0, 100, above=True),
    "seed": Range(int, 0, 2**63 - 1),
    "threads": Range(int, 0, 1024),
    "workers": Range(int, 0, 256),
}


def problem_with(allowed: Allowed, value: object) -> str | None:
    """What is wrong with `value` where `allowed` are the values taken, or None."""
    if isinstance(allowed, Range | Flag):
        return allowed.problem(value)
    return None if isinstance(value, str) and value in allowed else one_of(allowed)


def check_setting(name: str, value: object) -> None:
    """Raise SettingError when `value` is not one that setting `name` takes."""
    _check(name, SETTINGS[name], value)


def check_each(table: Mapping[str, Allowed], values: object) -> None:
    """Raise SettingError for the first attribute of `values` named in `table` that its entry
    there does not allow."""
    for name, allowed in table.items():
        _check(name, allowed, getattr(values, name))


def _check(name: str, allowed: Allowed, value: object) -> None:
    problem = problem_with(allowed, value)
    if problem is not None:
        raise SettingError(name, value, problem)


def one_of(choices: tuple[str, ...]) -> str:
    quoted = [f'"{c}"' for c in choices]
    return f"use {', '.join(quoted[:-1])} or {quoted[-1]}"
