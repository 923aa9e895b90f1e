"""Decoding speed on test_2016_flickr (1,000 sentences): beam 4 and greedy, fp32 and bf16.

The model is the benchmark's own 15-minute model, trained as `nmt train` runs the recipe on
this CPU (bench/time_to_bleu.py --precision recipe; trained and cached on first use). Reports
sentences/s and target pieces/s of the search alone (model loading excluded, after a warm-up),
with the BLEU and output/reference length ratio of each setting, since speed means nothing if
the outputs are longer or worse. Scores are
length-normalised as fairseq does by default (score / |Y|): the recipe's GNMT penalty with
alpha 0.6 left an earlier benchmark model's beam-4 outputs at 0.946 of the reference length, under the
0.95 the speed figures are held to (short outputs decode faster).
    .venv/bin/python bench/decode_speed.py [--minutes 15]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import sacrebleu
import torch
from common import DEFAULT_DATA, THREADS, emit
from time_to_bleu import trained_model

from nmt_cli.decoding.translator import load_translator
from nmt_cli.device import configure_cpu
from nmt_cli.user_settings import DecodeOverrides


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--minutes", type=float, default=15.0, help="training time of the cached model")
    parser.add_argument("--batch-tokens", type=int, default=4096)
    args = parser.parse_args(argv)
    model, _ = trained_model(args.data, "recipe", args.minutes)
    configure_cpu(THREADS)
    source = (args.data / "test_2016_flickr.en").read_text(encoding="utf-8").splitlines()
    reference = (args.data / "test_2016_flickr.de").read_text(encoding="utf-8").splitlines()
    # The settings travel with the figures: a speed means little without them.
    result: dict = {
        "decode_lenpen_style": "fairseq",
        "decode_lenpen": 1.0,
        "decode_max_len_a": 1.0,
        "decode_max_len_b": 50,
        "decode_batch_tokens": args.batch_tokens,
        "decode_threads": THREADS,
    }
    for precision in ("fp32", "bf16"):
        for name, beam in (("beam4", 4), ("greedy", 1)):
            overrides = DecodeOverrides(
                beam=beam,
                lenpen=result["decode_lenpen"],
                lenpen_style=result["decode_lenpen_style"],
                max_len_a=result["decode_max_len_a"],
                max_len_b=result["decode_max_len_b"],
            )
            translator = load_translator([model], torch.device("cpu"), precision, overrides)
            translator.translate(source[:100], batch_tokens=args.batch_tokens)  # warm-up
            start = time.perf_counter()
            text = translator.translate(source, batch_tokens=args.batch_tokens)
            seconds = time.perf_counter() - start
            pieces = sum(len(translator.tgt_spm.encode(t)) + 1 for t in text)  # + EOS
            score = sacrebleu.corpus_bleu(text, [reference])
            tag = f"{name}_{precision}"
            result[f"decode_{tag}_sent_s"] = round(len(source) / seconds, 1)
            result[f"decode_{tag}_tok_s"] = round(pieces / seconds)
            result[f"decode_{tag}_bleu"] = round(score.score, 2)
            result[f"decode_{tag}_len_ratio"] = round(score.sys_len / score.ref_len, 3)
    best = max(("fp32", "bf16"), key=lambda p: result[f"decode_beam4_{p}_sent_s"])
    result["decode_beam4_sent_s"] = max(
        result["decode_beam4_fp32_sent_s"], result["decode_beam4_bf16_sent_s"]
    )
    result["decode_greedy_sent_s"] = max(
        result["decode_greedy_fp32_sent_s"], result["decode_greedy_bf16_sent_s"]
    )
    result["decode_bleu_beam4"] = result[f"decode_beam4_{best}_bleu"]
    result["decode_len_ratio"] = result[f"decode_beam4_{best}_len_ratio"]
    emit(result)
    return result


if __name__ == "__main__":
    main()
