"""What `nmt serve`'s access log shows of a request: never an API key. A server without keys
leaves out a query string whose names look like a key, however a client spells it; a server
with keys (`--api-keys`) logs no query string at all, nor a path that holds one of its keys.
Read from what the real server wrote, after each request was answered."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest
from helpers import Pairs
from serve_helpers import Server, running_server

from nmt_cli.serving.server import PATH_OF_A_KEY, QUERY_NOT_LOGGED, QUERY_OF_KEYS

KEY = "the-servers-0wn-key"
# How clients have spelt the key's name ("…" is the secret); only api_key itself, once decoded,
# is a key to the server, but any of them may carry one.
SPELLINGS = [
    "API_KEY=…", "Api_key=…", "Api_Key=…", "apikey=…", "api-key=…", "api+key=…", "%20api_key=…",
    "api_key[]=…", "api_key%00=…", "a=1;api_key=…", "api%5Fkey%3D…", "api%255Fkey=…", "api_key=…",
]  # fmt: skip


@pytest.fixture(scope="module")
def keyless(pairs: Pairs) -> Iterator[Server]:
    with running_server(pairs.en_de, "--workers", 1) as running:
        yield running


@pytest.fixture(scope="module")
def keyed(pairs: Pairs, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    keys = tmp_path_factory.mktemp("keys") / "keys.txt"
    keys.write_text(f"{KEY}\n", encoding="utf-8")
    with running_server(pairs.en_de, "--workers", 1, "--api-keys", keys) as running:
        yield running


def logged(server: Server, line: str, times: int) -> str:
    """The log once `line` is in it `times` times (uvicorn writes a line after its answer)."""
    deadline = time.monotonic() + 30
    while server.text().count(line) < times:
        assert time.monotonic() < deadline, f"{times} x {line!r} never logged:\n{server.text()[-3000:]}"
        time.sleep(0.05)
    return server.text()


def send_each_spelling(server: Server, secrets: list[str]) -> None:
    for spelling, secret in zip(SPELLINGS, secrets, strict=True):
        query = "q=apple&source=en&target=de&" + spelling.replace("…", secret)
        httpx.post(f"{server.url}/translate?{query}", timeout=60)  # as deep-translator sends it


def test_a_keyless_server_logs_no_query_that_names_a_key_however_it_is_spelt(keyless: Server) -> None:
    secrets = [f"secret-{i}-of-the-client" for i in range(len(SPELLINGS))]
    before = keyless.text().count(QUERY_OF_KEYS)
    send_each_spelling(keyless, secrets)
    text = logged(keyless, f"POST /translate{QUERY_OF_KEYS}", before + len(SPELLINGS))
    assert not [secret for secret in secrets if secret in text]
    # A query of no key is still logged as sent.
    assert httpx.get(keyless.url + "/languages?probe=shown", timeout=60).status_code == 200
    logged(keyless, "GET /languages?probe=shown", 1)


def test_a_server_with_keys_logs_no_query_string_at_all(keyed: Server) -> None:
    secrets = [f"secret-{i}-sent-to-a-keyed-server" for i in range(len(SPELLINGS))]
    before = keyed.text().count(f"POST /translate{QUERY_NOT_LOGGED}")
    send_each_spelling(keyed, [KEY, *secrets[1:]])  # the real key among them
    response = httpx.get(keyed.url + "/languages?probe=hidden-too", timeout=60)
    assert response.status_code == 200
    logged(keyed, f"GET /languages{QUERY_NOT_LOGGED}", 1)
    text = logged(keyed, f"POST /translate{QUERY_NOT_LOGGED}", before + len(SPELLINGS))
    assert KEY not in text and "hidden-too" not in text
    assert not [secret for secret in secrets if secret in text]


def test_a_key_sent_as_a_path_is_not_logged(keyed: Server) -> None:
    for path in (f"/{KEY}", f"/translate/{KEY}", f"/v1/{KEY}/x"):
        response = httpx.get(keyed.url + path, timeout=60)
        assert response.status_code == 404
    text = logged(keyed, f"GET {PATH_OF_A_KEY}", 3)
    assert KEY not in text
    assert httpx.get(keyed.url + "/no-key-here", timeout=60).status_code == 404
    logged(keyed, "GET /no-key-here", 1)
