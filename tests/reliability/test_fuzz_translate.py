"""Translation under fuzzing (hypothesis): random Unicode lines through the translator and random
bytes through the stream that `nmt translate` reads; it never crashes and always answers exactly
one line per input line. One `nmt translate` subprocess gets random bytes on stdin as well."""

from __future__ import annotations

import functools
import io
import random
import subprocess

import pytest
import torch
from helpers import TrainedRun, nmt_command, one_thread, subprocess_env
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nmt_cli.commands.translate import _translate_stream
from nmt_cli.decoding.translator import Translator, load_translator

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Characters a line can hold after reading: anything but "\n" (the reader splits there). Special
# cases are mixed in because random text rarely hits them.
SPECIAL = [
    "",
    " ",
    "\t",
    "\r",
    "\x00",
    "\ufeff",
    "\u2028",
    "\u0085",
    "\x0b",
    "\ufffd",
    "😀" * 40,
    "apple river",
    "\ud800",  # a lone surrogate: a Python string, but not UTF-8
    "apple \udfff river",
]
LINE = st.one_of(
    st.text(st.characters(exclude_characters="\n"), max_size=120),
    st.sampled_from(SPECIAL),
    st.lists(st.sampled_from(SPECIAL), max_size=6).map("".join),
)


@pytest.fixture(scope="module")
def translator(trained: TrainedRun) -> Translator:
    return load_translator([trained.checkpoint], torch.device("cpu"), "fp32")


@SETTINGS
@given(lines=st.lists(LINE, max_size=10))
def test_random_unicode_lines_get_one_answer_each(translator: Translator, lines: list[str]) -> None:
    with one_thread():
        results = translator.translate_nbest(lines, batch_tokens=256)
    assert len(results) == len(lines)
    for line, hyps in zip(lines, results, strict=True):
        assert len(hyps) == 1
        text, score = hyps[0]
        assert "\n" not in text  # one output line per input line
        if not line.strip():
            assert text == ""


def expected_lines(data: bytes) -> int:
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


RAW = st.one_of(
    st.binary(max_size=200),
    st.sampled_from(
        [b"", b"\r", b"\x00", b"\xef\xbb\xbf", b"\xff\xfe", b"\xc3", b"apple \xe4 river", b"\r\r"]
    ),
)


@SETTINGS
@given(
    parts=st.lists(RAW, max_size=10), ending=st.sampled_from([b"\n", b"\r\n", b"\x00\n"]), final=st.booleans()
)
def test_random_bytes_get_one_output_line_per_input_line(
    translator: Translator, parts: list[bytes], ending: bytes, final: bool
) -> None:
    data = ending.join(parts) + (ending if final and parts else b"")
    out = io.StringIO()
    with one_thread():
        # Sentence by sentence: splitting must not change how many lines come out either.
        settings = translator.settings(batch_tokens=256)
        translate = functools.partial(translator.translate_texts, settings=settings, split=True)
        _translate_stream(translate, io.BytesIO(data), "fuzz", out, buffer_size=3, nbest=1)
    assert out.getvalue().count("\n") == expected_lines(data)


def test_the_command_answers_random_bytes_line_for_line(trained: TrainedRun) -> None:
    rng = random.Random(99)
    pieces = [b"apple river", b"", b"\r", b"\x00\x00", b"\xef\xbb\xbfgreen", b"\xff\xfe\xfd", b"stone\r"]
    lines = [
        rng.choice(pieces) if rng.random() < 0.5 else rng.randbytes(rng.randint(0, 300)) for _ in range(150)
    ]
    lines.append(rng.randbytes(20_000).replace(b"\n", b" "))  # one long binary line
    data = b"\n".join(lines)  # random bytes may hold more newlines; no final newline
    result = subprocess.run(
        nmt_command("-q", "translate", "-m", trained.checkpoint, "--threads", 1),
        input=data,
        capture_output=True,
        timeout=240,
        env=subprocess_env(),
    )
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    assert b"Traceback" not in result.stderr
    result.stdout.decode("utf-8")  # valid UTF-8
    assert result.stdout.count(b"\n") == expected_lines(data)
