"""The Python API, `from nmt_cli import Translator`, with the tiny copy model: blank lines give "",
output i belongs to input i whatever the batching, n-best lists are best first and nbest long,
translate is the first of translate_nbest, and bad settings are one-line InputErrors."""

from __future__ import annotations

import os
import random
import re
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from helpers import TrainedRun, one_thread, refused, sentences

import nmt_cli
from nmt_cli import Translator
from nmt_cli.errors import InputError, SettingError


@pytest.fixture(scope="module")
def translator(trained: TrainedRun) -> Iterator[Translator]:
    with one_thread():
        yield Translator.load(trained.checkpoint, device="cpu")


def mixed(seed: int) -> list[str]:
    lines = sentences(30, seed=seed) + ["", "   ", "\t"]
    random.Random(seed).shuffle(lines)
    return lines


def test_the_package_exports_the_translator() -> None:
    from nmt_cli.decoding.translator import Translator as Direct

    assert nmt_cli.Translator is Direct is Translator


def test_blank_lines_translate_to_empty_strings(translator: Translator) -> None:
    assert translator.translate(["", "apple river", "   ", "\t"]) == ["", "apple river", "", ""]
    assert translator.translate_nbest([""], 3) == [[("", 0.0), ("", float("-inf")), ("", float("-inf"))]]


def test_output_order_is_input_order_whatever_the_batching(translator: Translator) -> None:
    lines = mixed(seed=21)
    together = translator.translate(lines, batch_tokens=4096)
    tiny_batches = translator.translate(lines, batch_tokens=8)
    one_by_one = [translator.translate([line])[0] for line in lines]
    assert together == tiny_batches == one_by_one
    copied = [src == hyp for src, hyp in zip(lines, together, strict=True) if src.strip()]
    assert sum(copied) / len(copied) >= 0.9  # the copy model: each output is its own input


@pytest.mark.parametrize("nbest, beam", [(1, 4), (3, 4), (4, 4), (2, None)])
def test_nbest_lists_are_best_first_and_nbest_long(
    translator: Translator, nbest: int, beam: int | None
) -> None:
    lines = [line for line in mixed(seed=22) if line.strip()]
    for hyps in translator.translate_nbest(lines, nbest, beam=beam):
        assert len(hyps) == nbest
        scores = [score for _, score in hyps]
        assert scores == sorted(scores, reverse=True)
        assert len({text for text, _ in hyps}) == nbest  # distinct hypotheses


@pytest.mark.parametrize("beam", [1, 4])
def test_translate_is_the_first_of_translate_nbest(translator: Translator, beam: int) -> None:
    lines = mixed(seed=23)
    best = translator.translate(lines, beam=beam)
    assert best == [hyps[0][0] for hyps in translator.translate_nbest(lines, 1, beam=beam)]
    assert best == [hyps[0][0] for hyps in translator.translate_nbest(lines, beam, beam=beam)]


def test_every_line_gets_exactly_nbest_hypotheses(translator: Translator) -> None:
    lines = ["", "apple river stone", "   ", "green"]
    # One piece at most: the search cannot find four distinct hypotheses, and an empty line has one.
    for hyps in translator.translate_nbest(lines, 4, max_len_a=0.0, max_len_b=1, min_len=0):
        assert len(hyps) == 4
        assert [score for _, score in hyps] == sorted((score for _, score in hyps), reverse=True)


@pytest.mark.parametrize(
    "call",
    [
        lambda t: t.translate_nbest(["apple"], 5, beam=2),
        lambda t: t.translate(["apple"], beam=0),
        lambda t: t.translate(["apple"], lenpen=-1.0),
        lambda t: t.translate_nbest(["apple"], 0),
    ],
    ids=["nbest over beam", "beam 0", "negative lenpen", "nbest 0"],
)
def test_bad_settings_are_input_errors(translator: Translator, call: object) -> None:
    with pytest.raises(InputError):
        call(translator)  # type: ignore[operator]


def test_a_misspelt_keyword_or_a_sampling_that_is_not_one_names_the_call(translator: Translator) -> None:
    with pytest.raises(TypeError, match=r"^translate\(\) got an unexpected keyword argument 'beams'"):
        translator.translate(["apple"], beams=2)  # type: ignore[call-overload]
    with pytest.raises(TypeError, match=r"^translate_html\(\) got an unexpected keyword argument"):
        translator.translate_html(["<p>apple</p>"], beams=2)  # type: ignore[call-arg]
    with pytest.raises(InputError, match=r"^sampling='topk': must be a Sampling"):
        translator.translate(["apple"], sampling="topk")  # type: ignore[call-overload]


def test_a_missing_checkpoint_is_an_input_error(tmp_path: object) -> None:
    with pytest.raises(InputError):
        Translator.load(f"{tmp_path}/missing.pt", device="cpu")


def test_a_lone_surrogate_gets_a_translation_not_an_error(translator: Translator) -> None:
    # Python strings may hold them (e.g. from os.fsdecode); sentencepiece takes only UTF-8.
    out = translator.translate(["\ud800", "apple \udfff river"])
    assert len(out) == 2 and all(isinstance(text, str) for text in out)


@pytest.mark.parametrize(
    ("lines", "words"),
    [
        ("A dog runs.", "not one str; write translate([text])"),
        (b"bytes", "not one bytes"),
        ([None], "lines[0] is NoneType, not str"),
        (["apple", 5], "lines[1] is int, not str"),
        ([b"x"], "lines[0] is bytes, not str"),
        (42, "a list of strings, not int"),
    ],
)
def test_what_is_not_a_list_of_strings_is_a_type_error_naming_it(
    translator: Translator, lines: object, words: str
) -> None:
    with pytest.raises(TypeError) as raised:
        translator.translate(lines)  # type: ignore[arg-type]
    assert words in str(raised.value) and str(raised.value).startswith("translate(lines)")
    with pytest.raises(TypeError, match=r"^translate_nbest\(lines\)"):
        translator.translate_nbest(lines, nbest=2)  # type: ignore[arg-type]
    assert translator.translate(("apple", "river")) == translator.translate(
        ["apple", "river"]
    )  # any sequence


def test_every_decode_override_is_a_keyword_of_the_api() -> None:
    """A setting added to DecodeOverrides (the CLI's and the server's) must reach translate() too."""
    import dataclasses

    from nmt_cli.decoding.settings import DecodeOptions
    from nmt_cli.user_settings import DecodeOverrides

    overrides = {f.name for f in dataclasses.fields(DecodeOverrides)}
    assert overrides <= set(DecodeOptions.__annotations__)


# --- the arguments of load and of a call, each refused by name with the documented class ---------


def test_a_nul_reads_as_a_space_as_nmt_translate_reads_it(translator: Translator) -> None:
    # The command line and the server turn NUL into a space before anything else; the API must
    # give the same translation (sentencepiece would take the NUL as part of a word).
    with_nul = ["apple\x00river", "green stone.\x00Silver window.", "\x00"]
    spaced = [line.replace("\x00", " ") for line in with_nul]
    assert translator.translate(with_nul) == translator.translate(spaced)
    assert translator.translate(with_nul, split_sentences=False) == translator.translate(
        spaced, split_sentences=False
    )
    settings = translator.settings()
    assert translator.translate_results(with_nul, settings) == translator.translate_results(spaced, settings)


def test_numpy_bools_are_flags_as_numpy_ints_are_numbers(translator: Translator) -> None:
    import numpy as np

    lines = ["apple river. green stone."]
    assert translator.translate(lines, split_sentences=np.bool_(False)) == translator.translate(
        lines, split_sentences=False
    )


def test_a_checkpoint_is_a_path_or_several(trained: TrainedRun, translator: Translator) -> None:
    lines = sentences(5, seed=31)
    expected = translator.translate(lines)
    as_bytes = os.fsencode(trained.checkpoint)  # as os.fspath takes it
    assert Translator.load(as_bytes, device="cpu").translate(lines) == expected
    assert Translator.load((p for p in [trained.checkpoint]), device="cpu").translate(lines) == expected
    for model, says in [
        (None, "not NoneType"),
        (5, "not int"),
        ([trained.checkpoint, None], "model[1] is NoneType"),
    ]:
        with pytest.raises(TypeError, match=rf"^Translator\.load\(model\): .*{re.escape(says)}"):
            Translator.load(model, device="cpu")  # type: ignore[arg-type]
    with pytest.raises(SettingError, match=r"^model=\[\]: no checkpoint given"):
        Translator.load([], device="cpu")


def test_a_torch_device_is_taken_and_a_wrong_device_or_decode_is_named(trained: TrainedRun) -> None:
    loaded = Translator.load(trained.checkpoint, device=torch.device("cpu"), decode=None)
    assert loaded.device == torch.device("cpu")
    assert Translator.load(trained.checkpoint, device=torch.device("cpu", 0)).device.type == "cpu"
    with pytest.raises(TypeError, match=r"^Translator\.load\(device\): .* not NoneType"):
        Translator.load(trained.checkpoint, device=None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^Translator\.load\(decode\): a DecodeOverrides .* not dict"):
        Translator.load(trained.checkpoint, device="cpu", decode={"beam": 2})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("call", "says"),
    [
        (
            lambda t, m: Translator.load(m, device="gpu"),
            "device='gpu': unknown device; use auto, cpu or cuda",
        ),
        (lambda t, m: Translator.load(m, device="cpu", precision="fp8"), "precision='fp8': use "),
        (lambda t, m: Translator.load(m, device="cpu", precision="fp16"), "precision='fp16': is for GPU"),
        (lambda t, m: t.translate(["apple"], glossary="bike"), "glossary='bike': must map source terms"),
        (
            lambda t, m: t.translate(["apple"], glossary={"apple": ""}),
            "glossary={'apple': ''}: entry 1: empty",
        ),
        (
            lambda t, m: t.translate(["apple"], glossary={"{x}": 5}),
            "glossary={'{x}': 5}: entry 1: expected (source term, target term), got ('{x}', 5)",
        ),
        (
            lambda t, m: t.translate(["apple"], split_sentences="no"),
            "split_sentences='no': must be true or false",
        ),
        (lambda t, m: t.translate(["apple"], alignments=1), "alignments=1: must be true or false"),
        (
            lambda t, m: t.translate_nbest(["apple"], split_sentences=None),
            "split_sentences=None: must be true",
        ),
    ],
    ids=[
        "device",
        "precision",
        "fp16-on-cpu",
        "glossary-str",
        "glossary-entry",
        "glossary-braces",
        "split",
        "alignments",
        "nbest-split",
    ],
)
def test_a_bad_value_is_a_setting_error_naming_the_parameter(
    translator: Translator, trained: TrainedRun, call: Any, says: str
) -> None:
    with pytest.raises(SettingError) as raised:
        call(translator, trained.checkpoint)
    assert isinstance(raised.value, ValueError) and str(raised.value).startswith(says), str(raised.value)


def test_the_command_line_keeps_its_own_wording_for_the_device(
    trained: TrainedRun, capsys: pytest.CaptureFixture[str]
) -> None:
    line = refused(capsys, "translate", "-m", trained.checkpoint, "--device", "gpu", "-i", "/dev/null")
    assert line == "nmt: error: --device gpu: unknown device; use auto, cpu or cuda"


@pytest.mark.parametrize(
    ("constraints", "says"),
    [
        (5, "not int"),
        ({"apple river": ["apple"]}, "not dict"),
        ("silver", "not one str; for one line that must contain it, write [['silver']]"),
        (b"silver", "not one bytes"),
    ],
)
def test_constraints_in_the_wrong_container_are_a_type_error_naming_them(
    translator: Translator, constraints: object, says: str
) -> None:
    with pytest.raises(TypeError, match=r"^constraints: one list of phrases a line") as raised:
        translator.translate(["apple river", "green"], constraints=constraints)  # type: ignore[arg-type]
    assert says in str(raised.value)
    assert "b'silver'" not in str(raised.value)  # bytes are no phrase: not suggested as one


def test_constraints_may_come_from_a_generator_as_lines_may(translator: Translator) -> None:
    lines, wanted = ["apple river", "green stone"], [["river"], []]
    assert translator.translate(lines, constraints=(c for c in wanted)) == translator.translate(
        lines, constraints=wanted
    )


def test_translate_results_checks_lines_and_settings(translator: Translator) -> None:
    settings = translator.settings()
    for method in ("translate_results",):
        call = getattr(translator, method)
        with pytest.raises(TypeError, match=rf"^{method}\(lines\): a list of strings, not one str"):
            call("apple river", settings)
        with pytest.raises(TypeError, match=rf"^{method}\(lines\): lines\[0\] is NoneType"):
            call([None], settings)
        with pytest.raises(TypeError, match=rf"^{method}\(settings\): the DecodeSettings .* not NoneType"):
            call(["apple"], None)
    with pytest.raises(TypeError, match=r"^settings\(search\): a DecodeOverrides, .* not dict"):
        translator.settings({"beam": 2})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^translate_html\(fragments\): a list of strings, not one str"):
        translator.translate_html("<p>apple</p>")  # type: ignore[arg-type]
