"""The OpenAPI document of `nmt serve` (GET /openapi.json): nmt's POST /translate, LibreTranslate's
routes and the server's status, with their request and answer shapes, for client generators and
API gateways. No page comes with it (Swagger UI and ReDoc load scripts from elsewhere).

The routes read their bodies by hand (`serving.requests`, `serving.libretranslate`), so FastAPI
cannot see their shapes: they are pydantic models here, whose bounds come from what checks the
requests (`ranges.SETTINGS`, the server's `ServeLimits` and language pairs, the fields of
`requests` and `libretranslate`), never written twice. The paths are the app's own routes, each
of which needs its entry in `operations`: a route added without one fails the app's start."""

import dataclasses
import math
import warnings
from collections.abc import Iterable, Mapping
from typing import Annotated, Any, Literal

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel, ConfigDict, Field, create_model
from pydantic.json_schema import models_json_schema

from nmt_cli.ranges import SETTINGS, Allowed, Flag, Range
from nmt_cli.serving import libretranslate
from nmt_cli.serving.batcher import BatchStats
from nmt_cli.serving.limits import ServeLimits
from nmt_cli.serving.requests import FIELDS
from nmt_cli.serving.service import Service

DETECT_FIELDS = ("q", "api_key")
FORMS = ("application/x-www-form-urlencoded", "multipart/form-data")
SECURITY_SCHEMES = {
    "bearer": {"type": "http", "scheme": "bearer", "description": "Authorization: Bearer KEY"},
    "api_key": {"type": "apiKey", "in": "query", "name": "api_key", "description": "or the body's api_key"},
}
DESCRIPTION = (
    "nmt's own POST /translate and LibreTranslate's API, served by `nmt serve`. Every refusal is "
    '`{"error": "..."}` naming the field. With --api-keys, /translate, /detect, /info and /metrics '
    "need a key: `Authorization: Bearer KEY`, or `api_key` in the body or the query string."
)


def bounded(allowed: Allowed) -> Any:
    """The type of the values `allowed` takes (an entry of a `ranges` table), bounds and all."""
    if isinstance(allowed, Flag):
        return bool
    if isinstance(allowed, Range):
        bounds: dict[str, Any] = {"gt" if allowed.above else "ge": allowed.low}
        if allowed.high != math.inf:
            bounds["lt" if allowed.below else "le"] = allowed.high
        return Annotated[int if allowed.kind is int else float, Field(**bounds)]
    return Literal[allowed]  # a tuple of the strings allowed


def language(codes: Iterable[str], *more: str) -> Any:
    """A language code among `codes` (or `more`); any string where no pair records its languages
    (then the only model translates whatever is named)."""
    choices = tuple(dict.fromkeys(codes))
    return Literal[(*choices, *more)] if choices else str


Glossary = dict[str, str] | list[Annotated[list[str], Field(min_length=2, max_length=2)]]
"""An object of source term to target term, or a list of [source term, target term] pairs."""


def _model(name: str, doc: str, fields: Mapping[str, tuple[Any, Any]]) -> type[BaseModel]:
    """A model of these fields and no other (nmt's route refuses another; LibreTranslate's would
    ignore it, but no client of the document needs to send one)."""
    config = ConfigDict(extra="forbid")
    model: type[BaseModel] = create_model(name, __config__=config, __doc__=doc, **fields)  # type: ignore[call-overload]
    return model


def nmt_request(limits: ServeLimits, pairs: list[tuple[str, str]]) -> type[BaseModel]:
    """nmt's own POST /translate body, its fields in the order of `requests.FIELDS`."""
    line = Annotated[str, Field(max_length=limits.max_input_chars)]
    flags = {"split_sentences": True, "alignments": False, "ordered_constraints": False}
    fields: dict[str, tuple[Any, Any]] = {
        "text": (Annotated[list[line], Field(min_length=1, max_length=limits.max_lines)], ...),
        "source": (language((s for s, _ in pairs), "auto") | None, None),
        "target": (language(t for _, t in pairs) | None, None),
        "api_key": (str | None, None),
        "format": (bounded(libretranslate.FORMATS), "text"),
        "constraints": (list[list[str]] | None, None),
        "glossary": (Glossary | None, None),
        **{name: (bounded(SETTINGS[name]), default) for name, default in flags.items()},
    }
    # The decode settings: null (or left out) keeps the model's own.
    for name in FIELDS:
        if name not in fields:
            fields[name] = (bounded(SETTINGS[name]) | None, None)
    doc = "nmt's request: its lines, the language pair, and decode settings as `nmt translate` takes them."
    return _model("TranslateRequest", doc, {name: fields[name] for name in FIELDS})


def libretranslate_requests(limits: ServeLimits, pairs: list[tuple[str, str]]) -> list[type[BaseModel]]:
    """LibreTranslate's POST /translate and POST /detect, as JSON and as a form."""
    text = Annotated[str, Field(max_length=limits.max_input_chars)]
    texts = Annotated[list[text], Field(max_length=limits.max_lines)]
    # A form's values are strings, never null, and a q of no texts is no q: q=a&q=b is a list.
    form: dict[str, tuple[Any, Any]] = {
        "q": (text | Annotated[list[text], Field(min_length=1, max_length=limits.max_lines)], ...),
        "source": (language((s for s, _ in pairs), "auto"), ...),
        "target": (language(t for _, t in pairs), ...),
        "format": (bounded(libretranslate.FORMATS), "text"),
        "api_key": (str, ""),
        "alternatives": (Annotated[int, Field(ge=0, le=libretranslate.MAX_ALTERNATIVES)], 0),
    }
    json = {  # where JSON may give null for a field left out
        **{name: (kind | None, default) for name, (kind, default) in form.items() if default != ...},
        "q": (text | texts, ...),
        "source": form["source"],
        "target": form["target"],
        # nmt's, as its own route takes them; constraints in q's shape
        "glossary": (Glossary | None, None),
        "constraints": (list[str] | list[list[str]] | None, None),
        "ordered_constraints": (bool, False),
    }
    doc = "LibreTranslate's request, with nmt's glossary, constraints (in q's shape) and ordered_constraints."
    return [
        _model(
            "LibreTranslateRequest",
            doc,
            {name: json[name] for name in (*libretranslate.FIELDS, *libretranslate.EXTENSIONS)},
        ),
        _model(
            "LibreTranslateForm",
            "LibreTranslate's request as a form.",
            {name: form[name] for name in libretranslate.FIELDS},
        ),
        _model(
            "DetectRequest",
            "The texts whose language is asked.",
            {name: json[name] for name in DETECT_FIELDS},
        ),
        _model(
            "DetectForm",
            "The texts whose language is asked, as a form.",
            {name: form[name] for name in DETECT_FIELDS},
        ),
    ]


# The answers


class Hypothesis(BaseModel):
    text: str
    score: float | None = Field(description="null where not finite")


class Translations(BaseModel):
    """nmt's answer: one translation a line, or with nbest, the best translations of each line."""

    translations: list[str] | list[list[Hypothesis]]
    alignments: list[str] = Field(default_factory=list, description="with alignments: Pharaoh's i-j pairs")


class Detected(BaseModel):
    confidence: float
    language: str


class LibreTranslation(BaseModel):
    """LibreTranslate's answer, in the shape of q: one string for a string, a list for a list."""

    translatedText: str | list[str]
    alternatives: list[str] | list[list[str]] = Field(default_factory=list, description="when asked")
    detectedLanguage: Detected | list[Detected] | None = Field(None, description='with source "auto"')


class Language(BaseModel):
    code: str
    name: str
    targets: list[str]


class Named(BaseModel):
    code: str
    name: str


class FrontendLanguages(BaseModel):
    source: Named
    target: Named


class FrontendSettings(BaseModel):
    charLimit: int
    frontendTimeout: int
    apiKeys: bool
    keyRequired: bool
    suggestions: bool
    filesTranslation: bool
    supportedFilesFormat: list[str]
    language: FrontendLanguages


class Refusal(BaseModel):
    error: str


Health = create_model(
    "Health",
    __doc__="The counters of every pair, summed.",
    status=(Literal["ok"], ...),
    queued_lines=(int, ...),
    truncated=(int, ...),
    **{f.name: (int, ...) for f in dataclasses.fields(BatchStats)},  # type: ignore[call-overload]
)
ANSWERS: list[type[BaseModel]] = [
    Translations, LibreTranslation, Detected, Language, FrontendSettings, Refusal, Health,
]  # fmt: skip


# The document


def document(app: FastAPI, service: Service) -> dict[str, Any]:
    """The OpenAPI document of `app`'s routes as `service` serves them: its limits, its language
    pairs, and with API keys, which routes need one. FastAPI lists the routes (KeyError for one
    that `operations` does not describe); their bodies and answers are described here."""
    limits, pairs, keys = service.limits, service.pairs(), service.keys is not None
    models = [nmt_request(limits, pairs), *libretranslate_requests(limits, pairs), *ANSWERS]
    _, schemas = models_json_schema([(m, "validation") for m in models], ref_template=SCHEMA)
    with warnings.catch_warnings():
        # A route of GET and HEAD is one operation id twice for FastAPI; HEAD is left out below.
        warnings.filterwarnings("ignore", message="Duplicate Operation ID")
        frame = get_openapi(title=app.title, version=app.version, description=DESCRIPTION, routes=app.routes)
    table, paths = operations(), dict[str, dict[str, Any]]()
    for path, inferred in frame["paths"].items():
        for method in [m for m in inferred if m != "head"]:  # HEAD answers wherever GET does
            operation = table[method.upper(), path]
            if keys and (method.upper(), path) in KEYED:
                responses = {**operation["responses"], **refusals(403)}
                operation = {
                    **operation,
                    "security": [{"bearer": []}, {"api_key": []}],
                    "responses": responses,
                }
            paths.setdefault(path, {})[method] = operation
    components = {"schemas": schemas["$defs"], **({"securitySchemes": SECURITY_SCHEMES} if keys else {})}
    return {**frame, "paths": paths, "components": components}


KEYED = {("POST", "/translate"), ("POST", "/detect"), ("GET", "/info"), ("GET", "/metrics")}
"""The operations that need a key on a server with --api-keys (`serving.routes` asks for it)."""


SCHEMA = "#/components/schemas/{model}"
WHY = {
    400: "Refused: not JSON, or a field of LibreTranslate's shape (its errors are 400)",
    403: "No valid API key",
    413: "More than the server takes: the body, the HTML tags, or the sentences of the texts",
    422: "Refused: a field of nmt's shape, named in the error",
    503: "The queue is full; retry after Retry-After seconds",
}


def ref(model: str) -> dict[str, str]:
    return {"$ref": SCHEMA.format(model=model)}


def json_of(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def text_of(media_type: str, description: str) -> dict[str, Any]:
    return {"description": description, "content": {media_type: {"schema": {"type": "string"}}}}


def refusals(*statuses: int) -> dict[str, Any]:
    answers = {str(status): json_of(ref("Refusal"), WHY[status]) for status in statuses}
    if "503" in answers:
        answers["503"]["headers"] = {"Retry-After": {"schema": {"type": "integer"}}}
    return answers


def operation(name: str, summary: str, answer: dict[str, Any], *statuses: int, **more: Any) -> dict[str, Any]:
    """An operation answering `answer` (200), or a refusal of one of `statuses`."""
    responses = {"200": answer, **refusals(*statuses)}
    return {"operationId": name, "summary": summary, "responses": responses, **more}


def body(json: dict[str, Any], form: str, fields: Iterable[str]) -> dict[str, Any]:
    """A body of JSON (`json`), or a form of the fields of the model named `form`."""
    # A multipart body's fields are text: a part that is a file is not read.
    text = {"encoding": {name: {"contentType": "text/plain"} for name in fields}}
    forms = {FORMS[0]: {"schema": ref(form)}, FORMS[1]: {"schema": ref(form), **text}}
    return {"required": True, "content": {"application/json": {"schema": json}, **forms}}


def array_of(model: str) -> dict[str, Any]:
    return {"type": "array", "items": ref(model)}


def operations() -> dict[tuple[str, str], dict[str, Any]]:
    """Each route's operation by (method, path): its body and its answers."""
    translate = body(
        {"anyOf": [ref("TranslateRequest"), ref("LibreTranslateRequest")]},
        "LibreTranslateForm",
        libretranslate.FIELDS,
    )
    translated = json_of({"anyOf": [ref("Translations"), ref("LibreTranslation")]}, "The translations")
    detected = json_of(array_of("Detected"), "The served source languages, likeliest first")
    return {
        ("POST", "/translate"): operation(
            "translate", "Translate: nmt's request, or LibreTranslate's (JSON or a form)", translated,
            400, 413, 422, 503, requestBody=translate,
        ),
        ("POST", "/detect"): operation(
            "detect", "LibreTranslate's language detection", detected, 400, 413, 422,
            requestBody=body(ref("DetectRequest"), "DetectForm", DETECT_FIELDS),
        ),
        ("GET", "/languages"): operation(
            "languages", "LibreTranslate's languages, each with its targets",
            json_of(array_of("Language"), "The languages served"),
        ),
        ("GET", "/frontend/settings"): operation(
            "frontendSettings", "What LibreTranslate's front end reads",
            json_of(ref("FrontendSettings"), "The settings"),
        ),
        ("GET", "/"): operation("page", "A page to try translations", text_of("text/html", "The page")),
        ("GET", "/health"): operation("health", "Up", json_of(ref("Health"), "The counters")),
        ("GET", "/info"): operation(
            "info", "What is served", json_of({"type": "object"}, "Models, languages, settings and limits"),
        ),
        ("GET", "/metrics"): operation("metrics", "Counters", text_of("text/plain", "In Prometheus' format")),
    }  # fmt: skip
