"""The settings objects the command line builds from its options: every option reaches its field
(`cli.options.given` matches them by name), and a field a command has no option for keeps its
default."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest
from conftest import nmt

from nmt_cli.commands import attend, serve, translate
from nmt_cli.serving.limits import ServeLimits
from nmt_cli.user_settings import DecodeOverrides

DECODE_OPTIONS = ["--beam", 3, "--lenpen", 0.5, "--lenpen-style", "fairseq"]
DECODE_OPTIONS += ["--max-len-a", 2, "--max-len-b", 7, "--min-len", 2]
DECODE = DecodeOverrides(beam=3, lenpen=0.5, lenpen_style="fairseq", max_len_a=2.0, max_len_b=7, min_len=2)


def handed_on(monkeypatch: pytest.MonkeyPatch, command: ModuleType, *args: object) -> dict[str, Any]:
    """The keywords the command line calls `command.run` with."""
    seen: dict[str, Any] = {}
    monkeypatch.setattr(command, "run", lambda **kwargs: seen.update(kwargs))
    assert nmt(*args) == 0
    return seen


def test_translate_hands_on_every_decode_option(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = handed_on(monkeypatch, translate, "translate", "-m", "m.pt", *DECODE_OPTIONS, "--shortlist")
    assert seen["decode"] == DecodeOverrides(**{**DECODE.given(), "shortlist": True})


def test_attend_hands_on_its_decode_options(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = handed_on(monkeypatch, attend, "attend", "-m", "m.pt", "--out-dir", "pictures", *DECODE_OPTIONS)
    assert seen["decode"] == DECODE  # no --shortlist: the checkpoint's


def test_serve_hands_on_every_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    options = ["--max-batch-tokens", 100, "--max-wait-ms", 1, "--max-queue", 9, "--max-input-chars", 8]
    options += ["--max-lines", 7, "--request-timeout", 3, "--max-client-connections", 2]
    seen = handed_on(monkeypatch, serve, "serve", "-m", "m.pt", *options)
    assert seen["limits"] == ServeLimits(100, 1.0, 9, 8, 7, 3.0, 2)
