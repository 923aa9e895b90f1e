"""nmt's own POST /translate request, read and checked before anything reaches a model: its
JSON body, its lines and its decode settings (by the same rules as `nmt translate`'s options);
and the language pair (`Served`: its translator and queue) a request is routed to. Anything
wrong is a `Refused` naming the field."""

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nmt_cli.data.glossary import Glossary
from nmt_cli.data.text import without_nul
from nmt_cli.decoding.settings import SAMPLING_FIELDS, DecodeSettings, Sampling, with_terms
from nmt_cli.errors import InputError, SettingError
from nmt_cli.serving.libretranslate import FORMATS
from nmt_cli.serving.limits import ServeLimits
from nmt_cli.serving.refusals import CONSTRAINTS_SHAPE, NMT, TERMS, Refused, Wording
from nmt_cli.user_settings import SEARCH_FIELDS, DecodeOverrides

if TYPE_CHECKING:
    from nmt_cli.decoding.texts import Result
    from nmt_cli.decoding.translator import Translator
    from nmt_cli.serving.batcher import Batcher

TEXT_FIELDS = ("format", "split_sentences", "alignments")
TERM_FIELDS = ("constraints", "glossary", "ordered_constraints")
FIELDS = (
    "text",
    "source",
    "target",
    "api_key",
    *SEARCH_FIELDS,
    "nbest",
    "sampling",
    *SAMPLING_FIELDS,
    *TEXT_FIELDS,
    *TERM_FIELDS,
)


@dataclass
class Served:
    """One language pair: its translator (an ensemble of its checkpoints), with a queue and
    decoding threads of its own, so that a busy pair does not hold up another."""

    translator: "Translator"
    paths: list[Path]
    batcher: "Batcher[Result]"

    @property
    def pair(self) -> tuple[str, str] | None:
        return self.translator.languages

    @property
    def name(self) -> str:
        return "-".join(self.pair) if self.pair else "model"


def json_object(body: bytes) -> dict[str, Any]:
    """The JSON object of a request body; Refused naming what is wrong otherwise."""
    try:
        data = json.loads(body)
    except json.JSONDecodeError as err:
        raise Refused(
            400, f"body: not valid JSON ({err.msg}, line {err.lineno} column {err.colno})"
        ) from None
    except UnicodeDecodeError as err:
        raise Refused(400, f"body: not valid UTF-8 (byte {err.start})") from None
    except RecursionError:
        raise Refused(400, "body: JSON nested too deeply") from None
    except ValueError:  # an integer of more digits than Python converts
        raise Refused(400, "body: a number with too many digits") from None
    if not isinstance(data, dict):
        raise Refused(422, 'body: must be a JSON object such as {"text": ["..."]}')
    return data


def parse_lines(data: Mapping[str, Any], limits: ServeLimits) -> list[str]:
    """The lines of nmt's own request shape, checked; Refused for anything else."""
    unknown = sorted(set(data) - set(FIELDS))
    if unknown:
        raise Refused(422, f"{unknown[0]}: unknown field; use {', '.join(FIELDS)}")
    text = data.get("text")
    if not isinstance(text, list) or not text or not all(isinstance(line, str) for line in text):
        raise Refused(422, "text: must be a non-empty list of strings")
    if len(text) > limits.max_lines:
        raise Refused(422, f"text: {len(text)} lines; at most {limits.max_lines} per request")
    for i, line in enumerate(text):
        if len(line) > limits.max_input_chars:
            raise Refused(422, f"text[{i}]: {len(line)} characters; at most {limits.max_input_chars}")
        try:
            line.encode("utf-8")
        except UnicodeEncodeError:  # JSON allows "\ud800", which no tokenizer can take
            raise Refused(422, f"text[{i}]: not valid Unicode (a lone surrogate)") from None
    for name in ("source", "target", "api_key"):
        if data.get(name) is not None and not isinstance(data[name], str):
            raise Refused(422, f"{name}: must be a string")
    return [without_nul(line) for line in text]  # before HTML is parsed and sentences are cut


@dataclass(frozen=True)
class TextOptions:
    """How a request's texts are read and answered: as plain text or HTML fragments, sentence by
    sentence or whole, with word alignments or without."""

    html: bool = False
    split: bool = True
    alignments: bool = False


def parse_text_options(data: Mapping[str, Any], nbest: int) -> TextOptions:
    """format ("text" or "html"), split_sentences and alignments of nmt's request shape."""
    form = data.get("format", "text")
    if form not in FORMATS:
        raise Refused(422, f"format: {form!r}; use text or html")
    for name in ("split_sentences", "alignments"):
        if name in data and not isinstance(data[name], bool):
            raise Refused(422, f"{name}: must be true or false")
    options = TextOptions(form == "html", data.get("split_sentences", True), data.get("alignments", False))
    if options.html and (nbest > 1 or options.alignments):
        raise Refused(
            422,
            "format: html answers one translation a text, with its markup; leave out nbest and alignments",
        )
    if options.alignments and nbest > 1:
        raise Refused(422, "alignments: the best translation's; leave out nbest")
    return options


def parse_settings(data: Mapping[str, Any], limits: ServeLimits, translator: "Translator") -> DecodeSettings:
    """The decode settings of nmt's own request shape, by the same rules as `nmt translate`'s
    options (`decoding.settings`)."""
    try:
        search = DecodeOverrides(**{name: data.get(name) for name in SEARCH_FIELDS})
        sampling = Sampling.given(data.get("sampling"), *(data.get(name) for name in SAMPLING_FIELDS))
        return translator.settings(search, data.get("nbest"), limits.max_batch_tokens, sampling)
    except SettingError as err:
        raise Refused(422, err.as_field()) from None


@dataclass(frozen=True)
class Terms:
    """What a request asks its translations to contain: each text's own phrases ("constraints",
    None for none) and the glossary's terms, with the settings that carry the glossary."""

    constraints: list[list[str]] | None
    settings: DecodeSettings


def parse_terms(
    data: Mapping[str, Any],
    texts: int,
    settings: DecodeSettings,
    wording: Wording = NMT,
    single: bool = False,
) -> Terms:
    """ "constraints" (a list of phrases for each text; for `single`, LibreTranslate's q of one
    string, the list of its phrases), "glossary" (an object of source term to target term, or a
    list of [source term, target term] pairs) and "ordered_constraints"."""
    given = data.get("constraints")
    if single and isinstance(given, list) and all(isinstance(p, str) for p in given):
        given = [given]
    elif given is not None and not (
        isinstance(given, list)
        and len(given) == texts
        and all(isinstance(c, list) and all(isinstance(p, str) for p in c) for c in given)
    ):
        shape = "a list of phrases (strings)" + (" for q" if single else f" for each of the {texts} texts")
        raise wording.refuse(CONSTRAINTS_SHAPE, shape=shape)
    return Terms(given, with_glossary(data, settings, "ordered_constraints", wording))


def with_glossary(
    data: Mapping[str, Any], settings: DecodeSettings, ordered: str | None = None, wording: Wording = NMT
) -> DecodeSettings:
    """`settings` with the request's "glossary" (and `ordered` field); Refused for a bad one."""
    entries = data.get("glossary")
    if entries is not None and not isinstance(entries, dict | list):
        problem = "glossary: an object of source term to target term, or a list of [source, target] pairs"
        raise wording.refuse(TERMS, problem=problem)
    if isinstance(entries, list):  # JSON has no tuples: [source, target] pairs
        entries = [tuple(e) if isinstance(e, list) else e for e in entries]
    try:
        glossary = Glossary.of(entries, where="glossary") if entries is not None else None
        return with_terms(settings, glossary, data.get(ordered, False) if ordered else False)
    except SettingError as err:
        raise wording.refuse(TERMS, problem=err.as_field()) from None
    except InputError as err:
        raise wording.refuse(TERMS, problem=str(err)) from None


def route(
    served: Sequence[Served], source: str | None, target: str | None, status: int = 422
) -> tuple[Served, str | None]:
    """The pair that translates `source` into `target`, and the source chosen for "auto" (the
    only one served into `target`). Either may be left out where one pair fits."""
    if len(served) == 1 and served[0].pair is None:  # a checkpoint that records no languages
        return served[0], None
    auto = source in (None, "auto")
    fits = [
        s
        for s in served
        if s.pair is not None and (auto or s.pair[0] == source) and (target is None or s.pair[1] == target)
    ]
    if len(fits) == 1:
        pair = fits[0].pair
        return fits[0], pair[0] if source == "auto" and pair is not None else None
    names = ", ".join(s.name for s in served)
    if not fits:
        return_pair = f"{source or 'any source'} into {target or 'any target'}"
        raise Refused(status, f"source, target: no model translates {return_pair}; this server has {names}")
    raise Refused(
        status, f"source, target: several models fit ({', '.join(s.name for s in fits)}); name both languages"
    )
