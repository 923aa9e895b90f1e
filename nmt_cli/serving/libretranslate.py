"""LibreTranslate's HTTP API, which self-hosted translation clients speak (Mastodon,
wagtail-localize, browser extensions, `libretranslatepy`, `deep-translator`), on `nmt serve`.

    POST /translate  q (a string or a list of strings), source (a language code, or "auto": the
                     served source language the text is in), target, format ("text", or "html":
                     each q an HTML fragment, its markup kept), api_key, alternatives (N more
                     translations of each text; an empty list for html, as LibreTranslate
                     answers), and nmt's glossary and constraints (as its own route takes them;
                     constraints in q's shape): as a JSON object, as a form (urlencoded or
                     multipart), or in the query string, as LibreTranslate takes them
                     -> {"translatedText": "..."} (a list for a list), with "alternatives" when
                     asked and "detectedLanguage" when the source was "auto" (a list for a list)
    POST /detect     q, api_key -> [{"confidence": 97.5, "language": "en"}, ...], likeliest first
    GET  /languages  [{"code": "en", "name": "English", "targets": ["de"]}, ...]
    GET  /frontend/settings  what LibreTranslate's web front end and clients read of a server

Errors are LibreTranslate's: {"error": "..."} with 400 for a bad request, 403 for a missing or
unknown key, 503 when busy. This module only reads requests; the app routes and decodes them.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nmt_cli.serving.refusals import Refused

FIELDS = ("q", "source", "target", "format", "api_key", "alternatives")
FORMATS = ("text", "html")  # what format may be, on nmt's own route too
EXTENSIONS = ("glossary", "constraints", "ordered_constraints")  # nmt's, as its own route takes them
MAX_ALTERNATIVES = 10

# Names for /languages (LibreTranslate's clients show them); other codes are named by their code.
NAMES = {
    "ar": "Arabic", "bg": "Bulgarian", "ca": "Catalan", "cs": "Czech", "da": "Danish", "de": "German",
    "el": "Greek", "en": "English", "es": "Spanish", "et": "Estonian", "eu": "Basque", "fa": "Persian",
    "fi": "Finnish", "fr": "French", "ga": "Irish", "he": "Hebrew", "hi": "Hindi", "hu": "Hungarian",
    "id": "Indonesian", "it": "Italian", "ja": "Japanese", "ko": "Korean", "lt": "Lithuanian",
    "lv": "Latvian", "nb": "Norwegian", "nl": "Dutch", "pl": "Polish", "pt": "Portuguese",
    "ro": "Romanian", "ru": "Russian", "sk": "Slovak", "sl": "Slovenian", "sv": "Swedish", "th": "Thai",
    "tr": "Turkish", "uk": "Ukrainian", "vi": "Vietnamese", "zh": "Chinese",
}  # fmt: skip


@dataclass(frozen=True)
class Request:
    texts: list[str]
    single: bool
    """q was one string (answered with one string), not a list."""
    source: str
    target: str
    api_key: str | None
    html: bool = False
    alternatives: int = 0


def query_fields(pairs: list[tuple[str, str]]) -> dict[str, Any]:
    """The fields of a query string's (name, value) pairs, as of a form: a repeated q is a list of
    texts (q=a&q=b), other fields take their last value."""
    grouped: dict[str, list[str]] = {}
    for name, value in pairs:
        grouped.setdefault(name, []).append(value)
    return _one_or_list(grouped)


def _one_or_list(grouped: dict[str, list[str]]) -> dict[str, Any]:
    return {k: v if k == "q" and len(v) > 1 else v[-1] for k, v in grouped.items()}


def fields(body: bytes, content_type: str, query: Mapping[str, Any]) -> dict[str, Any]:
    """The request's fields from its query string, then its body (JSON or a form), the body
    winning, as LibreTranslate reads them."""
    found: dict[str, Any] = dict(query)
    if not body.strip():
        return found
    if content_type.split(";")[0].strip().lower() == "application/json":
        try:
            data = json.loads(body)
        except (ValueError, RecursionError):
            raise Refused(400, "Invalid request: the body is not valid JSON") from None
        if not isinstance(data, dict):
            raise Refused(400, "Invalid request: the body must be a JSON object")
        return {**found, **data}
    try:
        form = urllib.parse.parse_qs(body.decode("utf-8"), keep_blank_values=True, strict_parsing=False)
    except UnicodeDecodeError:
        raise Refused(400, "Invalid request: the body is not valid UTF-8") from None
    return {**found, **_one_or_list(form)}


async def multipart_fields(scope: Any, body: bytes) -> dict[str, Any]:
    """The text fields of a multipart/form-data `body` (already read, within the size limit) by
    Starlette's parser, a repeated q as a list."""
    from starlette.requests import Request

    async def replay() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    try:
        form = await Request(scope, replay).form()
    except Exception:  # noqa: BLE001 - the parser's own errors: a malformed body
        raise Refused(400, "Invalid request: not a readable multipart/form-data body") from None
    texts = [(name, value) for name, value in form.multi_items() if isinstance(value, str)]
    return query_fields(texts)


def is_libretranslate(data: Mapping[str, Any]) -> bool:
    """A LibreTranslate request (q, or only its fields) rather than nmt's own ({"text": [...]})."""
    return "text" not in data and ("q" in data or (bool(data) and set(data) <= {*FIELDS, *EXTENSIONS}))


def parse(data: Mapping[str, Any], max_lines: int, max_chars: int) -> Request:
    """The texts, languages and key of a LibreTranslate request; Refused for anything else."""
    texts, single = _texts(data, max_lines, max_chars)
    source, target = data.get("source"), data.get("target")
    for name, value in (("source", source), ("target", target)):
        if not isinstance(value, str) or not value:
            raise Refused(400, f"Invalid request: missing {name} parameter")
    form = data.get("format", "text") or "text"
    if form not in FORMATS:
        raise Refused(400, f"Invalid request: format {form!r}: use text or html")
    alternatives = str(data.get("alternatives", 0) or 0)
    # ASCII digits only: isdigit() takes "²", which int() refuses; and int() refuses 5,000 digits.
    number = alternatives.isascii() and alternatives.isdecimal() and len(alternatives) <= 4
    if not number or int(alternatives) > MAX_ALTERNATIVES:
        raise Refused(
            400, f"Invalid request: alternatives {alternatives!r}: a number from 0 to {MAX_ALTERNATIVES}"
        )
    key = data.get("api_key")
    return Request(
        texts, single, str(source), str(target), key if isinstance(key, str) and key else None,
        html=form == "html", alternatives=int(alternatives),
    )  # fmt: skip


def detect_texts(data: Mapping[str, Any], max_lines: int, max_chars: int) -> list[str]:
    """The texts of a POST /detect; Refused for anything else."""
    return _texts(data, max_lines, max_chars)[0]


def _texts(data: Mapping[str, Any], max_lines: int, max_chars: int) -> tuple[list[str], bool]:
    """q's texts, and whether q was one string."""
    q = data.get("q")
    if q is None:
        raise Refused(400, "Invalid request: missing q parameter")
    single = isinstance(q, str)
    texts = [q] if single else q
    if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
        raise Refused(400, "Invalid request: q must be a string or a list of strings")
    if len(texts) > max_lines:
        raise Refused(400, f"Invalid request: q has {len(texts)} texts; at most {max_lines}")
    for i, text in enumerate(texts):
        if len(text) > max_chars:
            raise Refused(400, f"Invalid request: q[{i}] has {len(text)} characters; at most {max_chars}")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise Refused(400, f"Invalid request: q[{i}] is not valid Unicode") from None
    return texts, single


def answer(
    request: Request, hypotheses: list[list[tuple[str, float]]], detected: dict[str, Any] | None
) -> dict[str, Any]:
    """The response body, in the shape of the request's q: each text's best translation, its
    alternatives (the next best, as many as asked, distinct and not empty) where asked, and the
    source language chosen for "auto" ({"language", "confidence"})."""
    best = [hyps[0][0] for hyps in hypotheses]
    body: dict[str, Any] = {"translatedText": best[0] if request.single else best}
    if request.alternatives:
        others = [_alternatives(hyps, request.alternatives) for hyps in hypotheses]
        body["alternatives"] = others[0] if request.single else others
    if detected is not None:  # one for each text of a list, as LibreTranslate answers (Mastodon reads it so)
        body["detectedLanguage"] = detected if request.single else [detected] * len(best)
    return body


def _alternatives(hyps: list[tuple[str, float]], count: int) -> list[str]:
    """Up to `count` translations after the best, each different from those before it and not empty."""
    seen, found = {hyps[0][0]}, list[str]()
    for text, _ in hyps[1:]:
        if text and text not in seen and len(found) < count:
            seen.add(text)
            found.append(text)
    return found


def frontend_settings(pairs: list[tuple[str, str]], max_chars: int, keys: bool) -> dict[str, Any]:
    """GET /frontend/settings: the character limit, whether keys are used, and the languages a
    front end starts with (auto-detection into the first target served)."""
    target = pairs[0][1] if pairs else "en"
    return {
        "charLimit": max_chars, "frontendTimeout": 500, "apiKeys": keys, "keyRequired": keys,
        "suggestions": False, "filesTranslation": False, "supportedFilesFormat": [],
        "language": {"source": {"code": "auto", "name": "Auto Detect"},
                     "target": {"code": target, "name": NAMES.get(target, target)}},
    }  # fmt: skip


def languages(pairs: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """GET /languages: every language served, as a source, with the targets it has models into;
    a language that is only a target is listed with no targets."""
    codes = list(dict.fromkeys(code for pair in pairs for code in pair))
    return [
        {"code": code, "name": NAMES.get(code, code), "targets": [t for s, t in pairs if s == code]}
        for code in codes
    ]
