"""WMT14-shaped synthetic corpora, no download: English-German pairs whose shape is WMT14's.

What matters at scale is the shape, not the words: lengths with a mean of about 24 words and a
long tail past the 250-piece limit (log-normal, as WMT's news and Europarl lines are), about 1.5%
of pairs that `nmt prepare`'s length and ratio filters drop (too long, or sides of very different
length, as Common Crawl's misaligned pairs), about 2% exact duplicates, and a few lines of odd
Unicode (zero-width and direction marks, a BOM, combining accents, CJK, emoji, a control character;
not NUL, which `nmt prepare` takes for the sign of a binary or UTF-16 file).
Words are drawn by Zipf's law from two made-up vocabularies of 200,000 words each, so a 37k
joint BPE has as much to learn as on real text; the German side follows the English side's
length. Built with numpy a chunk at a time (36M pairs in minutes), written once under
bench/work/wmt_shaped/PAIRS/ and reused: train, valid (3,000 lines, newstest2013's size) and
test (3,003 lines) .en/.de.

    .venv/bin/python bench/wmt_shaped.py --pairs 4500000
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "bench" / "work" / "wmt_shaped"
VOCABULARY = 200_000
CHUNK = 200_000
ODD = ["\u200b", "\u200f", "\ufeff", "e\u0301", "\u4e2d\u6587", "\U0001f600", "\x07", "\u00ad"]


def vocabulary(rng: np.random.Generator, letters: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`VOCABULARY` made-up words (bytes back to back, each followed by a space): the table, each
    word's start and its length with the space. Short words are the frequent ones, as in text."""
    alphabet = np.frombuffer(letters.encode(), dtype=np.uint8)
    noise = rng.normal(0, 1.2, VOCABULARY)
    lengths = np.clip(np.round(2 + np.log1p(np.arange(VOCABULARY)) * 0.9 + noise), 1, 18).astype(np.int64)
    table = alphabet[rng.integers(0, len(alphabet), int(lengths.sum()))]
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    with_space = np.empty(len(table) + VOCABULARY, dtype=np.uint8)
    spaced_starts = starts + np.arange(VOCABULARY)
    positions = np.repeat(spaced_starts - starts, lengths) + np.arange(len(table))
    with_space[positions] = table
    with_space[spaced_starts + lengths] = ord(" ")
    first = np.arange(VOCABULARY) % 7 == 0  # some words capitalised, as names and sentence starts are
    with_space[spaced_starts[first]] -= ord("a") - ord("A")
    return with_space, spaced_starts, lengths + 1


def zipf_ids(rng: np.random.Generator, count: int) -> np.ndarray:
    """`count` word ids, id k drawn with weight 1 / (k + 2.7) (Zipf-Mandelbrot)."""
    weights = 1.0 / (np.arange(VOCABULARY) + 2.7)
    cumulative = np.cumsum(weights / weights.sum())
    return np.minimum(np.searchsorted(cumulative, rng.random(count)), VOCABULARY - 1)


def lines(words: tuple[np.ndarray, np.ndarray, np.ndarray], ids: np.ndarray, lengths: np.ndarray) -> bytes:
    """The sentences of `lengths` words taken in turn from `ids`, a line each."""
    table, starts, sizes = words
    size = sizes[ids]
    out_starts = np.concatenate([[0], np.cumsum(size)[:-1]])
    total = int(size.sum())
    positions = np.repeat(starts[ids] - out_starts, size) + np.arange(total)
    text = table[positions]
    ends = np.cumsum(size)[np.cumsum(lengths) - 1] - 1  # each sentence's last space
    text[ends] = ord("\n")
    return text.tobytes()


def chunk_lengths(
    rng: np.random.Generator, count: int, longest: int, misaligned_share: float
) -> tuple[np.ndarray, np.ndarray]:
    """English and German lengths in words: log-normal (mean about 24, a tail to `longest`);
    German within 10% of English but for `misaligned_share` of the pairs."""
    english = np.clip(np.round(rng.lognormal(np.log(19.0), 0.68, count)), 1, longest).astype(np.int64)
    german = np.maximum(1, np.round(english * rng.normal(1.0, 0.1, count))).astype(np.int64)
    misaligned = rng.random(count) < misaligned_share
    german[misaligned] = np.maximum(1, english[misaligned] * rng.integers(3, 8, int(misaligned.sum())))
    return english, german


def with_duplicates_and_odd_lines(rng: np.random.Generator, en: bytes, de: bytes) -> tuple[bytes, bytes]:
    """About 2% of the pairs repeated later in the chunk, a few lines with odd Unicode in front."""
    en_lines, de_lines = en.split(b"\n")[:-1], de.split(b"\n")[:-1]
    count = len(en_lines)
    copies = rng.choice(count, size=count // 50, replace=False)
    places = rng.choice(count, size=count // 50, replace=False)
    for source, place in zip(copies, places, strict=True):
        en_lines[place], de_lines[place] = en_lines[source], de_lines[source]
    for place in rng.choice(count, size=max(1, count // 20_000), replace=False):
        odd = ODD[int(place) % len(ODD)].encode()
        en_lines[place] = odd + en_lines[place]
    return b"\n".join(en_lines) + b"\n", b"\n".join(de_lines) + b"\n"


def write_split(folder: Path, name: str, pairs: int, seed: int, words: tuple) -> None:
    """Training pairs with the tail and the misaligned pairs; a test set as a newstest is, whose
    longest lines are about 100 words and whose pairs are all translations."""
    longest, misaligned = (400, 0.01) if name == "train" else (100, 0.0)
    rng = np.random.default_rng(seed)
    parts = {lang: folder / f"{name}.{lang}.part" for lang in ("en", "de")}
    with parts["en"].open("wb") as en_out, parts["de"].open("wb") as de_out:
        for start in range(0, pairs, CHUNK):
            count = min(CHUNK, pairs - start)
            en_lengths, de_lengths = chunk_lengths(rng, count, longest, misaligned)
            en = lines(words[0], zipf_ids(rng, int(en_lengths.sum())), en_lengths)
            de = lines(words[1], zipf_ids(rng, int(de_lengths.sum())), de_lengths)
            en, de = with_duplicates_and_odd_lines(rng, en, de)
            en_out.write(en)
            de_out.write(de)
    for lang, part in parts.items():
        part.rename(folder / f"{name}.{lang}")


def corpus(pairs: int) -> Path:
    """bench/work/wmt_shaped/PAIRS/ with train, valid and test .en/.de, made once."""
    folder = WORK / str(pairs)
    if (folder / "done").exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(14)
    words = (vocabulary(rng, "etaoinshrdlucmfwypvbgkjqxz"), vocabulary(rng, "enisratdhulcgmobwfkzpvjyxq"))
    write_split(folder, "train", pairs, 1, words)
    write_split(folder, "valid", 3000, 2, words)
    write_split(folder, "test", 3003, 3, words)
    (folder / "done").touch()
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=450_000)
    args = parser.parse_args()
    start = time.monotonic()
    folder = corpus(args.pairs)
    print(f"{folder} ({time.monotonic() - start:.0f} s)")


if __name__ == "__main__":
    main()
