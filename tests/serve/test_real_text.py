"""`nmt serve` with real text from real clients, over the two copy-task pairs (en-de copies,
de-en reverses the words): Mastodon's exact request (HTML, `format: "html"`, every request),
inline tags following their words through a reordering model, paragraphs split into sentences,
LibreTranslate's alternatives, POST /detect (through `libretranslatepy`), GET /frontend/settings,
word alignments on nmt's own route, and malformed or oversized HTML refused or repaired, never a
500."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import lxml.html
import pytest
from helpers import MASTODON_HASHTAG, MASTODON_LINK, MASTODON_MENTION, Pairs, one_thread
from serve_helpers import Server, running_server

from nmt_cli import Translator

MENTION, HASHTAG, LINK = MASTODON_MENTION, MASTODON_HASHTAG, MASTODON_LINK


@pytest.fixture(scope="module")
def offline(pair_translators: dict[str, Translator]) -> dict[str, Translator]:
    return pair_translators


@pytest.fixture(scope="module")
def server(pairs: Pairs) -> Iterator[Server]:
    with running_server(pairs.en_de, "-m", pairs.de_en, "--workers", 1) as running:
        yield running


def test_mastodons_request_gets_its_html_back_translated_with_every_element_kept(server: Server) -> None:
    status = f"<p>{MENTION} apple <strong>river</strong> stone {LINK}</p><p>green<br>music {HASHTAG}</p>"
    # What Mastodon's TranslationService::LibreTranslate posts, as JSON, for every status.
    body = {"q": status, "source": "en", "target": "de", "format": "html", "api_key": None}
    response = httpx.post(server.url + "/translate", json=body, timeout=60)
    assert response.status_code == 200, response.text
    assert response.json() == {"translatedText": status}  # the copy model: the words come back as they were


def test_a_block_marked_not_to_translate_is_kept_as_it_was(server: Server) -> None:
    kept = '<p translate="no">apple river stone</p><div class="notranslate">green <b>music</b></div>'
    body = {"q": f"{kept}<p>paper tiger</p>", "source": "de", "target": "en", "format": "html"}
    response = server.post(body)  # de-en reverses the words of what it translates
    assert response.status_code == 200, response.text
    assert response.json()["translatedText"] == f"{kept}<p>tiger paper</p>"


def test_an_inline_tag_follows_its_word_through_a_model_that_reorders(
    server: Server, offline: dict[str, Translator]
) -> None:
    with one_thread():
        plain = offline["de-en"].translate(["apple river stone"])[0]
    assert plain.split() == ["stone", "river", "apple"]  # de-en reverses: what the test relies on
    body = {
        "q": "<p>apple <strong>river</strong> stone</p>",
        "source": "de",
        "target": "en",
        "format": "html",
    }
    response = server.post(body)
    assert response.status_code == 200, response.text
    assert response.json()["translatedText"] == "<p>stone <strong>river</strong> apple</p>"


def test_paragraphs_are_translated_sentence_by_sentence(
    server: Server, offline: dict[str, Translator]
) -> None:
    paragraph = "apple river! green music stone"
    with one_thread():
        alone = offline["en-de"].translate(["apple river!", "green music stone"], split_sentences=False)
        whole = offline["en-de"].translate([paragraph], split_sentences=False)
    split = server.post({"q": paragraph, "source": "en", "target": "de"}).json()["translatedText"]
    assert split == " ".join(alone)
    own = server.post({"text": [paragraph], "source": "en", "target": "de", "split_sentences": False})
    assert own.json()["translations"] == whole


def test_alternatives_are_the_next_best_distinct_translations(
    server: Server, offline: dict[str, Translator]
) -> None:
    response = server.post({"q": "apple river", "source": "en", "target": "de", "alternatives": 2})
    assert response.status_code == 200, response.text
    body = response.json()
    with one_thread():
        nbest = [text for text, _ in offline["en-de"].translate_nbest(["apple river"], nbest=3)[0]]
    assert body["translatedText"] == nbest[0]
    assert body["alternatives"] == [t for t in dict.fromkeys(nbest[1:]) if t and t != nbest[0]][:2]
    listed = server.post({"q": ["apple", "river"], "source": "en", "target": "de", "alternatives": 1}).json()
    assert len(listed["alternatives"]) == 2 and all(isinstance(a, list) for a in listed["alternatives"])


def test_html_asked_for_alternatives_gets_an_empty_list_as_from_libretranslate(server: Server) -> None:
    # LibreTranslate's own web page posts this form (multipart) for text that looks like HTML.
    form = {"q": "<b>apple</b> river", "source": "auto", "target": "de", "format": "html"}
    form |= {"alternatives": "3", "api_key": ""}
    parts = {name: (None, value) for name, value in form.items()}
    response = httpx.post(server.url + "/translate", files=parts, timeout=60)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["translatedText"] == server.post({**form, "alternatives": 0}).json()["translatedText"]
    assert body["alternatives"] == []
    listed = server.post({**form, "q": ["apple", "<i>river</i>"], "alternatives": 2}).json()
    assert listed["alternatives"] == [[], []]


def test_libretranslatepy_detects_the_served_source_languages(server: Server) -> None:
    from libretranslatepy import LibreTranslateAPI

    client = LibreTranslateAPI(server.url)
    german = client.detect("Ein Mann fährt mit dem Fahrrad die Straße entlang.")
    english = client.detect("A man rides a bike down the street.")
    assert german[0]["language"] == "de" and german[0]["confidence"] > 50
    assert english[0]["language"] == "en"
    assert sorted(d["language"] for d in german) == ["de", "en"]


def test_frontend_settings_describe_the_server(server: Server) -> None:
    settings = httpx.get(server.url + "/frontend/settings", timeout=30).json()
    assert settings["charLimit"] == 2000 and settings["keyRequired"] is False
    assert settings["language"]["source"]["code"] == "auto"
    assert settings["language"]["target"]["code"] in ("de", "en")


def test_nmts_own_route_gives_word_alignments_in_pharaoh_format(server: Server) -> None:
    response = server.post(
        {"text": ["apple river stone", "green"], "source": "de", "target": "en", "alignments": True}
    )
    assert response.status_code == 200, response.text
    assert response.json()["alignments"] == ["0-2 1-1 2-0", "0-0"]


@pytest.mark.parametrize(
    "html",
    [
        "<p>apple <b>river</p> stone</i> &",
        "<<p>>apple",
        "<table><td>apple<tr>river",
        "apple <!-- river --> stone",
        "<p",
        "<p>\x0bapple</p><p>\x0c</p>",
        '<p title="\x01">apple</p>',
    ],
)
def test_malformed_html_is_repaired_never_a_server_error(server: Server, html: str) -> None:
    response = server.post({"q": html, "source": "en", "target": "de", "format": "html"})
    assert response.status_code == 200, response.text
    answer = response.json()["translatedText"]
    root = lxml.html.fragment_fromstring(answer or "<p></p>", create_parent="div")
    # Only real elements: "<p" once came back as <p< body></p<>.
    assert all(re.fullmatch(r"[a-z][a-z0-9]*", e.tag) for e in root.iter() if isinstance(e.tag, str)), answer


def test_a_document_of_ten_thousand_tags_is_bounded_by_the_character_limit(server: Server) -> None:
    response = server.post({"q": "<b>a</b>" * 10_000, "source": "en", "target": "de", "format": "html"})
    assert response.status_code == 400
    assert "at most 2000" in response.json()["error"]


def test_a_nul_reads_as_a_space_on_both_routes_as_in_the_python_api(
    server: Server, offline: dict[str, Translator]
) -> None:
    texts = ["apple\x00river stone", "green.\x00Music stone."]
    with one_thread():
        expected = offline["en-de"].translate(texts)
        assert expected == offline["en-de"].translate([text.replace("\x00", " ") for text in texts])
    own = server.post({"text": texts, "source": "en", "target": "de"})
    assert own.status_code == 200, own.text
    assert own.json()["translations"] == expected
    libretranslate = server.post({"q": texts, "source": "en", "target": "de"})
    assert libretranslate.status_code == 200, libretranslate.text
    assert libretranslate.json()["translatedText"] == expected
