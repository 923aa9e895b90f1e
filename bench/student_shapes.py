"""How fast a distillation student of each shape would decode, before training any: beam-4
search in int8 over models of random weights, every hypothesis held to exactly --steps steps
(so that untrained output lengths do not count), relative to the teacher's shape (small.toml).

No data and no start-up: 2,000 sentences of 14 source pieces, in batches of 64, scored over a
fixed 1,500-piece vocabulary (what a shortlist leaves of 8,000). Median of --repeats. A trained
student also differs in its output lengths; recipes/multi30k/distillation.md has both.
    .venv/bin/python bench/student_shapes.py [--steps 16] [--repeats 5]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time

import torch
from common import THREADS, emit

from nmt_cli.config import DecodeConfig, ModelConfig
from nmt_cli.decoding.ensemble import Ensemble
from nmt_cli.decoding.loading import for_decoding
from nmt_cli.decoding.search import beam_search
from nmt_cli.decoding.settings import DecodeSettings
from nmt_cli.model.transformer import Transformer

VOCAB = 8000
SHORTLIST = 1500
SENTENCES, BATCH, SOURCE_LENGTH = 2000, 64, 14

# Each a change to ModelConfig's defaults; the first is the teacher (small.toml's shape).
SHAPES = {
    "teacher_3+3_d256": dict(encoder_layers=3, decoder_layers=3),
    "6+1_d256": dict(encoder_layers=6, decoder_layers=1),
    "3+1_d256": dict(encoder_layers=3, decoder_layers=1),
    "6+1_d256_ff512": dict(encoder_layers=6, decoder_layers=1, d_ff=512),
    "6+1_d192": dict(encoder_layers=6, decoder_layers=1, d_model=192, d_ff=768, d_k=48, d_v=48),
    "6+1_d160": dict(encoder_layers=6, decoder_layers=1, d_model=160, d_ff=640, d_k=40, d_v=40),
    "6+1_d128": dict(encoder_layers=6, decoder_layers=1, d_model=128, d_ff=512, d_k=32, d_v=32),
}


def seconds(shape: dict, steps: int, repeats: int) -> float:
    """Median seconds to beam-search SENTENCES sentences with a model of `shape`."""
    teacher = dict(d_model=256, d_ff=1024, heads=4, d_k=64, d_v=64)  # small.toml's widths
    cfg = dataclasses.replace(
        ModelConfig(), src_vocab_size=VOCAB, tgt_vocab_size=VOCAB, **{**teacher, **shape}
    )
    ensemble = Ensemble([for_decoding(Transformer(cfg).eval(), "int8")])
    decode = DecodeSettings(DecodeConfig(beam=4, lenpen=0.6, max_len_a=0.0, max_len_b=steps, min_len=steps))
    src = torch.randint(4, VOCAB, (BATCH, SOURCE_LENGTH))
    vocab = torch.cat([torch.arange(4), torch.randperm(VOCAB - 4)[: SHORTLIST - 4] + 4]).sort().values
    beam_search(ensemble, src, decode, vocab=vocab)  # warm-up
    runs = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(SENTENCES // BATCH):
            beam_search(ensemble, src, decode, vocab=vocab)
        runs.append(time.perf_counter() - start)
    return statistics.median(runs)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=16, help="target pieces per hypothesis")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    torch.set_num_threads(THREADS)
    torch.manual_seed(0)
    timed = {name: seconds(shape, args.steps, args.repeats) for name, shape in SHAPES.items()}
    teacher = timed["teacher_3+3_d256"]
    result = {
        name: {"seconds": round(value, 2), "speed_vs_teacher": round(teacher / value, 2)}
        for name, value in timed.items()
    }
    emit(result)
    return result


if __name__ == "__main__":
    main()
