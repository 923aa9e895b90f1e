"""`nmt serve` with two language pairs (en-de: the copy task; de-en: the words reversed), spoken to
by LibreTranslate's own Python clients (`libretranslatepy`, `deep-translator`) and by nmt's own
request shape: each request is routed to the pair it names and answered as the Python API answers
with that pair's checkpoint; API keys are accepted and refused in both shapes and never logged;
/metrics parses with prometheus-client's own parser."""

from __future__ import annotations

import signal
import time
import urllib.error
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from helpers import Pairs, nmt, one_line_error, one_thread
from serve_helpers import Server, running_server

from nmt_cli import Translator

LINES = ["apple river stone", "green music", "paper tiger silver window"]
KEY = "k3y-0f-the-tests"

FORM = "application/x-www-form-urlencoded"


@pytest.fixture(scope="module")
def offline(pair_translators: dict[str, Translator]) -> dict[str, Translator]:
    return pair_translators


def expected(offline: dict[str, Translator], pair: str, lines: list[str]) -> list[str]:
    with one_thread():
        return offline[pair].translate(lines)


@pytest.fixture(scope="module")
def server(pairs: Pairs) -> Iterator[Server]:
    with running_server(pairs.en_de, "-m", pairs.de_en, "--workers", 1) as running:
        yield running


@pytest.fixture(scope="module")
def keyed(pairs: Pairs, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Path]]:
    keys = tmp_path_factory.mktemp("keys") / "keys.txt"
    keys.write_text(f"# who may translate\n{KEY}\n\nanother-key\n", encoding="utf-8")
    with running_server(pairs.en_de, "-m", pairs.de_en, "--workers", 1, "--api-keys", keys) as running:
        yield running, keys


def test_the_two_pairs_translate_differently(offline: dict[str, Translator]) -> None:
    # Otherwise a misrouted request could not be told from a routed one.
    assert expected(offline, "en-de", LINES) != expected(offline, "de-en", LINES)


def test_libretranslatepy_translates_through_each_pair(
    server: Server, offline: dict[str, Translator]
) -> None:
    from libretranslatepy import LibreTranslateAPI

    client = LibreTranslateAPI(server.url)
    for line in LINES:
        assert client.translate(line, "en", "de") == expected(offline, "en-de", [line])[0]
        assert client.translate(line, "de", "en") == expected(offline, "de-en", [line])[0]
    languages = {lang["code"]: lang for lang in client.languages()}
    assert languages["en"]["targets"] == ["de"] and languages["de"]["targets"] == ["en"]
    assert languages["en"]["name"] == "English"


def test_deep_translator_translates_through_each_pair(server: Server, offline: dict[str, Translator]) -> None:
    from deep_translator import LibreTranslator

    # deep-translator sends its fields in the query string of a POST with no body.
    to_german = LibreTranslator(source="en", target="de", api_key="any", custom_url=server.url + "/")
    to_english = LibreTranslator(source="de", target="en", api_key="any", custom_url=server.url + "/")
    assert to_german.translate(LINES[0]) == expected(offline, "en-de", LINES[:1])[0]
    assert to_english.translate_batch(LINES) == expected(offline, "de-en", LINES)


def test_a_list_q_and_an_auto_source(server: Server, offline: dict[str, Translator]) -> None:
    response = server.post({"q": LINES, "source": "auto", "target": "en"})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["translatedText"] == expected(offline, "de-en", LINES)
    # One detected language a text, as LibreTranslate answers a list and Mastodon reads it
    # (data.dig('detectedLanguage', index, 'language')); one object for one string.
    assert [found["language"] for found in body["detectedLanguage"]] == ["de"] * len(LINES)
    single = server.post({"q": LINES[0], "source": "auto", "target": "en"}).json()
    assert single["detectedLanguage"]["language"] == "de"


def test_q_repeated_in_the_query_string_is_a_list_as_in_a_form(
    server: Server, offline: dict[str, Translator]
) -> None:
    query = "&".join(f"q={urllib.parse.quote(line)}" for line in LINES[:2]) + "&source=en&target=de"
    by_query = httpx.post(f"{server.url}/translate?{query}")
    by_form = httpx.post(f"{server.url}/translate", content=query, headers={"content-type": FORM})
    for response in (by_query, by_form):
        assert response.status_code == 200, response.text
        assert response.json()["translatedText"] == expected(offline, "en-de", LINES[:2])


def test_a_multipart_form_is_read_as_libretranslate_reads_it(
    server: Server, offline: dict[str, Translator]
) -> None:
    fields = [
        ("q", (None, LINES[0])),
        ("q", (None, LINES[1])),
        ("source", (None, "en")),
        ("target", (None, "de")),
    ]
    response = httpx.post(server.url + "/translate", files=fields)
    assert response.request.headers["content-type"].startswith("multipart/form-data")
    assert response.status_code == 200, response.text
    assert response.json()["translatedText"] == expected(offline, "en-de", LINES[:2])
    single = httpx.post(server.url + "/translate", files=fields[1:])
    assert single.json()["translatedText"] == expected(offline, "en-de", LINES[1:2])[0]
    broken = httpx.post(
        server.url + "/translate",
        content=b"--x\r\nnot a part",
        headers={"content-type": "multipart/form-data; boundary=x"},
    )
    assert broken.status_code == 400 and "error" in broken.json()


def test_nmt_requests_name_their_pair_when_several_are_served(
    server: Server, offline: dict[str, Translator]
) -> None:
    response = server.post({"text": LINES, "source": "de", "target": "en", "beam": 2})
    assert response.status_code == 200, response.text
    with one_thread():
        assert response.json()["translations"] == offline["de-en"].translate(LINES, beam=2)
    unnamed = server.post({"text": LINES})
    assert unnamed.status_code == 422
    assert unnamed.json()["error"].startswith("source, target: several models fit (en-de, de-en)")


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ({"source": "en", "target": "de"}, "Invalid request: missing q parameter"),
        ({"q": "apple", "source": "en"}, "Invalid request: missing target parameter"),
        ({"q": "apple", "source": "en", "target": "fr"}, "source, target: no model translates en into fr"),
        ({"q": "apple", "source": "en", "target": "de", "format": "xml"}, "Invalid request: format 'xml'"),
        (
            {"q": "apple", "source": "en", "target": "de", "alternatives": 11},
            "Invalid request: alternatives '11'",
        ),
        (
            {"q": "apple", "source": "en", "target": "de", "alternatives": "\u00b2"},  # isdigit(), not int()
            "Invalid request: alternatives '\u00b2'",
        ),
        (
            {"q": "apple", "source": "en", "target": "de", "alternatives": "1" * 5000},  # past int()'s limit
            "Invalid request: alternatives '111",
        ),
        (
            {"q": ["apple", 3], "source": "en", "target": "de"},
            "Invalid request: q must be a string or a list",
        ),
    ],
)
def test_libretranslate_errors_are_400_with_its_error_shape(server: Server, body: dict, error: str) -> None:
    response = server.post(body)
    assert response.status_code == 400
    assert response.json()["error"].startswith(error)


def test_keys_are_needed_in_both_shapes(keyed: tuple[Server, Path], offline: dict[str, Translator]) -> None:
    from deep_translator import LibreTranslator
    from deep_translator.exceptions import AuthorizationException
    from libretranslatepy import LibreTranslateAPI

    server, _ = keyed
    with pytest.raises(urllib.error.HTTPError) as refused:
        LibreTranslateAPI(server.url).translate(LINES[0], "en", "de")
    assert refused.value.code == 403
    assert (
        LibreTranslateAPI(server.url, KEY).translate(LINES[0], "en", "de")
        == expected(offline, "en-de", LINES[:1])[0]
    )
    with pytest.raises(AuthorizationException):
        LibreTranslator(source="en", target="de", api_key="wrong", custom_url=server.url + "/").translate(
            "apple"
        )
    client = LibreTranslator(source="en", target="de", api_key=KEY, custom_url=server.url + "/")
    assert client.translate(LINES[1]) == expected(offline, "en-de", LINES[1:2])[0]

    native = {"text": LINES[:1], "source": "en", "target": "de"}
    assert server.post(native).status_code == 403
    assert server.post({**native, "api_key": "nope"}).status_code == 403
    assert server.post({**native, "api_key": KEY}).status_code == 200
    bearer = httpx.post(server.url + "/translate", json=native, headers={"Authorization": f"Bearer {KEY}"})
    assert bearer.status_code == 200
    assert bearer.json()["translations"] == expected(offline, "en-de", LINES[:1])
    for path in ("/info", "/metrics"):
        assert server.get(path).status_code == 403
        assert httpx.get(server.url + path, headers={"Authorization": f"Bearer {KEY}"}).status_code == 200
    assert server.get("/health").status_code == 200 and server.get("/languages").status_code == 200
    # deep-translator sent its key in the query string: a server with keys logs no query string.
    assert "?(query not logged)" in server.text()
    assert KEY not in server.text() and "wrong" not in server.text()


def test_a_client_without_a_key_learns_nothing_of_its_request_but_that(keyed: tuple[Server, Path]) -> None:
    server, _ = keyed
    for body in ({"text": 5}, {"text": ["x"] * 10_000}, {"source": "en"}, {"q": ["a", 3], "target": "xx"}):
        response = server.post(body)
        assert response.status_code == 403, (body, response.text)
    # With the key, the same requests get their 4xx naming the field.
    assert server.post({"text": 5, "api_key": KEY}).status_code == 422
    assert server.post({"source": "en", "api_key": KEY}).status_code == 400


def test_a_key_spelt_with_escapes_in_the_query_never_reaches_the_log(
    keyed: tuple[Server, Path], offline: dict[str, Translator]
) -> None:
    server, _ = keyed
    hidden = "POST /translate?(query not logged)"
    before = server.text().count(hidden)
    query = f"?q=apple&source=en&target=de&api%5Fkey={KEY}&other=1"
    response = httpx.post(server.url + "/translate" + query)
    assert response.status_code == 200, response.text  # the server decodes it to api_key
    assert response.json()["translatedText"] == expected(offline, "en-de", ["apple"])[0]
    deadline = time.monotonic() + 10
    while server.text().count(hidden) == before:  # the access log line is written after the answer
        assert time.monotonic() < deadline, f"no access log line hides the query:\n{server.text()}"
        time.sleep(0.05)
    assert KEY not in server.text() and "api%5Fkey" not in server.text()


def test_sighup_reloads_the_keys(keyed: tuple[Server, Path]) -> None:
    server, keys = keyed
    native = {"text": LINES[:1], "source": "en", "target": "de"}
    keys.write_text("a-new-key\n", encoding="utf-8")
    server.process.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 30
    while server.post({**native, "api_key": "a-new-key"}).status_code != 200:
        assert time.monotonic() < deadline, server.text()
        time.sleep(0.05)
    assert server.post({**native, "api_key": KEY}).status_code == 403
    # A file that cannot be read keeps the keys in use.
    kept = "keeping the 1 keys in use"
    before = server.text().count(kept)
    keys.unlink()
    server.process.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 30
    while server.text().count(kept) == before:  # the server logs that it read the file and kept the keys
        assert time.monotonic() < deadline, server.text()
        time.sleep(0.05)
    assert server.post({**native, "api_key": "a-new-key"}).status_code == 200
    assert server.process.poll() is None


def test_metrics_parse_with_prometheus_clients_parser(server: Server) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    before = _samples(server)
    for _ in range(3):
        assert server.post({"q": LINES, "source": "en", "target": "de"}).status_code == 200
    assert server.post({"q": "x", "source": "en", "target": "xx"}).status_code == 400
    assert server.post({"q": "apple"}, path="/detect").status_code == 200
    after = _samples(server)
    detect = ("nmt_requests_total", (("method", "POST"), ("route", "/detect"), ("status", "200")))
    assert after[detect] - before.get(detect, 0) == 1  # a route of its own, not "other"
    ok = ("nmt_requests_total", (("method", "POST"), ("route", "/translate"), ("status", "200")))
    assert after[ok] - before.get(ok, 0) == 3
    bad = ("nmt_requests_total", (("method", "POST"), ("route", "/translate"), ("status", "400")))
    assert after[bad] - before.get(bad, 0) == 1
    lines = ("nmt_lines_translated_total", (("pair", "en-de"),))
    assert after[lines] - before.get(lines, 0) == 3 * len(LINES)
    assert after[("nmt_queued_lines", (("pair", "de-en"),))] == 0
    assert after[("nmt_workers_alive", (("pair", "en-de"),))] == 1
    families = {f.name for f in text_string_to_metric_families(server.get("/metrics").text)}
    assert {"nmt_request_seconds", "nmt_batch_lines", "nmt_source_tokens_translated"} <= families


ORIGIN = {"Origin": "https://app.example"}


def test_pages_of_any_origin_may_call_libretranslates_routes_but_not_info(server: Server) -> None:
    # What a browser asks before it lets a page POST JSON to another origin, as LibreTranslate answers.
    asked = {
        **ORIGIN,
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type",
    }
    preflight = httpx.options(server.url + "/translate", headers=asked, timeout=30)
    assert preflight.status_code == 200, preflight.text
    assert preflight.headers["access-control-allow-origin"] == "*"
    assert "POST" in preflight.headers["access-control-allow-methods"]
    assert "content-type" in preflight.headers["access-control-allow-headers"].lower()
    body = {"q": LINES[0], "source": "en", "target": "de"}
    posted = httpx.post(server.url + "/translate", json=body, headers=ORIGIN, timeout=60)
    assert posted.status_code == 200 and posted.headers["access-control-allow-origin"] == "*"
    assert (
        httpx.get(server.url + "/languages", headers=ORIGIN, timeout=30).headers[
            "access-control-allow-origin"
        ]
        == "*"
    )
    info = httpx.get(server.url + "/info", headers=ORIGIN, timeout=30)
    assert info.status_code == 200 and "access-control-allow-origin" not in info.headers  # model paths


def test_preflights_and_odd_methods_are_counted_apart_from_translations(server: Server) -> None:
    asked = {**ORIGIN, "Access-Control-Request-Method": "POST"}
    before = _samples(server)
    assert httpx.options(server.url + "/translate", headers=asked, timeout=30).status_code == 200
    for method in ("BREW", "PROPFIND"):
        assert httpx.request(method, server.url + "/translate", timeout=30).status_code == 405
    after = _samples(server)

    def added(method: str, status: str) -> float:
        key = ("nmt_requests_total", (("method", method), ("route", "/translate"), ("status", status)))
        return after.get(key, 0) - before.get(key, 0)

    assert added("OPTIONS", "200") == 1 and added("POST", "200") == 0
    assert added("other", "405") == 2  # client-chosen methods share one series


def _samples(server: Server) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    from prometheus_client.parser import text_string_to_metric_families

    response = server.get("/metrics")
    assert response.status_code == 200
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def test_a_public_address_without_keys_is_refused(pairs: Pairs, capsys: pytest.CaptureFixture[str]) -> None:
    assert nmt("serve", "-m", pairs.en_de, "--host", "0.0.0.0", "--port", 0) == 2
    line = one_line_error(capsys)
    assert "--host 0.0.0.0: reachable beyond this machine" in line and "--allow-anonymous" in line


def test_checkpoints_are_grouped_by_their_language_pair(pairs: Pairs, tmp_path: Path) -> None:
    import dataclasses

    import torch

    from nmt_cli import checkpoint
    from nmt_cli.decoding.translator import load_translators
    from nmt_cli.errors import InputError

    cpu = torch.device("cpu")
    loaded = load_translators([pairs.en_de, pairs.de_en, pairs.en_de], cpu, "fp32")
    assert [(t.languages, paths) for t, paths in loaded] == [
        (("en", "de"), [pairs.en_de, pairs.en_de]),  # one pair twice: an ensemble of two
        (("de", "en"), [pairs.de_en]),
    ]
    assert len(loaded[0][0].ensemble.models) == 2
    # An older checkpoint that records no languages: alone it is served, beside others it is not.
    unnamed = tmp_path / "unnamed.pt"
    checkpoint.save(dataclasses.replace(checkpoint.load(pairs.en_de), languages=None), unnamed)
    assert [t.languages for t, _ in load_translators([unnamed], cpu, "fp32")] == [None]
    with pytest.raises(InputError, match="records no languages"):
        load_translators([pairs.en_de, unnamed], cpu, "fp32")
