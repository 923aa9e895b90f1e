"""`nmt serve` with constraints and glossaries, over the copy-task pair (en-de says only what it
reads, so a phrase in its output is one the request enforced): nmt's own route takes
"constraints" per text and a "glossary" per request, the LibreTranslate route a "glossary" as
nmt's extension; a phrase that cannot be met is the request's 422 (400 in LibreTranslate's shape)
naming it, never a 500; and requests with different glossaries are answered each with its own."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Iterator

import pytest
from helpers import Pairs
from serve_helpers import Server, serving_in_process


@pytest.fixture(scope="module")
def server(pairs: Pairs) -> Iterator[Server]:
    with serving_in_process(pairs.en_de) as running:
        yield running


def test_each_texts_constraints_appear_in_its_translation(server: Server) -> None:
    body = {
        "text": ["apple river", "stone cloud", "green music"],
        "constraints": [["silver"], [], ["winter", "tiger"]],
    }
    response = server.post(body)
    assert response.status_code == 200, response.text
    first, second, third = response.json()["translations"]
    assert "silver" in first.split()
    assert second == "stone cloud"
    assert {"winter", "tiger"} <= set(third.split())
    ordered = server.post(
        {"text": ["green music"], "constraints": [["winter", "tiger"]], "ordered_constraints": True}
    )
    words = ordered.json()["translations"][0].split()
    assert words.index("winter") < words.index("tiger")


def test_a_glossary_applies_where_its_source_term_occurs(server: Server) -> None:
    body = {"text": ["apple river", "stone cloud"], "glossary": {"river": "summer"}}
    assert server.post(body).json()["translations"][0].split().count("summer") == 1
    assert server.post(body).json()["translations"][1] == "stone cloud"
    pairs = {"text": ["apple river"], "glossary": [["apple", "winter"]]}  # a list of pairs too
    assert "winter" in server.post(pairs).json()["translations"][0].split()
    lt = {"q": "apple river", "source": "en", "target": "de", "glossary": {"apple": "winter"}}
    response = server.post(lt)
    assert response.status_code == 200, response.text
    assert "winter" in response.json()["translatedText"].split()


def test_requests_with_different_glossaries_get_their_own_terms(server: Server) -> None:
    # Decoded together or not, each request's terms are its own.
    terms = ["silver", "summer", "winter", "tiger", "garden", "yellow"]
    bodies = [{"text": ["apple river"], "glossary": {"river": term}} for term in terms]
    with concurrent.futures.ThreadPoolExecutor(len(bodies)) as pool:
        answers = list(pool.map(server.post, bodies))
    for term, answer in zip(terms, answers, strict=True):
        assert answer.status_code == 200, answer.text
        words = answer.json()["translations"][0].split()
        assert term in words and not set(words) & (set(terms) - {term})


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"text": ["apple"], "constraints": [[""]]}, "constraints[0]: an empty constraint"),
        (
            {"text": ["apple", "river"], "constraints": [["silver"]]},
            "constraints: a list of phrases (strings) for each of the 2 texts",
        ),
        ({"text": ["apple"], "constraints": ["silver"]}, "constraints: a list of phrases"),
        ({"text": ["apple"], "constraints": [["silver " * 80]]}, "constraints[0]: the constraints need"),
        (
            {"text": ["apple"], "constraints": [["\u6f22\u5b57"]]},
            "constraints[0]: constraint '\u6f22\u5b57' has characters",
        ),
        ({"text": ["apple"], "constraints": [["silver"]], "sampling": "topk"}, "sampling: draws freely"),
        ({"text": ["apple"], "constraints": [["silver"]], "format": "html"}, "constraints: for format text"),
        (
            {"text": ["apple"], "glossary": {"apple": "\u6f22\u5b57"}},
            "glossary: constraint '\u6f22\u5b57' has characters",
        ),
        (  # both given: the bad term is the glossary's, and the error says so
            {"text": ["apple"], "constraints": [["silver"]], "glossary": {"apple": "\u6f22\u5b57"}},
            "glossary: constraint '\u6f22\u5b57' has characters",
        ),
        (
            {"text": ["apple"], "glossary": [["apple"]]},
            "glossary entry 1: expected (source term, target term)",
        ),
        (
            {"text": ["apple"], "glossary": "apple=silver"},
            "glossary: an object of source term to target term",
        ),
        ({"text": ["apple"], "glossary": 5}, "glossary: an object of source term to target term"),
        ({"text": ["apple"], "ordered_constraints": "yes"}, "ordered_constraints: must be true or false"),
        # JSON's escapes can spell a lone surrogate, which no encoder takes: sent as bytes.
        (
            b'{"text": ["apple"], "constraints": [["\\ud800"]]}',
            "constraints[0]: constraint '\\ud800' is not valid",
        ),
        # A glossary's entries are checked whether or not they match the text.
        (b'{"text": ["apple"], "glossary": {"apple": "\\udfff"}}', "glossary entry 1: "),
        (b'{"text": ["apple"], "glossary": {"pear": "\\udfff"}}', "is not valid Unicode"),
    ],
)
def test_a_phrase_or_glossary_that_cannot_be_used_is_a_422_naming_it(
    server: Server, body: dict | bytes, says: str
) -> None:
    response = server.post(body)
    assert response.status_code == 422, response.text
    assert says in response.json()["error"]


@pytest.mark.parametrize(
    ("glossary", "says"),
    [
        ([["apple"]], "Invalid request: glossary entry 1"),
        (5, "Invalid request: glossary: an object"),
        ({"apple": "\u6f22\u5b57"}, "Invalid request: glossary: constraint '\u6f22\u5b57' has characters"),
    ],
)
def test_libretranslates_shape_refuses_a_bad_glossary_with_its_400(
    server: Server, glossary: object, says: str
) -> None:
    response = server.post({"q": "apple", "source": "en", "target": "de", "glossary": glossary})
    assert response.status_code == 400, response.text
    assert response.json()["error"].startswith(says)
