"""The embedded demo: prepare -> train -> average -> translate -> score on a synthetic corpus.

The corpus is made here, deterministically: numbers written out in English and in German
("forty-two cats and three hundred dogs" -> "zweiundvierzig Katzen und dreihundert Hunde"),
which asks the model
to reorder (units before tens) and to build compounds. It needs no download and runs in a
few minutes on two CPU cores. `python -m nmt_cli.demo --out DIR` (or `make demo`).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

from nmt_cli.commands import average, prepare, score, train, translate
from nmt_cli.errors import NmtError
from nmt_cli.user_settings import DecodeOverrides, PrepareConfig, RuntimeConfig, TranslateJob

ONES_EN = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
    "sixteen seventeen eighteen nineteen".split()
)
TENS_EN = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()
ONES_DE = (
    "null eins zwei drei vier fünf sechs sieben acht neun zehn elf zwölf dreizehn vierzehn fünfzehn "
    "sechzehn siebzehn achtzehn neunzehn".split()
)
TENS_DE = "_ _ zwanzig dreißig vierzig fünfzig sechzig siebzig achtzig neunzig".split()
NOUNS = [
    ("cats", "Katzen"),
    ("houses", "Häuser"),
    ("books", "Bücher"),
    ("days", "Tage"),
    ("trees", "Bäume"),
    ("children", "Kinder"),
    ("years", "Jahre"),
    ("cars", "Autos"),
    ("dogs", "Hunde"),
    ("birds", "Vögel"),
]

# A small model and a short schedule: enough for the task, a few minutes on two cores.
DEMO_RECIPE = [
    "model.encoder_layers=3",
    "model.decoder_layers=3",
    "model.d_model=128",
    "model.d_ff=512",
    "model.heads=4",
    "model.d_k=32",
    "model.d_v=32",
    "model.dropout=0.1",
    "model.max_positions=128",
    'train.lr_schedule="inverse_sqrt"',
    "train.lr=2e-3",
    "train.warmup=300",
    "train.max_tokens=2048",
    "train.max_updates=1000",
    "train.save_every_updates=200",
    "train.save_every_minutes=0",
    "train.valid_every_updates=500",
    "train.log_every_updates=100",
    "train.keep_last=3",
    'train.precision="bf16"',
    "decode.beam=4",
    "average.last=3",
]


def english(n: int) -> str:
    if n < 20:
        return ONES_EN[n]
    if n < 100:
        return TENS_EN[n // 10] + ("" if n % 10 == 0 else "-" + ONES_EN[n % 10])
    if n < 1000:
        rest = n % 100
        return f"{ONES_EN[n // 100]} hundred" + (f" {english(rest)}" if rest else "")
    rest = n % 1000
    return f"{english(n // 1000)} thousand" + (f" {english(rest)}" if rest else "")


def german(n: int, alone: bool = True) -> str:
    """German numerals are one word: 342 = dreihundertzweiundvierzig; 1 is "eins" only at the end."""
    if n == 1:
        return "eins" if alone else "ein"
    if n < 20:
        return ONES_DE[n]
    if n < 100:
        unit = n % 10
        return TENS_DE[n // 10] if unit == 0 else f"{german(unit, False)}und{TENS_DE[n // 10]}"
    if n < 1000:
        rest = n % 100
        return f"{german(n // 100, False)}hundert" + (german(rest, alone) if rest else "")
    rest = n % 1000
    return f"{german(n // 1000, False)}tausend" + (german(rest, alone) if rest else "")


def phrase(rng: random.Random) -> tuple[str, str]:
    """One counted noun phrase: small numbers are as frequent as large ones."""
    n = max(2, rng.randrange(10 ** rng.randint(1, 6)))
    noun_en, noun_de = rng.choice(NOUNS)
    return f"{english(n)} {noun_en}", f"{german(n)} {noun_de}"


def make_corpus(directory: Path, sizes: dict[str, int], seed: int = 7) -> None:
    """Write {split}.en / {split}.de: sentences of two or three counted phrases ("A, B and C");
    no sentence of one split occurs in another."""
    directory.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    seen: set[str] = set()
    for split, size in sizes.items():
        with (
            (directory / f"{split}.en").open("w", encoding="utf-8") as en,
            (directory / f"{split}.de").open("w", encoding="utf-8") as de,
        ):
            written = 0
            while written < size:
                phrases = [phrase(rng) for _ in range(rng.randint(2, 3))]
                source = ", ".join(p[0] for p in phrases[:-1]) + " and " + phrases[-1][0]
                if source in seen:
                    continue
                seen.add(source)
                en.write(source + "\n")
                de.write(", ".join(p[1] for p in phrases[:-1]) + " und " + phrases[-1][1] + "\n")
                written += 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("demo"), help="working directory")
    parser.add_argument("--updates", type=int, default=1000, help="training updates")
    parser.add_argument("--train-size", type=int, default=20000, help="training pairs")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    out: Path = args.out
    started = time.monotonic()
    try:
        print(f"1/5 making a synthetic English-German corpus of numbers in {out / 'corpus'}", file=sys.stderr)
        make_corpus(out / "corpus", {"train": args.train_size, "valid": 300, "test": 500})
        print("2/5 nmt prepare", file=sys.stderr)
        c = out / "corpus"
        config = PrepareConfig(
            train=(str(c / "train"),),
            valid=str(c / "valid"),
            test=str(c / "test"),
            src="en",
            tgt="de",
            out=out / "data",
            vocab_size=1000,
            spm_sample=1_000_000,
            max_ratio=3.0,
        )
        prepare.run(config, quiet=args.quiet)
        print("3/5 nmt train", file=sys.stderr)
        train.run(
            data=out / "data",
            out=out / "run",
            recipe=None,
            overrides=[*DEMO_RECIPE, f"train.max_updates={args.updates}"],
            runtime=RuntimeConfig("cpu", None, 0),
            compile_model=False,
            quiet=args.quiet,
        )
        print("4/5 nmt average", file=sys.stderr)
        average.run(
            checkpoints=[], output=out / "average.pt", run_dir=out / "run", last=None, quiet=args.quiet
        )
        print("5/5 nmt translate + nmt score", file=sys.stderr)
        job = TranslateJob([out / "average.pt"], c / "test.en", out / "test.hyp.de", buffer_size=1000)
        translate.run(job, decode=DecodeOverrides(), runtime=RuntimeConfig("cpu", "fp32"), quiet=args.quiet)
        for line_en, line_hyp in zip(
            (c / "test.en").read_text().splitlines()[:3],
            (out / "test.hyp.de").read_text().splitlines()[:3],
            strict=True,
        ):
            print(f"  {line_en}  ->  {line_hyp}")
        score.run(
            refs=[c / "test.de"], hyp=out / "test.hyp.de", metrics="bleu,chrf", tokenize=None, as_json=False
        )
    except NmtError as err:
        print(f"nmt demo: error: {err}", file=sys.stderr)
        return err.exit_code
    print(f"demo finished in {time.monotonic() - started:.0f} s; files in {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
