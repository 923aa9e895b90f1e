"""`check_before_load`: the decode rules a command checks before it loads a checkpoint refuse as
`resolve` does, naming the setting, and let through what any checkpoint's recipe would take."""

from __future__ import annotations

import pytest

from nmt_cli.decoding.settings import Sampling, check_before_load
from nmt_cli.errors import SettingError
from nmt_cli.user_settings import DecodeOverrides


def test_the_rules_between_settings_are_refused_before_a_model_is_loaded() -> None:
    with pytest.raises(SettingError) as raised:
        check_before_load(DecodeOverrides(beam=2), nbest=3)
    assert raised.value.name == "nbest"
    with pytest.raises(SettingError) as raised:
        check_before_load(DecodeOverrides(beam=4), sampling=Sampling("topk"))
    assert raised.value.name == "beam"
    with pytest.raises(SettingError) as raised:
        check_before_load(DecodeOverrides(), batch_tokens=0)
    assert raised.value.name == "batch_tokens"


def test_what_a_recipe_fills_in_is_not_refused() -> None:
    check_before_load(DecodeOverrides(), nbest=8)  # the recipe's beam is raised to nbest
    check_before_load(DecodeOverrides(max_len_a=0.0), batch_tokens=None)
