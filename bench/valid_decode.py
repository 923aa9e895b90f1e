"""What `train.valid_bleu` costs at newstest size: one validation (valid loss, then the valid set
decoded with the recipe's beam and scored by sacreBLEU) of the WMT14 base model, on the data
bench/scale.py prepared (3,000 valid lines), timed as the trainer runs it.

The model is the recipe's, freshly initialised: an untrained model rarely ends a line, so it
writes every line to its length limit. Two rows bound the cost: the recipe's limit (source
length + 50, the most a validation can cost) and a limit of the source length (about what a
trained model writes). Prints one JSON row per limit.

    python bench/valid_decode.py [--data bench/work/scale/data_450000] [--device cpu] [--lines 3000]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from sentencepiece import SentencePieceProcessor

from nmt_cli.commands.train import resolve_config
from nmt_cli.data.corpus import ParallelSplit, load_meta, load_split
from nmt_cli.model import Transformer
from nmt_cli.training.validate import validate

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "wmt14_en_de" / "base.toml"


def first_lines(split: ParallelSplit, lines: int) -> ParallelSplit:
    """The split cut to its first `lines` pairs (the whole split when it is shorter)."""
    if lines >= len(split):
        return split
    src, tgt = split.src, split.tgt
    src.offsets, tgt.offsets = src.offsets[: lines + 1], tgt.offsets[: lines + 1]
    return split


def one_validation(data: Path, device: torch.device, lines: int, max_len_b: int) -> dict:
    meta = load_meta(data)
    cfg = resolve_config(RECIPE, [f"decode.max_len_b={max_len_b}"], meta)
    torch.manual_seed(cfg.train.seed)
    model = Transformer(cfg.model).to(device)
    split = first_lines(load_split(data, "valid"), lines)
    tgt_processor = SentencePieceProcessor(model_file=str(data / meta.spm["tgt"]))
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.monotonic()
    result = validate(model, split, cfg, device, tgt_processor)
    if device.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.monotonic() - start
    source_pieces = sum(len(split.src[i]) for i in range(len(split)))
    return {
        "device": device.type,
        "threads": torch.get_num_threads(),
        "lines": len(split),
        "source_pieces_per_line": round(source_pieces / max(len(split), 1), 1),
        "beam": cfg.decode.beam,
        "max_len": f"source x {cfg.decode.max_len_a} + {max_len_b}",
        "validation_s": round(seconds, 1),
        "lines_per_s": round(len(split) / seconds, 1),
        "bleu": round(result.get("bleu", 0.0), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", type=Path, default=ROOT / "bench" / "work" / "scale" / "data_450000")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--lines", type=int, default=3000)
    parser.add_argument("--max-len-b", type=int, action="append", help="default: 0 and 50 (the recipe's)")
    args = parser.parse_args()
    if not (args.data / "meta.json").exists():
        raise SystemExit(f"valid_decode: {args.data} is not prepared data; run bench/scale.py first")
    for max_len_b in args.max_len_b or [0, 50]:
        row = one_validation(args.data, torch.device(args.device), args.lines, max_len_b)
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
