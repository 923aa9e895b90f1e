"""A checkpoint decoded by nmt and by transformers' own MarianMTModel after `nmt export --format
hf-marian`: how many of the first N Multi30k test lines give the same text, greedy and beam,
both in fp32 on the CPU. transformers searches with the export's generation_config.json; a model
with GNMT's length penalty (which generate cannot express) is decoded by nmt with fairseq's form
at the same alpha, as docs/export.md says. Needs the dev extras (transformers, safetensors).

    python bench/hf_marian_agreement.py --model runs/m30k/avg.pt [--lines 100] [--beam 4]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch
from common import DEFAULT_DATA, THREADS, emit, nmt

from nmt_cli import Translator, checkpoint


def generate(folder: Path, lines: list[str], beam: int) -> list[str]:
    """transformers' translations, one line at a time (no padding)."""
    from transformers import MarianMTModel, MarianTokenizer

    tokenizer = MarianTokenizer.from_pretrained(folder)
    model = MarianMTModel.from_pretrained(folder).eval()
    out = []
    with torch.inference_mode():
        for line in lines:
            ids = model.generate(**tokenizer([line], return_tensors="pt"), num_beams=beam)
            out.append(tokenizer.decode(ids[0], skip_special_tokens=True))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--src", default="en")
    parser.add_argument("--lines", type=int, default=100)
    parser.add_argument("--beam", type=int, default=4)
    args = parser.parse_args()
    torch.set_num_threads(THREADS)
    path = args.data / f"test_2016_flickr.{args.src}"
    lines = path.read_text(encoding="utf-8").splitlines()[: args.lines]
    decode = checkpoint.load(args.model).config["decode"]
    style = {"lenpen_style": "fairseq"} if decode.get("lenpen_style", "gnmt") == "gnmt" else {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "hf"
        export_s, _ = nmt("export", "-m", str(args.model), "--format", "hf-marian", "-o", str(folder))
        translator = Translator.load(args.model, device="cpu", precision="fp32", threads=THREADS)
        result: dict = {"name": "hf_marian_agreement", "model": str(args.model), "lines": len(lines)}
        result["export_s"] = round(export_s, 1)
        for name, beam, extra in (("greedy", 1, {}), (f"beam{args.beam}", args.beam, style)):
            start = time.monotonic()
            ours = translator.translate(lines, beam=beam, lenpen=decode["lenpen"], **extra)
            nmt_s = time.monotonic() - start
            start = time.monotonic()
            theirs = generate(folder, lines, beam)
            result[name] = {
                "identical": sum(a == b for a, b in zip(ours, theirs, strict=True)),
                "nmt_s": round(nmt_s, 1),
                "transformers_s": round(time.monotonic() - start, 1),
                "differ": [i for i, (a, b) in enumerate(zip(ours, theirs, strict=True)) if a != b][:10],
            }
        result["nmt_lenpen_style"] = style.get("lenpen_style", decode.get("lenpen_style"))
        translator.close()
    emit(result)


if __name__ == "__main__":
    main()
