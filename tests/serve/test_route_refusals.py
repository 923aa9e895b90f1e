"""The refusals both shapes of POST /translate share (`serving.refusals`), each driven through
both routes of the server (its app, in process): nmt's own names `text[i]` (422 for a bad
field), LibreTranslate's names `q[i]` with its 400 and "Invalid request: ", and neither names
the other's fields. And
LibreTranslate's route enforces nmt's "constraints" as it does the glossary, in q's shape."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from helpers import Pairs
from serve_helpers import Server, serving_in_process

from nmt_cli.serving import refusals
from nmt_cli.serving.refusals import Refusal

MAX_QUEUE, MAX_TAGS = 16, 1000
SENTENCES = " ".join(f"Apple river {n}." for n in range(MAX_QUEUE + 4))

# (refusal, texts, format html, other fields, the message with {texts} for the route's field)
CASES: list[tuple[Refusal, list[str], bool, dict[str, Any], str]] = [
    (refusals.MARKUP, ["apple", "<b>" * 300 + "river"], True, {}, "{texts}[1]: "),
    (refusals.MARKUP_COST, ["<br>" * 400] * 3, True, {}, "{texts}: 1,200 HTML tags (each < counts); at most"),
    (refusals.TOO_MANY_UNITS, [SENTENCES], False, {}, "{texts}: 20 lines, more than the whole queue holds"),
    (
        refusals.CONSTRAINTS_SHAPE,
        ["apple", "river"],
        False,
        {"constraints": [["silver"]]},
        "constraints: a list of phrases (strings) for each of the 2 texts",
    ),
    (
        refusals.CONSTRAINTS_WITH_HTML,
        ["apple", "river"],
        True,
        {"constraints": [["silver"], []]},
        "constraints: for format text",
    ),
    (refusals.CONSTRAINT, ["apple"], False, {"constraints": [[""]]}, "constraints[0]: an empty constraint"),
    (refusals.TERMS, ["apple"], False, {"glossary": 5}, "glossary: an object of source term to target term"),
]  # fmt: skip
ROUTES = ("nmt", "libretranslate")
NAMES = {id(value): name.lower() for name, value in vars(refusals).items() if isinstance(value, Refusal)}


@pytest.fixture(scope="module")
def server(pairs: Pairs) -> Iterator[Server]:
    limits = ("--max-queue", MAX_QUEUE, "--max-lines", MAX_QUEUE, "--max-html-tags", MAX_TAGS)
    with serving_in_process(pairs.en_de, "--workers", 1, *limits) as running:
        yield running


def request(route: str, texts: list[str], html: bool, fields: dict[str, Any]) -> dict[str, Any]:
    form = {"format": "html"} if html else {}
    if route == "nmt":
        return {"text": texts, "source": "en", "target": "de", **form, **fields}
    return {"q": texts, "source": "en", "target": "de", **form, **fields}


def test_the_table_is_the_whole_of_the_shared_refusals() -> None:
    assert {id(case[0]) for case in CASES} == {id(refusal) for refusal in refusals.REFUSALS}


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize(
    ("refusal", "texts", "html", "fields", "says"),
    [pytest.param(*case, id=NAMES[id(case[0])]) for case in CASES],
)
def test_each_refusal_is_worded_by_the_route_that_asked(
    server: Server,
    route: str,
    refusal: Refusal,
    texts: list[str],
    html: bool,
    fields: dict[str, Any],
    says: str,
) -> None:
    response = server.post(request(route, texts, html, fields))
    error = response.json()["error"]
    if route == "nmt":
        assert response.status_code == refusal.nmt_status, error
        assert error.startswith(says.format(texts="text")), error
        assert "q[" not in error and "Invalid request" not in error
    else:
        assert response.status_code == refusal.libretranslate_status, error
        assert error.startswith("Invalid request: " + says.format(texts="q")), error
        assert "text[" not in error and "text:" not in error
    assert refusal.nmt_status in (413, 422) and refusal.libretranslate_status in (400, 413)


def test_libretranslates_route_enforces_constraints_in_the_shape_of_q(server: Server) -> None:
    # The copy-task model says only what it reads: a phrase in its output was enforced.
    one = server.post({"q": "apple river", "source": "en", "target": "de", "constraints": ["silver"]})
    assert one.status_code == 200, one.text
    assert "silver" in one.json()["translatedText"].split()
    listed = {"q": ["apple river", "stone"], "source": "en", "target": "de", "constraints": [["tiger"], []]}
    answer = server.post(listed)
    assert answer.status_code == 200, answer.text
    first, second = answer.json()["translatedText"]
    assert "tiger" in first.split() and second == "stone"
    ordered = server.post(
        {
            **listed,
            "constraints": [["winter", "tiger"], []],
            "ordered_constraints": True,
            "q": ["green music", "x"],
        }
    )
    words = ordered.json()["translatedText"][0].split()
    assert words.index("winter") < words.index("tiger")
