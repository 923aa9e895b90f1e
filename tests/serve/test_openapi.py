"""`nmt serve`'s OpenAPI document (GET /openapi.json, `serving.openapi`), against the app in process:
it is valid OpenAPI 3 (openapi-spec-validator) and open on a server with API keys; its bounds are
the server's own (a value at a bound is taken, one past it refused); real requests of each route
and their answers validate against it (openapi-core); and requests drawn from it by schemathesis
never get a 500, and get answers that it describes."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import requests
import schemathesis
import torch
from helpers import Pairs
from hypothesis import HealthCheck, given, settings
from hypothesis.strategies import SearchStrategy
from openapi_core import OpenAPI
from openapi_core.testing import MockRequest, MockResponse
from openapi_spec_validator import validate
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)
from serve_helpers import Server, serving_in_process

from nmt_cli.ranges import SETTINGS, Range
from nmt_cli.serving import libretranslate
from nmt_cli.serving.app import OPENAPI, ROUTES

KEY = "k3y-0f-the-openapi-tests"
MAX_LINES, MAX_CHARS = 4, 64
NMT = {"text": ["apple river"], "source": "en"}
EN_DE = {"source": "en", "target": "de"}
LT = {"q": "apple river", **EN_DE}
TWO = ["apple", "river"]


@pytest.fixture(scope="module")
def server(pairs: Pairs) -> Iterator[Server]:
    limits = ("--max-lines", MAX_LINES, "--max-input-chars", MAX_CHARS, "--max-queue", 16)
    with serving_in_process(pairs.en_de, "-m", pairs.de_en, "--workers", 1, *limits) as running:
        yield running


@pytest.fixture(scope="module")
def document(server: Server) -> dict[str, Any]:
    response = server.get("/openapi.json")
    assert response.status_code == 200 and response.headers["content-type"] == "application/json"
    return response.json()


def schema_of(document: dict[str, Any], name: str) -> dict[str, Any]:
    return document["components"]["schemas"][name]


def test_the_document_is_open_on_a_server_with_keys(pairs: Pairs, tmp_path: Path) -> None:
    keys = tmp_path / "keys.txt"
    keys.write_text(KEY + "\n", encoding="utf-8")
    with serving_in_process(pairs.en_de, "--workers", 1, "--api-keys", keys) as keyed:
        assert keyed.get("/info").status_code == 403
        response = keyed.get("/openapi.json")
        assert response.status_code == 200
        assert keyed.request("HEAD", "/openapi.json").status_code == 200
        document = response.json()
        validate(document)
        secured = {
            (path, method)
            for path, ops in document["paths"].items()
            for method, op in ops.items()
            if "security" in op
        }
        assert secured == {("/translate", "post"), ("/detect", "post"), ("/info", "get"), ("/metrics", "get")}
        for path, method in secured:  # what the document says is what the server does
            assert keyed.request(method.upper(), path, json=LT).status_code == 403
        api = OpenAPI.from_dict(document)
        answer = keyed.request(
            "POST", "/translate", json={"text": ["apple"]}, headers={"Authorization": f"Bearer {KEY}"}
        )
        assert answer.status_code == 200
        api.validate_request(as_request(answer.request))
        api.validate_response(as_request(answer.request), as_response(answer))
        refused = keyed.get("/metrics")
        api.validate_response(as_request(refused.request), as_response(refused))


def test_the_document_is_openapi_3_without_docs_pages(server: Server, document: dict[str, Any]) -> None:
    validate(document)
    assert document["openapi"].startswith("3.") and "securitySchemes" not in document["components"]
    assert set(document["paths"]) == set(ROUTES) - {OPENAPI}  # every route but the document's own
    for page in ("/docs", "/redoc"):
        assert server.get(page).status_code == 404


def test_bounds_are_those_the_server_checks(server: Server, document: dict[str, Any]) -> None:
    fields = schema_of(document, "TranslateRequest")["properties"]
    assert fields["text"]["maxItems"] == MAX_LINES and fields["text"]["items"]["maxLength"] == MAX_CHARS
    assert fields["format"]["enum"] == list(libretranslate.FORMATS)
    assert fields["source"]["anyOf"][0]["enum"] == ["en", "de", "auto"]
    for name, allowed in SETTINGS.items():
        if name in fields and isinstance(allowed, Range):
            bounds = fields[name]["anyOf"][0]
            assert bounds["exclusiveMinimum" if allowed.above else "minimum"] == allowed.low
            assert bounds.get("exclusiveMaximum" if allowed.below else "maximum", math.inf) == allowed.high
    beam = fields["beam"]["anyOf"][0]["maximum"]
    ok = server.post({"text": ["apple"], "source": "en", "beam": beam, "nbest": 1})
    past = server.post({"text": ["apple"], "source": "en", "beam": beam + 1})
    assert ok.status_code == 200 and past.status_code == 422 and past.json()["error"].startswith("beam:")
    q = schema_of(document, "LibreTranslateRequest")["properties"]["q"]["anyOf"]
    assert q[0]["maxLength"] == MAX_CHARS and q[1]["maxItems"] == MAX_LINES
    alternatives = schema_of(document, "LibreTranslateRequest")["properties"]["alternatives"]["anyOf"][0]
    assert alternatives["maximum"] == libretranslate.MAX_ALTERNATIVES
    too_long = server.post({**LT, "q": "a" * (MAX_CHARS + 1)})
    assert too_long.status_code == 400


# (method, path, httpx keywords, the status, whether the request is one the document describes)
REAL: list[tuple[str, str, dict[str, Any], int, bool]] = [
    ("POST", "/translate", {"json": {**NMT, "target": "de"}}, 200, True),
    ("POST", "/translate", {"json": {**NMT, "text": ["apple", "river"], "nbest": 2, "beam": 3}}, 200, True),
    ("POST", "/translate", {"json": {**NMT, "alignments": True}}, 200, True),
    ("POST", "/translate", {"json": {**NMT, "text": ["<b>apple</b> river"], "format": "html"}}, 200, True),
    ("POST", "/translate", {"json": {**NMT, "sampling": "topp", "topp": 0.5, "seed": 3}}, 200, True),
    ("POST", "/translate", {"json": {**NMT, "glossary": {"apple": "river"}}}, 200, True),
    ("POST", "/translate", {"json": LT}, 200, True),
    ("POST", "/translate", {"json": {**LT, "q": TWO, "source": "auto", "alternatives": 2}}, 200, True),
    ("POST", "/translate", {"data": {**LT, "q": TWO}}, 200, True),
    ("POST", "/translate", {"files": {"q": (None, "apple")}, "data": EN_DE}, 200, True),
    ("POST", "/translate", {"json": {**NMT, "beam": 0}}, 422, False),
    ("POST", "/translate", {"json": {"q": "apple", "target": "de"}}, 400, False),
    ("POST", "/translate", {"json": {**NMT, "text": ["apple"] * (MAX_LINES + 1)}}, 422, False),
    ("POST", "/detect", {"json": {"q": "apple river"}}, 200, True),
    ("POST", "/detect", {"data": {"q": "apple river"}}, 200, True),
    ("GET", "/languages", {}, 200, True),
    ("GET", "/frontend/settings", {}, 200, True),
    ("GET", "/health", {}, 200, True),
    ("GET", "/info", {}, 200, True),
    ("GET", "/metrics", {}, 200, True),
    ("GET", "/", {}, 200, True),
]  # fmt: skip


def as_request(request: httpx.Request) -> MockRequest:
    content_type = request.headers.get("content-type", "application/json")
    return MockRequest(
        "http://testserver", request.method, request.url.path, args=dict(request.url.params),
        headers=dict(request.headers), data=request.read(), content_type=content_type,
    )  # fmt: skip


def as_response(response: httpx.Response) -> MockResponse:
    content_type = response.headers.get("content-type", "").split(";")[0]
    return MockResponse(response.content, response.status_code, dict(response.headers), content_type)


@pytest.mark.parametrize(("method", "path", "sent", "status", "described"), REAL)
def test_real_requests_and_answers_validate(
    server: Server, document: dict[str, Any], method: str, path: str, sent: dict, status: int, described: bool
) -> None:
    api = OpenAPI.from_dict(document)
    response = server.request(method, path, **sent)
    assert response.status_code == status, response.text
    request = as_request(response.request)
    if described:
        api.validate_request(request)
    api.validate_response(request, as_response(response))


def send(server: Server, case: schemathesis.Case) -> httpx.Response:
    """The case as schemathesis would send it with `requests` (its serialization: JSON, form,
    multipart), sent through the in-process client."""
    sent = requests.Request(**case.as_transport_kwargs(base_url=server.url)).prepare()
    url = httpx.URL(sent.url or "")
    headers = {name: value for name, value in sent.headers.items() if name.lower() != "content-length"}
    body = sent.body.encode("utf-8") if isinstance(sent.body, str) else sent.body or b""
    path = url.raw_path.decode("ascii")
    return server.request(sent.method or "GET", path, headers=headers, content=body)


@contextlib.contextmanager
def denormals_kept() -> Iterator[None]:
    """Hypothesis draws floats down to the subnormals, which it refuses to do in a process that
    flushes them to zero, as `nmt train` (run in this process by the fixtures) leaves it."""
    flushing = float(torch.tensor([1e-30]) * torch.tensor([1e-10])) == 0.0
    torch.set_flush_denormal(False)
    try:
        yield
    finally:
        torch.set_flush_denormal(flushing)


def test_requests_drawn_from_the_document_never_get_a_500(server: Server, document: dict[str, Any]) -> None:
    schema = schemathesis.openapi.from_dict(document)
    conformance = (status_code_conformance, content_type_conformance, response_schema_conformance)
    # A request the document allows gets an answer it describes; any other, at least no 500.
    send_drawn(
        server,
        schema.as_strategy(generation_mode=GenerationMode.POSITIVE),
        60,
        (not_a_server_error, *conformance),
    )
    send_drawn(server, schema.as_strategy(generation_mode=GenerationMode.NEGATIVE), 30, (not_a_server_error,))


def send_drawn(
    server: Server, cases: SearchStrategy[schemathesis.Case], examples: int, checks: tuple
) -> None:
    """`examples` cases drawn from `cases` (the same each run), each answer checked by `checks`."""

    @settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=cases)
    def call(case: schemathesis.Case) -> None:
        case.validate_response(send(server, case), checks=checks)

    with denormals_kept():
        call()
