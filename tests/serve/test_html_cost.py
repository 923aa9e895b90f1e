"""HTML costs `nmt serve` in proportion to its tags, and that work never holds the event loop: a
request past --max-html-tags is refused at once (413, on both routes, before any parsing or
decoding), and while a heavy request under the bound is parsed and rebuilt, GET /health still
answers (the parsing runs on the text lane's thread, `serving.text_lane`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import httpx
import pytest
from helpers import Pairs
from serve_helpers import Server, running_server

from nmt_cli.serving.limits import ServeLimits

TAG_HEAVY = "<b><i>.</i></b>" * 133  # 532 tags in 1,995 characters: under --max-input-chars


@pytest.fixture(scope="module")
def server(pairs: Pairs) -> Iterator[Server]:
    with running_server(pairs.en_de, "--workers", 1) as running:
        yield running


@pytest.mark.parametrize("route", ["nmt", "libretranslate"])
def test_a_request_of_too_many_tags_is_refused_before_any_work(server: Server, route: str) -> None:
    texts = [TAG_HEAVY] * 256  # as many lines as a request may have: 136,192 tags
    body = {"text": texts, "format": "html"} if route == "nmt" else {"q": texts, "format": "html"}
    before = server.stats()["requests"]
    response = server.post({**body, "source": "en", "target": "de"})
    assert response.status_code == 413
    field = "text" if route == "nmt" else "Invalid request: q"
    most = ServeLimits().max_html_tags
    assert response.json()["error"].startswith(
        f"{field}: 136,192 HTML tags (each < counts); at most {most:,}"
    )
    assert server.stats()["requests"] == before  # nothing was queued


def test_health_answers_while_heavy_html_is_parsed_and_rebuilt(server: Server) -> None:
    texts = [TAG_HEAVY] * 60  # 31,920 tags: under the bound, and seconds of work
    assert 60 * TAG_HEAVY.count("<") <= ServeLimits().max_html_tags
    answered: list[httpx.Response] = []
    heavy = threading.Thread(
        target=lambda: answered.append(server.post({"text": texts, "format": "html"})), daemon=True
    )
    start = time.monotonic()
    heavy.start()
    waits = []
    with httpx.Client(base_url=server.url, timeout=60) as client:
        while heavy.is_alive():
            sent = time.monotonic()
            assert client.get("/health").status_code == 200
            waits.append(time.monotonic() - sent)
    took = time.monotonic() - start
    assert answered[0].status_code == 200, answered[0].text
    assert len(answered[0].json()["translations"]) == 60
    # On the event loop, parsing and rebuilding each held /health for 40% of the request or more:
    # two long waits. One hiccup of a busy machine is let pass.
    assert len(waits) >= 10 and sorted(waits)[-2] < took / 4, (took, sorted(waits)[-3:])
