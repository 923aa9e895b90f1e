"""One table of out-of-range and conflicting decode settings, each refused the same way by the
three front ends: `nmt translate` exits 2 with one line naming the flag, `nmt serve` answers 422
naming the field, and the Python API raises a ValueError (an InputError too) naming the parameter.
The edges of the ranges decode without overflow."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import TrainedRun, nmt, one_line_error, one_thread
from serve_helpers import Server, serving_in_process

from nmt_cli.decoding.settings import SAMPLING_FIELDS, Sampling
from nmt_cli.decoding.translator import Translator
from nmt_cli.errors import InputError, SettingError

HTTP, API = "http", "api"
RUNTIME = ("batch_tokens", "threads", "workers")  # settings of a call or a process, not of a request
FLAT = "flat"  # a sampling setting given apart from its method: the command line's and HTTP's form

# (settings by their API and HTTP names, the setting that is refused, front ends that cannot say it)
CASES: list[tuple[dict[str, Any], str, set[str]]] = [
    ({"lenpen": 500.0}, "lenpen", set()),
    ({"lenpen": -1.0}, "lenpen", set()),
    ({"lenpen": math.nan}, "lenpen", set()),
    ({"lenpen_style": "marian"}, "lenpen_style", set()),
    ({"max_len_a": math.inf}, "max_len_a", set()),
    ({"max_len_a": -0.5}, "max_len_a", set()),
    ({"max_len_b": -1}, "max_len_b", set()),
    ({"max_len_a": 0.0, "max_len_b": 0}, "max_len_b", set()),
    ({"min_len": -1}, "min_len", set()),
    ({"beam": 0}, "beam", set()),
    ({"beam": 129}, "beam", set()),
    ({"nbest": 0}, "nbest", set()),
    ({"nbest": 3, "beam": 2}, "nbest", set()),
    ({"sampling": "greedy"}, "sampling", set()),
    ({"sampling": "topk", "topk": 2.5}, "topk", set()),
    ({"sampling": "topk", "topk": -1}, "topk", set()),
    ({"sampling": "topp", "topp": 0.0}, "topp", set()),
    ({"sampling": "topp", "topp": 1.5}, "topp", set()),
    ({"sampling": "topk", "temperature": math.inf}, "temperature", set()),
    ({"sampling": "topk", "temperature": 0.0}, "temperature", set()),
    ({"sampling": "topk", "seed": -1}, "seed", set()),
    ({"sampling": "topk", "nbest": 2}, "nbest", set()),
    ({"sampling": "topk", "beam": 4}, "beam", set()),
    ({"sampling": "topk", "lenpen": 1.0}, "lenpen", set()),
    ({"topk": 5}, "topk", {API}),  # the API's Sampling always has a method
    ({"sampling": "topk", "topp": 0.5}, "topp", set()),
    ({"sampling": "topp", "topk": 5}, "topk", set()),
    ({"batch_tokens": 0}, "batch_tokens", {HTTP}),
    ({"threads": 100_000}, "threads", {HTTP}),
    ({"workers": -1}, "workers", {HTTP}),
]
IDS = [f"{refused}-{'-'.join(f'{k}={v}' for k, v in settings.items())}" for settings, refused, _ in CASES]


def cases(front_end: str) -> list[Any]:
    return [
        pytest.param(settings, refused, id=name)
        for (settings, refused, cannot), name in zip(CASES, IDS, strict=True)
        if front_end not in cannot
    ]


# --- the command line ------------------------------------------------------------------------------


@pytest.mark.parametrize("settings, refused", cases("cli"))
def test_the_command_line_exits_2_with_one_line_naming_the_flag(
    trained: TrainedRun, capsys: pytest.CaptureFixture[str], settings: dict[str, Any], refused: str
) -> None:
    options = [part for name, value in settings.items() for part in (f"--{name.replace('_', '-')}", value)]
    capsys.readouterr()
    assert nmt("translate", "-m", trained.checkpoint, "--device", "cpu", "-i", "/dev/null", *options) == 2
    line = one_line_error(capsys)
    flag = f"--{refused.replace('_', '-')}"
    # Ours, or Typer's own for a value that is not of the option's type (--topk 2.5).
    assert line.startswith(f"nmt: error: {flag} ") or f"'{flag}'" in line, line


def test_nmt_serve_refuses_runtime_settings_as_the_command_line_does(
    trained: TrainedRun, capsys: pytest.CaptureFixture[str]
) -> None:
    for option, value in (("--threads", 100_000), ("--workers", -1), ("--max-batch-tokens", 2_000_000)):
        capsys.readouterr()
        assert nmt("serve", "-m", trained.checkpoint, "--port", 0, option, value) == 2
        assert one_line_error(capsys).startswith(f"nmt: error: {option} {value}: must be")


# --- HTTP ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(trained: TrainedRun) -> Iterator[Server]:
    with serving_in_process(trained.checkpoint) as running:
        yield running


@pytest.mark.parametrize("settings, refused", cases(HTTP))
def test_nmt_serve_answers_422_naming_the_field(
    server: Server, settings: dict[str, Any], refused: str
) -> None:
    body = json.dumps({"text": ["apple river"], **settings}).encode()  # NaN and Infinity as JSON5 allows
    response = server.post(body)
    assert response.status_code == 422, response.text
    assert response.json()["error"].startswith(f"{refused}: "), response.text


# --- the Python API --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def translator(trained: TrainedRun) -> Translator:
    with one_thread():
        return Translator.load(trained.checkpoint, device="cpu", precision="fp32")


def api_call(translator: Translator, checkpoint: Path, settings: dict[str, Any]) -> None:
    settings = dict(settings)
    if "threads" in settings:
        Translator.load(checkpoint, device="cpu", threads=settings["threads"])
    elif "workers" in settings:
        translator.start_workers(settings["workers"])
    else:
        method = settings.pop("sampling", None)
        drawn = {name: settings.pop(name) for name in SAMPLING_FIELDS if name in settings}
        sampling = Sampling(method, **drawn) if method is not None else None
        translator.translate_nbest(["apple river"], sampling=sampling, **settings)


@pytest.mark.parametrize("settings, refused", cases(API))
def test_the_api_raises_a_value_error_naming_the_parameter(
    translator: Translator, trained: TrainedRun, settings: dict[str, Any], refused: str
) -> None:
    with pytest.raises(ValueError) as raised:
        api_call(translator, trained.checkpoint, settings)
    assert isinstance(raised.value, SettingError) and isinstance(raised.value, InputError)
    assert raised.value.name == refused
    assert str(raised.value).startswith(f"{refused}=") and "\n" not in str(raised.value)


# --- the edges are accepted, and decode -----------------------------------------------------------

EDGES = {"lenpen": 10.0, "max_len_a": 100.0, "beam": 8, "nbest": 8}


def test_the_largest_settings_accepted_decode_without_overflow(
    translator: Translator, trained: TrainedRun, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    lines = ["apple river stone", "green music"]
    with one_thread():
        hyps = translator.translate_nbest(lines, **EDGES)  # type: ignore[arg-type]
    assert [len(h) for h in hyps] == [8, 8]
    assert all(math.isfinite(score) and text for h in hyps for text, score in h)
    source = tmp_path / "in.txt"
    source.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    options = [part for name, value in EDGES.items() for part in (f"--{name.replace('_', '-')}", value)]
    capsys.readouterr()
    assert (
        nmt("translate", "-m", trained.checkpoint, "--device", "cpu", "--workers", 1, "-i", source, *options)
        == 0
    )
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 16 and [line.split("\t")[2] for line in out[::8]] == [h[0][0] for h in hyps]


# --- phrases that the search could not place: one rule, every front end --------------------------

# (where the phrase is given, the phrase, what the refusal says). A phrase with no letter or digit
# has nothing that ties it to a place in the sentence: "." turned "A man is riding a bike in the
# park." into "Ein .", the translation ending where the stop was met.
PHRASES = [
    ("constraints", ".", "constraint '.' has no letter or digit"),
    ("constraints", "?!", "constraint '?!' has no letter or digit"),
    ("constraints", "%", "constraint '%' has no letter or digit"),
    ("constraints", "\u200b", "an empty constraint"),  # nothing visible
    ("glossary", ".", "target term '.' has no letter or digit"),
    ("glossary", "\u2026", "target term '\u2026' has no letter or digit"),
]
PHRASE_IDS = [f"{kind}-{ascii(phrase)}" for kind, phrase, _ in PHRASES]
SOURCE = "apple river"


@pytest.mark.parametrize(("kind", "phrase", "says"), PHRASES, ids=PHRASE_IDS)
def test_the_command_line_refuses_the_phrase_naming_its_line(
    trained: TrainedRun,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    kind: str,
    phrase: str,
    says: str,
) -> None:
    src, out = tmp_path / "in.txt", tmp_path / "out.txt"
    if kind == "constraints":
        src.write_text(f"{SOURCE}\n{SOURCE}\t{phrase}\n", encoding="utf-8")
        options: list[object] = ["--constraints"]
        where = f"{src}:2: "
    else:
        terms = tmp_path / "terms.tsv"
        terms.write_text(f"river\t{phrase}\n", encoding="utf-8")
        src.write_text(f"{SOURCE}\n", encoding="utf-8")
        options, where = ["--glossary", terms], f"glossary {terms}:1: "
    capsys.readouterr()
    args = ("translate", "-m", trained.checkpoint, "--device", "cpu", "-i", src, "-o", out, *options)
    assert nmt(*args) == 2
    assert f"{where}{says}" in one_line_error(capsys)
    assert not out.exists()


@pytest.mark.parametrize(("kind", "phrase", "says"), PHRASES, ids=PHRASE_IDS)
def test_the_api_refuses_the_phrase_with_an_input_error(
    translator: Translator, kind: str, phrase: str, says: str
) -> None:
    with pytest.raises(InputError) as raised, one_thread():
        if kind == "constraints":
            translator.translate([SOURCE], constraints=[[phrase]])
        else:
            translator.translate([SOURCE], glossary={"river": phrase})
    assert says in str(raised.value) and "\n" not in str(raised.value)


@pytest.mark.parametrize(("kind", "phrase", "says"), PHRASES, ids=PHRASE_IDS)
def test_both_routes_refuse_the_phrase_naming_the_field(
    server: Server, kind: str, phrase: str, says: str
) -> None:
    field = {"constraints": [[phrase]]} if kind == "constraints" else {"glossary": {"river": phrase}}
    response = server.post({"text": [SOURCE], **field})
    assert response.status_code == 422, response.text
    assert response.json()["error"].startswith(f"{kind}") and says in response.json()["error"]
    if kind == "glossary":  # LibreTranslate's route takes a glossary as nmt's extension
        libre = server.post({"q": SOURCE, "source": "auto", "target": "tgt", **field})
        assert libre.status_code == 400, libre.text
        assert libre.json()["error"].startswith("Invalid request: glossary") and says in libre.text
