"""nmt against CTranslate2 decoding one model: the benchmark's Multi30k model, exported with
`nmt export`, on the same input with the same beam, length normalisation and batch budget.

Input: test_2016_flickr.en repeated to --lines lines (5,000 by default), so that BLEU is the
test set's. Settings for both engines: beam 4 and greedy; scores normalised by |Y| (nmt
`--lenpen-style fairseq --lenpen 1.0`, CTranslate2 `length_penalty=1`); at least one target
token; 4,096 source tokens a batch. nmt's maximum length is source + 50; CTranslate2 takes one
limit for all, 256 (no Multi30k output comes near either).

Engines and settings: CTranslate2 fp32, int8 (exported with int8 weights) and int8 over its
vocabulary map (`use_vmap`), at both 2-thread layouts, 1 worker x 2 threads and 2 x 1; nmt at
each --precision with its default workers (one process per core, one thread each), without and
with `--shortlist`. The shortlist is learned once by `nmt shortlist` from the training corpus
(its default sizes) and exported with the model, so CTranslate2's map holds the same candidates.
`--vocab 32000` measures the same recipe trained on a 32k joint vocabulary instead of 8k.
Two measurements each:
- whole process: a fresh process reads the file, loads the model, translates, writes the
  output (median of --repeats runs), as a user runs it;
- steady state: decoding the lines in a process that already holds the loaded model.
Start-up: `nmt translate` on one empty line against a process that only imports torch, in turn
(the difference is what nmt adds to torch's own import). nmt's modules are byte-compiled first,
as `pip install` leaves them.
Target tokens are the sentencepiece pieces of the output text (EOS not counted), counted the
same way for both engines. Prints one JSON object; `--profile` adds torch profiler tables of
nmt int8 decoding, without and with the shortlist, on stderr.
    .venv/bin/python bench/decode_vs_ctranslate2.py [--lines 5000] [--repeats 3] [--vocab 32000]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

import sacrebleu
from common import DEFAULT_DATA, WORK, byte_compile, emit, nmt, repeated_test
from time_to_bleu import trained_model

CT2_LAYOUTS = {"2x1": (2, 1), "1x2": (1, 2)}  # (inter_threads, intra_threads)
NMT_PRECISIONS = ("fp32", "bf16", "int8")
BATCH_TOKENS = 4096
STARTUP_PAIRS = 11  # start-up differences are ~0.2 s against ~0.1 s of run-to-run noise
SHORTLIST = (20, 100)  # nmt shortlist's defaults: candidates a source piece, frequent pieces
# One CTranslate2 run as its own process; prints the seconds of translate_batch alone.
CT2_SCRIPT = """
import sys, time, ctranslate2, sentencepiece
model, compute, inter, intra, beam, batch, src, out, vmap = sys.argv[1:10]
sp = sentencepiece.SentencePieceProcessor(model_file=model + "/spm.model")
t = ctranslate2.Translator(model, device="cpu", compute_type=compute,
                           inter_threads=int(inter), intra_threads=int(intra))
lines = open(src, encoding="utf-8").read().splitlines()
start = time.perf_counter()
results = t.translate_batch([sp.encode(x, out_type=str) for x in lines], beam_size=int(beam),
                            length_penalty=1.0, max_batch_size=int(batch), batch_type="tokens",
                            use_vmap=vmap == "1")
seconds = time.perf_counter() - start
open(out, "w", encoding="utf-8").write("".join(sp.decode(r.hypotheses[0]) + "\\n" for r in results))
print(seconds)
"""


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--minutes", type=float, default=15.0, help="training time of the cached model")
    parser.add_argument("--lines", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--beams", default="4,1")
    parser.add_argument(
        "--vocab", type=int, default=8000, help="joint vocabulary of the model (32000: the large row)"
    )
    parser.add_argument("--precisions", default=",".join(NMT_PRECISIONS), help="nmt precisions to run")
    parser.add_argument("--profile", action="store_true", help="print per-step profiles (stderr)")
    args = parser.parse_args(argv)
    byte_compile()
    model, facts = trained_model(args.data, "recipe", args.minutes, vocab=args.vocab)
    work = WORK / ("vs_ct2" if args.vocab == 8000 else f"vs_ct2_v{args.vocab}")
    work.mkdir(parents=True, exist_ok=True)
    listed = _with_shortlist(model, args.data, work)
    source, reference = repeated_test(args.data, args.lines, work)
    exports = {q: _export(listed, work / f"ct2_{q}", q) for q in ("none", "int8")}
    import sentencepiece

    pieces = sentencepiece.SentencePieceProcessor(model_file=str(exports["none"] / "spm.model"))

    def measured(output: Path, seconds: list[float]) -> dict:
        hyps = output.read_text(encoding="utf-8").splitlines()
        score = sacrebleu.corpus_bleu(hyps, [reference])
        tokens = sum(len(pieces.encode(h)) for h in hyps)
        median = statistics.median(seconds)
        return {
            "seconds": round(median, 3),
            "tok_s": round(tokens / median),
            "sent_s": round(len(hyps) / median, 1),
            "bleu": round(score.score, 2),
            "len_ratio": round(score.sys_len / score.ref_len, 3),
        }

    result: dict = {
        "lines": args.lines,
        "vocab": args.vocab,
        "model_updates": facts["updates"],
        "shortlist": f"{SHORTLIST[0]} candidates a source piece + {SHORTLIST[1]} frequent pieces",
        "settings": "lenpen |Y|^1, batch 4096 tokens, 2 cores",
    }
    result.update(_startup(model, work))
    for beam in [int(b) for b in args.beams.split(",")]:
        name = "beam4" if beam == 4 else "greedy" if beam == 1 else f"beam{beam}"
        rows: dict = {}
        for quant, compute, vmap in (("none", "float32", 0), ("int8", "int8", 0), ("int8", "int8", 1)):
            for layout, (inter, intra) in CT2_LAYOUTS.items():
                label = f"ct2_{compute}{'_vmap' if vmap else ''}_{layout}"
                out = work / f"{label}_{name}.hyp"
                whole, steady = [], []
                for _ in range(args.repeats):
                    started = time.perf_counter()
                    printed = subprocess.run(
                        [
                            sys.executable,
                            "-c",
                            CT2_SCRIPT,
                            str(exports[quant]),
                            compute,
                            str(inter),
                            str(intra),
                            str(beam),
                            str(BATCH_TOKENS // beam),  # nmt's budget, which it divides by the beam too
                            str(source),
                            str(out),
                            str(vmap),
                        ],
                        check=True,
                        capture_output=True,
                        text=True,
                    ).stdout
                    whole.append(time.perf_counter() - started)
                    steady.append(float(printed.split()[-1]))
                rows[label] = {"whole": measured(out, whole), "steady": measured(out, steady)}
        for precision in args.precisions.split(","):
            for shortlist in (False, True):
                label = f"nmt_{precision}{'_shortlist' if shortlist else ''}"
                out = work / f"{label}_{name}.hyp"
                options = ["--precision", precision, "--beam", str(beam), "--batch-tokens", str(BATCH_TOKENS)]
                options += ["--lenpen-style", "fairseq", "--lenpen", "1.0"]
                options += ["--shortlist"] if shortlist else []
                whole = [
                    nmt("translate", "-m", str(listed), "-i", str(source), "-o", str(out), *options)[0]
                    for _ in range(args.repeats)
                ]
                steady = _nmt_steady(listed, source, out, precision, beam, shortlist, args.repeats, measured)
                rows[label] = {"whole": measured(out, whole), "steady": steady}
        result[name] = rows
        _compare(rows, result, name)
        if args.profile:
            _profile(listed, source, beam)
    emit(result)
    return result


def _with_shortlist(model: Path, data: Path, work: Path) -> Path:
    """The model with a shortlist learned from the training corpus (made again when the model is
    newer: a retrained model must not be measured with its predecessor's weights)."""
    listed = work / "model_shortlist.pt"
    if not listed.exists() or listed.stat().st_mtime < model.stat().st_mtime:
        nmt(
            "shortlist",
            "-m",
            str(model),
            "--train",
            str(data / "train"),
            "--candidates",
            str(SHORTLIST[0]),
            "--frequent",
            str(SHORTLIST[1]),
            "-o",
            str(listed),
        )
    return listed


def _compare(rows: dict, result: dict, name: str) -> None:
    """nmt's fastest setting within 0.3 BLEU of its fp32 (without, then with its shortlist) against
    CTranslate2 int8's better layout (without, then with the same shortlist as its vocabulary map).
    Without an fp32 row (--precisions), every nmt setting run is compared."""
    fp32_bleu = rows["nmt_fp32"]["whole"]["bleu"] if "nmt_fp32" in rows else float("-inf")
    for kind in ("whole", "steady"):
        ct2 = max(rows[k][kind]["tok_s"] for k in rows if k.startswith("ct2_int8_") and "vmap" not in k)
        ct2_vmap = max(rows[k][kind]["tok_s"] for k in rows if k.startswith("ct2_int8_vmap"))
        for listed in (False, True):
            eligible = [
                k
                for k in rows
                if k.startswith("nmt_")
                and k.endswith("_shortlist") == listed
                and rows[k][kind]["bleu"] >= fp32_bleu - 0.3
            ]
            if not eligible:
                continue
            best = max(eligible, key=lambda k: rows[k][kind]["tok_s"])
            tag = f"{name}_{kind}_nmt{'_shortlist' if listed else ''}"
            result[f"{tag}_best"] = best
            result[f"{tag}_vs_ct2_int8"] = round(rows[best][kind]["tok_s"] / ct2, 2)
            if listed:
                result[f"{tag}_vs_ct2_int8_vmap"] = round(rows[best][kind]["tok_s"] / ct2_vmap, 2)


def _profile(model: Path, source: Path, beam: int) -> None:
    """Where a decoder step's time goes: torch's profiler over 1,000 lines, int8, one thread,
    without and with the shortlist (tables on stderr). The process is set up as `nmt translate`
    sets up its own (`configure_cpu`): without its malloc settings, decoding 2,500 lines at beam 4
    took 485,000 page faults instead of 128,000."""
    import torch
    from torch.profiler import profile

    from nmt_cli.decoding.translator import load_translator
    from nmt_cli.device import configure_cpu
    from nmt_cli.user_settings import DecodeOverrides

    configure_cpu(1)
    overrides = DecodeOverrides(beam=beam, lenpen=1.0, lenpen_style="fairseq")
    translator = load_translator([model], torch.device("cpu"), "int8", overrides)
    lines = source.read_text(encoding="utf-8").splitlines()[:1000]
    for shortlist in (False, True):
        translator.translate(lines[:100], shortlist=shortlist)
        with profile() as prof:
            translator.translate(lines, shortlist=shortlist)
        table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15)
        print(f"profile: beam {beam}, int8, shortlist {shortlist}, 1,000 lines\n{table}", file=sys.stderr)


def _nmt_steady(
    model: Path, source: Path, out: Path, precision: str, beam: int, shortlist: bool, repeats: int, measured
) -> dict:
    """Decoding alone, in this process, with the command's default workers (after a warm-up)."""
    import torch

    from nmt_cli.decoding.translator import load_translator
    from nmt_cli.decoding.workers import decoding_workers
    from nmt_cli.device import configure_cpu
    from nmt_cli.user_settings import DecodeOverrides

    device = torch.device("cpu")
    workers = decoding_workers(0, 0, device)
    configure_cpu(1 if workers > 1 else 0)
    overrides = DecodeOverrides(beam=beam, lenpen=1.0, lenpen_style="fairseq", shortlist=shortlist)
    translator = load_translator([model], device, precision, overrides)
    translator.start_workers(workers)
    lines = source.read_text(encoding="utf-8").splitlines()
    try:
        translator.translate(lines[:200], batch_tokens=BATCH_TOKENS)  # warm-up
        seconds = []
        for _ in range(repeats):
            started = time.perf_counter()
            text = translator.translate(lines, batch_tokens=BATCH_TOKENS)
            seconds.append(time.perf_counter() - started)
    finally:
        translator.close()
    steady_out = out.with_suffix(".steady.hyp")
    steady_out.write_text("".join(t + "\n" for t in text), encoding="utf-8")
    return measured(steady_out, seconds)


def _export(model: Path, out: Path, quantization: str) -> Path:
    nmt("export", "-m", str(model), "-o", str(out), "--force", "--quantization", quantization)
    return out


def _startup(model: Path, work: Path) -> dict:
    """`nmt translate` on one empty line (interpreter start, imports and model load) against a
    process that only imports torch, in turn, pair by pair; medians. Both end with `os._exit`, as
    `nmt` does after a translation, so that neither pays torch's teardown."""
    empty = work / "empty.en"
    empty.write_text("\n", encoding="utf-8")
    args = ["translate", "-m", str(model), "-i", str(empty), "-o", str(work / "empty.hyp")]
    only_torch = [sys.executable, "-c", "import os, torch; os._exit(0)"]
    whole, bare = [], []
    for _ in range(STARTUP_PAIRS):
        whole.append(nmt(*args)[0])
        started = time.perf_counter()
        subprocess.run(only_torch, check=True)
        bare.append(time.perf_counter() - started)
    return {
        "startup_load_s": round(statistics.median(whole), 3),
        "import_torch_s": round(statistics.median(bare), 3),
        "startup_load_minus_import_torch_s": round(
            statistics.median(a - b for a, b in zip(whole, bare, strict=True)), 3
        ),
    }


if __name__ == "__main__":
    main()
