"""The Python API's arguments checked before any work, each refusal naming its argument with the
class the `Translator` docstrings give: a TypeError for a value of the wrong type, a SettingError
(a ValueError) for a value out of range. These are what `Translator`'s methods take besides the
decode settings (`settings.resolve` checks those): the checkpoint paths, the device, the load-time
overrides, a call's flags and the settings a call was made with.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import torch

from nmt_cli.decoding.settings import DecodeOptions, DecodeSettings, Sampling, with_terms
from nmt_cli.device import resolve_device
from nmt_cli.errors import SettingError
from nmt_cli.ranges import check_setting
from nmt_cli.user_settings import SEARCH_FIELDS, DecodeOverrides

Settings = Callable[[DecodeOverrides, int | None, int | None, Sampling | None], DecodeSettings]
"""`Translator.settings`: the checked settings of a call."""


def checkpoint_paths(model: object) -> list[Path]:
    """`Translator.load`'s `model`: a path (str, bytes or os.PathLike, as `os.fspath` takes them),
    or an iterable of paths for an ensemble."""
    if isinstance(model, str | bytes | os.PathLike):
        return [_path(model, "model")]
    try:
        given = list(model)  # type: ignore[call-overload]
    except TypeError:
        raise TypeError(
            f"Translator.load(model): a checkpoint path or a list of them, not {type(model).__name__}"
        ) from None
    if not given:
        raise SettingError(
            "model", given, "no checkpoint given; give a path, or a list of paths for an ensemble"
        )
    return [_path(path, f"model[{i}]") for i, path in enumerate(given)]


def _path(path: object, name: str) -> Path:
    if not isinstance(path, str | bytes | os.PathLike):
        raise TypeError(
            f"Translator.load(model): {name} is {type(path).__name__}, not a path (str or os.PathLike)"
        )
    return Path(os.fsdecode(path))


def device_of(device: object) -> torch.device:
    """`Translator.load`'s `device`: "auto", "cpu", "cuda", "cuda:N", or a torch.device of those."""
    if isinstance(device, torch.device):
        return resolve_device(str(device))
    if not isinstance(device, str):
        raise TypeError(
            'Translator.load(device): "auto", "cpu", "cuda", "cuda:N" or a torch.device, '
            f"not {type(device).__name__}"
        )
    return resolve_device(device)


def overrides_of(decode: object) -> DecodeOverrides:
    """`Translator.load`'s `decode`: a DecodeOverrides, or None for none."""
    if decode is None:
        return DecodeOverrides()
    if not isinstance(decode, DecodeOverrides):
        raise TypeError(
            "Translator.load(decode): a DecodeOverrides (from nmt_cli.user_settings), such as "
            f"DecodeOverrides(beam=4), not {type(decode).__name__}"
        )
    return decode


def check_flags(**flags: object) -> None:
    """A call's true-or-false arguments (`split_sentences`, `alignments`): a truthy "no" is not one."""
    for name, value in flags.items():
        check_setting(name, value)


def checked_settings(settings: object, method: str) -> DecodeSettings:
    """The `settings` argument of `translate_with` and `translate_results`."""
    if not isinstance(settings, DecodeSettings):
        raise TypeError(
            f"{method}(settings): the DecodeSettings that Translator.settings() makes, "
            f"not {type(settings).__name__}"
        )
    return settings


def call_settings(settings: Settings, options: DecodeOptions, nbest: int, caller: str) -> DecodeSettings:
    """The settings of a call from its keyword arguments (`DecodeOptions`), checked by `settings`."""
    unknown = sorted(set(options) - set(DecodeOptions.__annotations__))
    if unknown:
        raise TypeError(f"{caller}() got an unexpected keyword argument {unknown[0]!r}")
    given = cast(dict[str, Any], options)
    search = DecodeOverrides(**{name: given[name] for name in SEARCH_FIELDS if name in given})
    checked = settings(search, nbest, given.get("batch_tokens"), given.get("sampling"))
    return with_terms(checked, given.get("glossary"), given.get("ordered_constraints", False))
