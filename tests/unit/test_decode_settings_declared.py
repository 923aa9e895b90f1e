"""A search setting is declared once, in `config.DecodeConfig`; the places that must list it again
to be typed (the overrides a call gives, the Python API's keywords) and the table of its allowed
values are held equal to it here, so that a setting added to the recipe and forgotten elsewhere
fails a test that names it (docs/development.md, "Adding a decode setting")."""

from __future__ import annotations

import dataclasses
from typing import get_type_hints

from nmt_cli.config import DecodeConfig
from nmt_cli.decoding.settings import DecodeOptions
from nmt_cli.ranges import SETTINGS
from nmt_cli.serving.requests import FIELDS
from nmt_cli.user_settings import RECIPE_ONLY, SEARCH_FIELDS, DecodeOverrides

RECIPE = {f.name: f for f in dataclasses.fields(DecodeConfig)}
OVERRIDES = {f.name: f for f in dataclasses.fields(DecodeOverrides)}
TYPES = get_type_hints(DecodeConfig)


def test_the_overrides_are_the_recipes_settings_but_the_recipe_only_ones() -> None:
    assert set(RECIPE_ONLY) <= set(RECIPE)
    assert list(OVERRIDES) == [name for name in RECIPE if name not in RECIPE_ONLY]
    assert SEARCH_FIELDS == tuple(OVERRIDES)


def test_each_override_has_the_recipes_type_and_none_for_not_given() -> None:
    types = get_type_hints(DecodeOverrides)
    for name, override in OVERRIDES.items():
        assert types[name] == TYPES[name] | None, name
        assert override.default is None, name
    assert DecodeOverrides().given() == {}


def test_every_recipe_setting_has_its_allowed_values() -> None:
    assert set(RECIPE) <= set(SETTINGS)
    DecodeConfig().validate("the defaults")


def test_the_api_and_http_take_every_override_by_its_name() -> None:
    keywords = get_type_hints(DecodeOptions)
    for name in SEARCH_FIELDS:
        assert keywords.get(name) == TYPES[name] | None, name
        assert name in FIELDS, name
