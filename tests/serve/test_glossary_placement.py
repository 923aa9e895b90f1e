"""Glossary terms in the model's own word's place on every route of `nmt serve` (nmt's own, the
LibreTranslate one, plain text and HTML), over the copy-task pair, which writes each word of its
input again: a term must come out where its source term's copy would, and that copy not beside it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from helpers import Pairs
from serve_helpers import Server, serving_in_process

LINES = ["apple river stone cloud", "green music paper", "silver window orange garden yellow"]
GLOSSARY = {"river": "tiger", "paper": "winter", "orange": "friend"}
PLACED = ["apple tiger stone cloud", "green music winter", "silver window friend garden yellow"]


@pytest.fixture(scope="module")
def server(pairs: Pairs) -> Iterator[Server]:
    with serving_in_process(pairs.en_de) as running:
        yield running


def test_the_copy_model_writes_each_word_again(server: Server) -> None:
    # Otherwise the tests below could not say where a term belongs.
    assert server.post({"text": LINES}).json()["translations"] == LINES


def test_nmts_route_puts_each_term_in_its_source_terms_place(server: Server) -> None:
    response = server.post({"text": LINES, "glossary": GLOSSARY})
    assert response.status_code == 200, response.text
    assert response.json()["translations"] == PLACED


@pytest.mark.parametrize("format_", ["text", "html"])
def test_the_libretranslate_route_puts_them_there_too(server: Server, format_: str) -> None:
    body = {"q": LINES, "source": "en", "target": "de", "format": format_, "glossary": GLOSSARY}
    response = server.post(body)
    assert response.status_code == 200, response.text
    assert response.json()["translatedText"] == PLACED


def test_html_keeps_the_markup_on_the_term_that_took_the_words_place(server: Server) -> None:
    body = {"text": ["<p>green music <b>paper</b></p>"], "format": "html", "glossary": {"paper": "winter"}}
    response = server.post(body)
    assert response.status_code == 200, response.text
    assert response.json()["translations"] == ["<p>green music <b>winter</b></p>"]
