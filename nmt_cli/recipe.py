"""Recipes on disk: TOML into a validated `RunConfig` (with `--set` overrides) and back out.

A recipe has the sections [model], [train], [decode] and [average], the fields of `RunConfig`;
unknown sections and keys, wrong types and impossible values fail on loading, naming the file and
`section.key`. The same nested dicts are what checkpoints store.
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
import typing
from pathlib import Path

from nmt_cli.config import RunConfig
from nmt_cli.errors import InputError


def _coerce(value: object, annotation: str, key: str, where: str) -> object:
    """Check a TOML value against a field's annotation; ints are accepted for floats."""

    def bad() -> InputError:
        return InputError(f"{where}: {key}: expected {annotation}, got {value!r}")

    if annotation == "bool":
        if not isinstance(value, bool):
            raise bad()
        return value
    if annotation == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad()
        return value
    if annotation == "float":
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise bad()
        return float(value)
    if annotation == "str":
        if not isinstance(value, str):
            raise bad()
        return value
    if annotation == "list[float]":
        if not isinstance(value, list) or not all(
            isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in value
        ):
            raise bad()
        return [float(v) for v in value]
    raise AssertionError(f"unsupported annotation {annotation}")


def from_dict(data: dict, where: str) -> RunConfig:
    """Build and validate a RunConfig from nested dicts, rejecting unknown sections and keys."""
    config = RunConfig()
    sections = {f.name: f for f in dataclasses.fields(RunConfig)}
    for section_name, values in data.items():
        if section_name not in sections:
            raise InputError(
                f"{where}: unknown section [{section_name}]; valid sections: {', '.join(sections)}"
            )
        if not isinstance(values, dict):
            raise InputError(f"{where}: [{section_name}] must be a table of keys")
        section = getattr(config, section_name)
        fields = {f.name: f.type for f in dataclasses.fields(section)}
        given = {}
        for key, value in values.items():
            if key not in fields:
                raise InputError(
                    f"{where}: unknown key {section_name}.{key}; valid keys: {', '.join(fields)}"
                )
            given[key] = _coerce(value, str(fields[key]), f"{section_name}.{key}", where)
        setattr(config, section_name, dataclasses.replace(section, **given))  # [decode] is frozen
    config.validate(where)
    return config


def parse_override(text: str) -> tuple[str, str, object]:
    """Split `section.key=value`; the value is read as TOML, else taken as a plain string."""
    name, sep, raw = text.partition("=")
    section, dot, key = name.strip().partition(".")
    if not sep or not dot or not section or not key:
        raise InputError(f"--set {text!r}: expected section.key=value, e.g. --set train.max_updates=500")
    try:
        value = tomllib.loads(f"v = {raw.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw.strip()
    return section, key, value


def with_overrides(data: dict, overrides: typing.Sequence[str], where: str) -> RunConfig:
    """Apply `--set section.key=value` overrides to nested dicts, then build and validate the config."""
    data = {section: dict(values) if isinstance(values, dict) else values for section, values in data.items()}
    given = set()
    for text in overrides:
        section, key, value = parse_override(text)
        data.setdefault(section, {})
        if not isinstance(data[section], dict):
            raise InputError(f"--set {text!r}: [{section}] is not a section")
        data[section][key] = value
        given.add(f"{section}.{key}")
    if "train.update_freq" in given:
        _asked_for_update_freq(data["train"], "train.update_tokens" in given)
    if overrides:
        where = f"{where} (with --set)"
    return from_dict(data, where)


def _asked_for_update_freq(train: dict, tokens_given: bool) -> None:
    """A recipe's train.update_tokens would recompute update_freq for the number of processes
    and drop the update_freq asked for with --set: the one asked for wins, as fairseq's
    --update-freq does, unless update_tokens is asked for too."""
    if not tokens_given:
        train["update_tokens"] = 0
    elif train.get("update_tokens") not in (0, None):
        raise InputError(
            "--set train.update_freq and --set train.update_tokens: update_tokens decides update_freq; "
            "give one of them"
        )


def load_recipe(path: Path | None, overrides: typing.Sequence[str] = ()) -> RunConfig:
    """Read a recipe file (or the defaults when `path` is None) and apply `--set` overrides."""
    data: dict = {}
    if path is not None:
        if not path.is_file():
            raise InputError(
                f"recipe {path}: not found or not a file; give a .toml recipe, e.g. "
                "recipes/multi30k/small.toml"
            )
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8-sig"))  # a BOM, as Notepad may save
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
            raise InputError(f"recipe {path}: not valid TOML ({err})") from None
    return with_overrides(data, overrides, str(path) if path is not None else "defaults")


def to_dict(config: RunConfig) -> dict:
    return dataclasses.asdict(config)


def dump_toml(config: RunConfig) -> str:
    """The resolved config as TOML that `load_recipe` reads back."""
    lines: list[str] = []
    for section, values in to_dict(config).items():
        lines.append(f"[{section}]")
        for key, value in values.items():
            lines.append(f"{key} = {_toml_value(value)}")
        lines.append("")
    return "\n".join(lines)


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return repr(value)
