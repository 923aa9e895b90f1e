"""docs/serve.md's LibreTranslate clients, run as written against a server without --api-keys:
the key they pass is one such a server takes (deep-translator refuses an empty one itself)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from helpers import Pairs
from serve_helpers import Server, running_server

SERVE_DOC = Path(__file__).resolve().parents[2] / "docs" / "serve.md"


@pytest.fixture(scope="module")
def server(pairs: Pairs) -> Iterator[Server]:
    with running_server(pairs.en_de, "--workers", 1) as running:
        yield running


def clients_block() -> tuple[str, str]:
    """The Python block of the LibreTranslate clients, and the paragraph before it."""
    text = SERVE_DOC.read_text(encoding="utf-8")
    paragraph_then_block = r"([^\n]+(?:\n[^\n]+)*)\n\n```python\n((?:(?!```).)*LibreTranslator\(.*?)```"
    found = re.search(paragraph_then_block, text, re.DOTALL)
    assert found, "docs/serve.md shows deep-translator's LibreTranslator"
    return found.group(1), found.group(2)


def test_the_documented_clients_translate_against_a_server_without_keys(server: Server) -> None:
    said, block = clients_block()
    assert "without `--api-keys` takes any key" in " ".join(said.split())
    keys = re.findall(r'api_key="([^"]*)"', block)
    assert keys and all(keys), "each client passes a key: deep-translator refuses none or an empty one"
    code = block.replace("http://localhost:8080/", server.url + "/")
    results: list[object] = []
    lines = code.strip().splitlines()
    for i, line in enumerate(lines):  # the value of each translate call, as a session would show it
        if ".translate(" in line:
            lines[i] = f"results.append({line})"
    exec("\n".join(lines), {"results": results})  # noqa: S102 - the documentation's own code
    assert len(results) == 2 and all(isinstance(text, str) and text for text in results)


def test_the_documented_openapi_command_fetches_the_document(server: Server) -> None:
    """The OpenAPI section's curl line, its URL asked of a running server: an OpenAPI document
    of the routes it names."""
    text = SERVE_DOC.read_text(encoding="utf-8")
    section = text[text.index("## OpenAPI") :]
    found = re.search(r"curl -s (http://localhost:8080(/\S+))", section)
    assert found, "docs/serve.md's OpenAPI section shows a curl command"
    answer = httpx.get(server.url + found.group(2), timeout=30)
    assert answer.status_code == 200
    document = answer.json()
    assert document["openapi"].startswith("3.")
    assert {"/translate", "/languages", "/detect"} <= set(document["paths"])
