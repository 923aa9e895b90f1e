"""Markup and paragraphs on Multi30k (test_2016_flickr, En-De): where inline tags land, whether a
tag changes the translation, what sentence splitting does to paragraphs, and what both cost.

- Tag placement: each test sentence holding a word of a small En-De lexicon gets <b> around its
  first such word; a placement is right when the <b> of the translated HTML holds that word's
  German translation, counted over the lines whose plain translation has it at all (the
  placement is judged, not the translation). Measured with the alignment of each decoder layer.
- A tag does not cut a sentence: the tagged line's output with its tags stripped equals the
  plain line's translation.
- Paragraphs: the test set joined 4 sentences a line, translated whole and sentence by sentence,
  BLEU against the references joined the same way, beside the BLEU of the sentences one a line;
  and the same over the paragraphs whose sentences all end in a full stop, ! or ?.
- Cost: seconds of plain against tagged translation (through the Python API, and through
  `nmt serve` as one client sending 32 texts a request), and of sentences one a line against the
  same sentences as paragraphs split again, each after a warm-up.
- How many lines of the test set (one sentence a line) splitting changes.

    .venv/bin/python bench/html_tags.py [--model avg.pt] [--data ../shared/data/multi30k]
"""

from __future__ import annotations

import argparse
import html
import re
import signal
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import lxml.html
import sacrebleu
from common import DEFAULT_DATA, THREADS, emit
from serve_load import start_server

from nmt_cli import Translator
from nmt_cli.decoding import ensemble
from nmt_cli.device import configure_cpu

LEXICON = {  # English word -> German stems its translation starts with
    "man": ("mann", "männ"), "woman": ("frau",), "women": ("frau",), "girl": ("mädchen",),
    "boy": ("junge", "jung"), "dog": ("hund",), "dogs": ("hund",), "child": ("kind",),
    "children": ("kind",), "water": ("wasser",), "street": ("straße",), "ball": ("ball",),
    "red": ("rot",), "blue": ("blau",), "black": ("schwarz",), "white": ("weiß",),
    "green": ("grün",), "shirt": ("hemd", "shirt", "t-shirt", "oberteil"), "hat": ("hut", "mütze"),
    "beach": ("strand",), "snow": ("schnee",), "bike": ("fahrrad", "rad"), "car": ("auto", "wagen"),
    "grass": ("gras", "rasen"), "people": ("leute", "menschen", "personen"), "table": ("tisch",),
    "guitar": ("gitarre",), "building": ("gebäude",), "crowd": ("menge", "menschenmenge"),
}  # fmt: skip
WORD = re.compile(r"[A-Za-z]+")


def tagged_lines(sources: list[str]) -> list[tuple[int, str, str]]:
    """(line number, tagged HTML, lexicon word) for each line holding a lexicon word."""
    out = []
    for number, line in enumerate(sources):
        for found in WORD.finditer(line):
            if found.group().lower() in LEXICON:
                escaped = [
                    html.escape(part, quote=False)
                    for part in (line[: found.start()], found.group(), line[found.end() :])
                ]
                out.append((number, f"{escaped[0]}<b>{escaped[1]}</b>{escaped[2]}", found.group().lower()))
                break
    return out


def has(text: str, word: str) -> bool:
    return any(w.lower().startswith(LEXICON[word]) for w in text.split())


def placement(translator: Translator, tagged: list[tuple[int, str, str]], plain: list[str]) -> dict:
    outputs = translator.translate_html([fragment for _, fragment, _ in tagged])
    judged = right = same = 0
    for (number, _, word), out in zip(tagged, outputs, strict=True):
        root = lxml.html.fragment_fromstring(out, create_parent="div")
        same += root.text_content() == plain[number]
        if has(plain[number], word):
            judged += 1
            bold = root.find(".//b")
            right += bold is not None and has(bold.text_content(), word)
    return {"lines": len(tagged), "judged": judged, "right": right, "right_share": round(right / judged, 4),
            "untagged_equal_share": round(same / len(tagged), 4)}  # fmt: skip


def seconds(call: Callable[[], object]) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument(
        "--model", type=Path, help="checkpoint (default: the benchmark's cached 15-minute model)"
    )
    args = parser.parse_args(argv)
    if args.model is None:
        from time_to_bleu import trained_model

        args.model, _ = trained_model(args.data, "recipe", 15.0)
    configure_cpu(THREADS)
    sources = (args.data / "test_2016_flickr.en").read_text(encoding="utf-8").splitlines()
    references = (args.data / "test_2016_flickr.de").read_text(encoding="utf-8").splitlines()
    translator = Translator.load(args.model, device="cpu", precision="fp32")
    translator.translate(sources[:50])  # warm-up
    result: dict = {"model": str(args.model), "precision": "fp32", "threads": THREADS}

    start = time.perf_counter()
    plain = translator.translate(sources, split_sentences=False)
    result["plain_s"] = round(time.perf_counter() - start, 2)
    result["sentence_bleu"] = round(sacrebleu.corpus_bleu(plain, [references]).score, 2)
    # Whether splitting changes a test set of one sentence a line: nmt translate's default is off.
    split_lines = translator.translate(sources)
    result["one_a_line_changed_by_splitting"] = sum(a != b for a, b in zip(plain, split_lines, strict=True))

    tagged = tagged_lines(sources)
    layers = translator.ensemble.models[0].cfg.decoder_layers
    default = ensemble.default_layer  # the search aligns with the layer this names
    by_layer = {}
    for layer in range(layers):
        ensemble.default_layer = lambda model, layer=layer: layer  # type: ignore[assignment]
        by_layer[f"layer{layer + 1}"] = placement(translator, tagged, plain)
    ensemble.default_layer = default
    result["tags"] = {"default_layer": default(translator.ensemble.models[0]) + 1, **by_layer}
    same_lines = [sources[number] for number, _, _ in tagged]
    result["tagged_cost"] = {
        "lines": len(tagged),
        "plain_s": round(seconds(lambda: translator.translate(same_lines, split_sentences=False)), 2),
        "html_s": round(seconds(lambda: translator.translate_html([f for _, f, _ in tagged])), 2),
    }

    n = len(sources) // 4 * 4
    paragraphs = [" ".join(sources[i : i + 4]) for i in range(0, n, 4)]
    joined_refs = [" ".join(references[i : i + 4]) for i in range(0, n, 4)]
    joined_plain = [" ".join(plain[i : i + 4]) for i in range(0, n, 4)]
    start = time.perf_counter()
    split = translator.translate(paragraphs)
    split_s = time.perf_counter() - start
    whole = translator.translate(paragraphs, split_sentences=False)
    result["paragraphs"] = {
        "lines": len(paragraphs),
        "sentence_by_sentence_joined_bleu": round(
            sacrebleu.corpus_bleu(joined_plain, [joined_refs]).score, 2
        ),
        "split_bleu": round(sacrebleu.corpus_bleu(split, [joined_refs]).score, 2),
        "whole_bleu": round(sacrebleu.corpus_bleu(whole, [joined_refs]).score, 2),
        "split_s": round(split_s, 2),
        "sentences_one_a_line_s": result["plain_s"],
    }
    # The same for the paragraphs whose four sentences each end in . ! or ?, which a segmenter can
    # find: what splitting loses where the text marks its sentences.
    marked = [i for i in range(0, n, 4) if all(x.rstrip()[-1:] in ".!?" for x in sources[i : i + 4])]
    result["paragraphs_marked"] = {
        "lines": len(marked),
        "sentence_by_sentence_joined_bleu": round(
            sacrebleu.corpus_bleu(
                [joined_plain[i // 4] for i in marked], [[joined_refs[i // 4] for i in marked]]
            ).score,
            2,
        ),
        "split_bleu": round(
            sacrebleu.corpus_bleu(
                [split[i // 4] for i in marked], [[joined_refs[i // 4] for i in marked]]
            ).score,
            2,
        ),
    }
    result["serve_cost"] = serve_cost(args.model, same_lines, [f for _, f, _ in tagged])
    emit(result)
    return result


def serve_cost(model: Path, plain: list[str], fragments: list[str], chunk: int = 32) -> dict:
    """Seconds of one client sending the same sentences to `nmt serve` (LibreTranslate's route, 32
    texts a request) as plain text and as the tagged HTML; medians of 3, the two alternating."""
    server, url = start_server(model, argparse.Namespace(precision="fp32", workers=None, max_wait_ms=None))

    def send(texts: list[str], form: str) -> float:
        start = time.perf_counter()
        with httpx.Client(timeout=300) as client:
            for i in range(0, len(texts), chunk):
                body = {"q": texts[i : i + chunk], "source": "en", "target": "de", "format": form}
                client.post(f"{url}/translate", json=body).raise_for_status()
        return time.perf_counter() - start

    try:
        send(plain[:64], "text")  # warm-up
        runs = [(send(plain, "text"), send(fragments, "html")) for _ in range(3)]
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(120)
    text_s, html_s = (statistics.median(r[i] for r in runs) for i in (0, 1))
    return {
        "lines": len(plain),
        "text_s": round(text_s, 2),
        "html_s": round(html_s, 2),
        "ratio": round(html_s / text_s, 3),
    }


if __name__ == "__main__":
    main()
