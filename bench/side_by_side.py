"""fairseq beside nmt on the same machine, in the same run: `bench/gpu_check.py`'s side_by_side step.

Both toolkits train the paper's base model (fp16, 25k-token batches, an 8k joint sentencepiece
BPE made once by `nmt prepare` and used by both) on the same Multi30k files for the same seconds;
each one's target tokens/s is the median of its log records after the first two (fairseq's `wps`,
nmt's `tokens_per_s`: both count target tokens). Then the model fairseq trained is decoded twice,
beam 5 over the same test lines: by fairseq-generate and by `nmt translate`'s engine after
`nmt import` (the same weights); the report gives each one's sentences/s over its decoding loop
(fairseq's own timer, which counts its generation calls only; the Translator's call after a
warm-up, sentencepiece included) and over the whole process, and how many lines are identical.

It needs fairseq importable (fairseq-fixed 0.12.3.1; `../shared/gpu/prep.sh` gathers the wheels)
and raw Multi30k: train, val and test_2016_flickr .en/.de. On CPU it shrinks the model to a tiny
one and the data to 3,000 lines, to check the step itself.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
CUDA = torch.cuda.is_available()
Figures = dict[str, Any]

# On CPU both train a tiny model: the step is checked, not measured.
FAIRSEQ_TINY = ["--encoder-layers", "1", "--decoder-layers", "1", "--encoder-embed-dim", "32",
                "--decoder-embed-dim", "32", "--encoder-ffn-embed-dim", "64", "--decoder-ffn-embed-dim", "64",
                "--encoder-attention-heads", "2", "--decoder-attention-heads", "2"]  # fmt: skip
NMT_TINY = ["model.encoder_layers=1", "model.decoder_layers=1", "model.d_model=32", "model.d_ff=64",
            "model.heads=2", "model.d_k=16", "model.d_v=16"]  # fmt: skip


def fairseq_available() -> bool:
    try:
        import fairseq  # noqa: F401
    except Exception:
        return False
    return True


def run(command: list[str], log: Path, timeout: float) -> float:
    """Run `command` with its output in `log`; its wall seconds. Raise with the log's tail if it fails."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    if "fairseq_cli" in command[2]:  # fairseq 0.12 pickles its options: a checkpoint made here, trusted
        env["TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"] = "1"
    start = time.perf_counter()
    with log.open("w", encoding="utf-8") as out:
        proc = subprocess.run(
            command, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=timeout, cwd=ROOT
        )
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        tail = log.read_text(encoding="utf-8", errors="replace")[-1500:]
        raise RuntimeError(f"{' '.join(command[:3])} exited {proc.returncode}: {tail}")
    return seconds


def raw_corpus(data: Path, work: Path) -> Path:
    """The Multi30k files under the names below, cut to 3,000 training lines on CPU."""
    raw = work / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    for split, name in (("train", "train"), ("valid", "val"), ("test", "test_2016_flickr")):
        for lang in ("en", "de"):
            lines = (data / f"{name}.{lang}").read_text(encoding="utf-8").splitlines(keepends=True)
            if not CUDA:
                lines = lines[: 3000 if split == "train" else 100]
            (raw / f"{split}.{lang}").write_text("".join(lines), encoding="utf-8")
    return raw


def fairseq_corpus(raw: Path, spm_model: Path, work: Path, timeout: float) -> Path:
    """The same lines in the same pieces, binarized by fairseq-preprocess with a joined dictionary."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(spm_model))
    pieces = work / "pieces"
    pieces.mkdir(exist_ok=True)
    for split in ("train", "valid", "test"):
        for lang in ("en", "de"):
            lines = (raw / f"{split}.{lang}").read_text(encoding="utf-8").splitlines()
            encoded = sp.encode(lines, out_type=str)
            (pieces / f"{split}.{lang}").write_text(
                "".join(" ".join(p) + "\n" for p in encoded), encoding="utf-8"
            )
    binary = work / "fairseq-bin"
    run([sys.executable, "-m", "fairseq_cli.preprocess", "--source-lang", "en", "--target-lang", "de",
         "--trainpref", str(pieces / "train"), "--validpref", str(pieces / "valid"),
         "--testpref", str(pieces / "test"), "--destdir", str(binary), "--joined-dictionary",
         "--workers", str(min(16, os.cpu_count() or 1))],
        work / "fairseq_preprocess.log", timeout)  # fmt: skip
    return binary


def median_after_two(values: list[float]) -> float:
    kept = values[2:] or values
    return statistics.median(kept)


def train_fairseq(binary: Path, work: Path, seconds: float) -> tuple[float, Path, int]:
    """fairseq-train for `seconds`; (median target tokens/s, checkpoint, records)."""
    save = work / "fairseq-run"
    log = work / "fairseq_train.log"
    precision = ["--fp16"] if CUDA else []
    command = [
        sys.executable, "-m", "fairseq_cli.train", str(binary), "--task", "translation",
        "--source-lang", "en", "--target-lang", "de", "--arch", "transformer", "--share-all-embeddings",
        "--dropout", "0.1", "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1",
        "--optimizer", "adam", "--adam-betas", "(0.9, 0.98)", "--adam-eps", "1e-9", "--lr", "7e-4",
        "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "4000",
        "--max-tokens", "25000" if CUDA else "2000",
        *precision, "--max-update", "1000000", "--disable-validation", "--save-dir", str(save),
        "--no-epoch-checkpoints", "--save-interval", "100000",  # one checkpoint, at the time limit
        "--log-format", "json", "--log-interval", "10" if CUDA else "2", "--seed", "1", "--num-workers", "2",
        "--stop-time-hours", str(seconds / 3600), *([] if CUDA else ["--cpu", *FAIRSEQ_TINY]),
    ]  # fmt: skip
    run(command, log, seconds + 300)
    rates = []
    for line in log.read_text(encoding="utf-8").splitlines():
        if "train_inner" in line and '"wps"' in line:
            rates.append(float(json.loads(line[line.index("{") :])["wps"]))
    if not rates:
        raise RuntimeError(f"fairseq-train logged no wps records ({log})")
    return median_after_two(rates), save / "checkpoint_last.pt", len(rates)


def train_nmt(data: Path, work: Path, seconds: float) -> tuple[float, int]:
    """`nmt train` with the base recipe for `seconds`; (median target tokens/s, records)."""
    out = work / "nmt-run"
    sets = [
        f"train.max_tokens={25000 if CUDA else 2000}", f"train.update_tokens={25000 if CUDA else 2000}",
        f"train.max_minutes={seconds / 60}", f"train.log_every_updates={10 if CUDA else 2}",
        "train.valid_every_updates=0", "train.save_every_minutes=0", "train.save_every_updates=0",
        *([] if CUDA else NMT_TINY),
    ]  # fmt: skip
    device = (
        ["--device", "cuda", "--precision", "fp16"] if CUDA else ["--device", "cpu", "--precision", "fp32"]
    )
    command = [sys.executable, "-m", "nmt_cli", "-q", "train", "--data", str(data), "--out", str(out),
               "--recipe", str(ROOT / "recipes" / "wmt14_en_de" / "base.toml"), *device,
               *(x for item in sets for x in ("--set", item))]  # fmt: skip
    run(command, work / "nmt_train.log", seconds + 300)
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    rates = [r["tokens_per_s"] for r in records if "tokens_per_s" in r]
    if not rates:
        raise RuntimeError(f"nmt train wrote no tokens_per_s records ({out / 'metrics.jsonl'})")
    return median_after_two(rates), len(rates)


GENERATE_RATE = re.compile(r"Translated ([\d,]+) sentences .* \(([\d.]+) sentences/s")


def decode_fairseq(binary: Path, model: Path, work: Path) -> tuple[Figures, list[str]]:
    """fairseq-generate, beam 5, over the binarized test set: its own timer and the process's."""
    log = work / "fairseq_generate.log"
    command = [sys.executable, "-m", "fairseq_cli.generate", str(binary), "--path", str(model),
               "--gen-subset", "test", "--beam", "5", "--max-tokens", "8192", "--remove-bpe", "sentencepiece",
               *(["--fp16"] if CUDA else ["--cpu"])]  # fmt: skip
    wall = run(command, log, 900)
    text = log.read_text(encoding="utf-8")
    found = GENERATE_RATE.search(text)
    if found is None:
        raise RuntimeError(f"fairseq-generate printed no 'Translated N sentences' line ({log})")
    n, rate = int(found.group(1).replace(",", "")), float(found.group(2))  # over its generation calls
    hyps: dict[int, str] = {}
    for line in text.splitlines():
        if line.startswith("D-"):
            head, _, hyp = line.split("\t", 2)
            hyps[int(head[2:])] = hyp
    lines = [hyps.get(i, "") for i in range(n)]
    return {"sentences": n, "loop_s": round(n / rate, 3), "sentences_per_s": round(rate, 1),
            "process_s": round(wall, 2)}, lines  # fmt: skip


def decode_nmt(imported: Path, source: list[str], work: Path) -> tuple[Figures, list[str]]:
    """The same model through `nmt translate` (whole process) and through its Translator after a
    warm-up (the decoding loop alone), beam 5, fairseq's length rules from the import. The loop
    runs as it runs on this device and with finished sentences pruned at every step (on a GPU the
    search prunes every `PRUNE_EVERY_ON_DEVICE` steps, reading nothing back in between), twice
    each, alternated; the faster of each pair counts."""
    from nmt_cli import Translator
    from nmt_cli.decoding import search

    device, precision = ("cuda", "fp16") if CUDA else ("cpu", "fp32")
    src = work / "test.en"
    src.write_text("".join(line + "\n" for line in source), encoding="utf-8")
    hyp = work / "nmt.test.de"
    wall = run([sys.executable, "-m", "nmt_cli", "-q", "translate", "-m", str(imported), "-i", str(src),
                "-o", str(hyp), "--beam", "5", "--batch-tokens", "8192", "--device", device,
                "--precision", precision], work / "nmt_translate.log", 900)  # fmt: skip
    translator = Translator.load(imported, device=device, precision=precision)
    translator.translate(source[:16], beam=5)
    loops: dict[str, list[float]] = {"loop_s": [], "loop_s_pruning_every_step": []}
    outputs = {}
    default = search.PRUNE_EVERY_ON_DEVICE
    try:
        for name, every in 2 * (("loop_s", default), ("loop_s_pruning_every_step", 1)):  # alternated
            search.PRUNE_EVERY_ON_DEVICE = every
            if CUDA:
                torch.cuda.synchronize()
            start = time.perf_counter()
            outputs[name] = translator.translate(source, beam=5)
            if CUDA:
                torch.cuda.synchronize()
            loops[name].append(time.perf_counter() - start)
    finally:
        search.PRUNE_EVERY_ON_DEVICE = default
        translator.close()
    lines = hyp.read_text(encoding="utf-8").splitlines()
    n, loop, every_step = len(source), min(loops["loop_s"]), min(loops["loop_s_pruning_every_step"])
    same = sum(a == b for a, b in zip(outputs["loop_s"], outputs["loop_s_pruning_every_step"], strict=True))
    return {"sentences": n, "loop_s": round(loop, 3), "sentences_per_s": round(n / loop, 1),
            "process_s": round(wall, 2), "prune_every": search.prune_interval(torch.device(device)),
            "loop_s_pruning_every_step": round(every_step, 3),
            "pruning_every_step_over_default": round(every_step / loop, 3),
            "identical_lines_either_way": same}, lines  # fmt: skip


def side_by_side(data: Path | None, work: Path, seconds: float) -> Figures:
    """Train both for `seconds`, decode fairseq's model with both; figures and ratios."""
    if not fairseq_available():
        return {"skipped": "fairseq is not importable (../shared/gpu/prep.sh gathers its wheels)"}
    if data is None or not (data / "train.en").is_file():
        return {"skipped": f"no Multi30k at {data} (give --data DIR with train/val/test_2016_flickr .en/.de)"}
    work.mkdir(parents=True, exist_ok=True)
    raw = raw_corpus(data, work)
    prepared = work / "nmt-data"
    run([sys.executable, "-m", "nmt_cli", "-q", "prepare", "--train", str(raw / "train"), "--valid",
         str(raw / "valid"), "--test", str(raw / "test"), "--src", "en", "--tgt", "de",
         "--out", str(prepared),
         "--vocab-size", "8000" if CUDA else "1000", "--workers", str(min(8, os.cpu_count() or 1))],
        work / "nmt_prepare.log", 900)  # fmt: skip
    binary = fairseq_corpus(raw, prepared / "spm.model", work, 900)

    fairseq_tps, fairseq_model, fairseq_records = train_fairseq(binary, work, seconds)
    nmt_tps, nmt_records = train_nmt(prepared, work, seconds)
    training = {
        "model": "base" if CUDA else "tiny", "precision": "fp16" if CUDA else "fp32", "seconds_each": seconds,
        "fairseq_tokens_per_s": round(fairseq_tps), "nmt_tokens_per_s": round(nmt_tps),
        "nmt_over_fairseq": round(nmt_tps / fairseq_tps, 3), "records": [fairseq_records, nmt_records],
    }  # fmt: skip

    # fairseq's model as `nmt import` reads it: checkpoint, dictionaries, sentencepiece model.
    folder = work / "fairseq-model"
    folder.mkdir(exist_ok=True)
    shutil.copy(fairseq_model, folder / "checkpoint.pt")
    for name in ("dict.en.txt", "dict.de.txt"):
        shutil.copy(binary / name, folder / name)
    shutil.copy(prepared / "spm.model", folder / "spm.model")
    imported = work / "imported.pt"
    run([sys.executable, "-m", "nmt_cli", "-q", "import", str(folder / "checkpoint.pt"), "-o", str(imported)],
        work / "nmt_import.log", 600)  # fmt: skip
    fairseq_decode, fairseq_lines = decode_fairseq(binary, fairseq_model, work)
    source = (raw / "test.en").read_text(encoding="utf-8").splitlines()
    nmt_decode, nmt_lines = decode_nmt(imported, source, work)
    same = sum(a == b for a, b in zip(fairseq_lines, nmt_lines, strict=False))
    decoding = {
        "beam": 5, "fairseq": fairseq_decode, "nmt": nmt_decode,
        "nmt_over_fairseq_loop": round(nmt_decode["sentences_per_s"] / fairseq_decode["sentences_per_s"], 3),
        "nmt_over_fairseq_process": round(fairseq_decode["process_s"] / nmt_decode["process_s"], 3),
        "identical_lines": same, "lines": len(source),
    }  # fmt: skip
    return {"training": training, "decoding": decoding}
