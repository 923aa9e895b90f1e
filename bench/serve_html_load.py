"""GET /health on `nmt serve` while clients flood it with tag-heavy HTML.

Starts `nmt serve` on 127.0.0.1 (an ephemeral port) with a tiny copy-task model (trained here in
seconds and cached under bench/work, or --model), then runs --clients clients in a process of
their own, each sending, in turn and without pause, a request of HTML, on nmt's route and
LibreTranslate's alternately:

- over the bound: 256 lines of "<b><i>.</i></b>" * 133 (136,192 tags), which --max-html-tags
  (32,768) refuses with 413 before any work;
- heavy under the bound: 60 such lines (31,920 tags), parsed and rebuilt on the server's text
  lane (200, or 503 while the lane holds as much as it may);
- words: 32 lines of a sentence in markup, parsed, decoded and rebuilt.

Meanwhile this process asks GET /health every 20 ms on a connection of its own and times each
answer from when it was due (a stall delays every request due during it); first it does so on
the idle server. Prints JSON: the median, p90, p99 and max of
/health (ms) idle and under load, and the count of each answer's status for each kind of request.
The target: a median under load of at most 50 ms.

    .venv/bin/python bench/serve_html_load.py [--model M.pt] [--clients 8] [--seconds 30]
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import multiprocessing
import random
import signal
import statistics
import subprocess
import sys
import time
import urllib.parse
from collections import Counter
from pathlib import Path

import httpx
from common import ROOT, WORK, emit
from serve_load import start_server

TAG_HEAVY = "<b><i>.</i></b>" * 133  # 532 tags in 1,995 characters: under --max-input-chars
WORDS = '<p>A <b>man</b> is <i>riding</i> a <a href="https://example.org">bike</a> in the park.</p>'
KINDS = {"over_bound": [TAG_HEAVY] * 256, "under_bound": [TAG_HEAVY] * 60, "words": [WORDS] * 32}
COPY_WORDS = "apple river stone cloud green music paper tiger silver window orange garden".split()
TINY = [  # the tests' tiny copy-task model: trained in seconds on one thread
    "model.encoder_layers=1", "model.decoder_layers=1", "model.d_model=32", "model.d_ff=64",
    "model.heads=2", "model.d_k=16", "model.d_v=16", "model.max_positions=64", "model.dropout=0.0",
    "train.max_tokens=600", "train.max_updates=30", "train.warmup=10", "train.save_every_minutes=0",
    "train.valid_bleu=false", "train.valid_every_updates=0",
]  # fmt: skip


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, help="default: a tiny copy-task model, trained once")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=30.0, help="of load")
    args = parser.parse_args(argv)
    model = args.model or tiny_model(WORK / "serve_html_load")
    options = argparse.Namespace(precision="fp32", workers=None, max_wait_ms=None)
    server, url = start_server(model, options)
    try:
        result: dict = {"clients": args.clients, "seconds": args.seconds}
        result["tags"] = {kind: sum(text.count("<") for text in texts) for kind, texts in KINDS.items()}
        result["health_idle_ms"] = summary(probe(url, until=time.monotonic() + 3))
        context = multiprocessing.get_context("spawn")
        statuses = context.Queue()
        load = context.Process(target=flood, args=(url, args.clients, args.seconds, statuses))
        load.start()
        time.sleep(1)  # the clients' process starts and connects
        result["health_ms"] = summary(probe(url, until=time.monotonic() + args.seconds - 2))
        result["statuses"] = statuses.get(timeout=args.seconds + 120)
        load.join(60)
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(60)
        except subprocess.TimeoutExpired:
            server.kill()
    result["target_median_ms"] = 50
    emit(result)
    return result


def tiny_model(work: Path) -> Path:
    """A copy-task model trained for a few updates (what it translates does not matter here)."""
    model = work / "run" / "checkpoints" / "checkpoint_last.pt"
    if model.exists():
        return model
    work.mkdir(parents=True, exist_ok=True)
    rng = random.Random(0)
    for split, count in (("train", 1000), ("valid", 20)):
        lines = "".join(" ".join(rng.choices(COPY_WORDS, k=rng.randint(1, 6))) + "\n" for _ in range(count))
        for side in ("src", "tgt"):
            (work / f"{split}.{side}").write_text(lines, encoding="utf-8")
    prepare = ["prepare", "--train", str(work / "train"), "--valid", str(work / "valid"), "--src", "src"]
    prepare += ["--tgt", "tgt", "--out", str(work / "data"), "--vocab-size", "100", "--no-byte-fallback"]
    train = ["train", "--data", str(work / "data"), "--out", str(work / "run"), "--device", "cpu"]
    train += ["--threads", "1", *(part for item in TINY for part in ("--set", item))]
    for command in (prepare, train):
        subprocess.run([sys.executable, "-m", "nmt_cli", "-q", *command], cwd=ROOT, check=True)
    return model


def probe(url: str, until: float, every: float = 0.02) -> list[float]:
    """Seconds of each GET /health, one due every `every` seconds, on one kept-alive connection;
    each counted from when it was due, not from when it could be sent: a server that stalls for a
    second delays fifty of them (one timed from its sending would hide the stall)."""
    where = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(where.hostname or "127.0.0.1", where.port, timeout=60)
    waits, due = [], time.perf_counter()
    last = due + until - time.monotonic()
    while due < last:  # every request due by then, however late the server lets it go
        time.sleep(max(0.0, due - time.perf_counter()))
        connection.request("GET", "/health")
        response = connection.getresponse()
        response.read()
        assert response.status == 200, response.status
        waits.append(time.perf_counter() - due)
        due += every
    connection.close()
    return waits


def summary(waits: list[float]) -> dict:
    ms = sorted(1000 * w for w in waits)
    return {
        "median": round(statistics.median(ms), 1),
        "p90": round(ms[int(0.9 * (len(ms) - 1))], 1),
        "p99": round(ms[int(0.99 * (len(ms) - 1))], 1),
        "max": round(ms[-1], 1),
        "samples": len(ms),
    }


def flood(url: str, clients: int, seconds: float, out: multiprocessing.Queue) -> None:
    """The clients (one process, one connection each), for `seconds`; puts the statuses' counts."""
    out.put(asyncio.run(_flood(url, clients, seconds)))


async def _flood(url: str, clients: int, seconds: float) -> dict:
    bodies = []
    for kind, texts in KINDS.items():
        for route in ("nmt", "libretranslate"):
            fields = {"text": texts} if route == "nmt" else {"q": texts}
            bodies.append((kind, json.dumps({**fields, "format": "html", "source": "src", "target": "tgt"})))
    counts: dict[str, Counter[int]] = {kind: Counter() for kind in KINDS}
    until = time.monotonic() + seconds

    async def client(first: int) -> None:
        async with httpx.AsyncClient(base_url=url, timeout=120) as session:
            turn = first
            while time.monotonic() < until:
                kind, body = bodies[turn % len(bodies)]
                headers = {"content-type": "application/json"}
                response = await session.post("/translate", content=body, headers=headers)
                counts[kind][response.status_code] += 1
                turn += 1

    await asyncio.gather(*(client(i) for i in range(clients)))
    return {kind: dict(sorted(found.items())) for kind, found in counts.items()}


if __name__ == "__main__":
    main()
