"""Load on `nmt serve`: 1, 4, 16 and 64 concurrent clients sending one-line requests over loopback.

Starts `nmt serve` on 127.0.0.1 with the benchmark's 15-minute model (or --model), and for
each client count sends single-line requests (test_2016_flickr.en, in order, each line once, or
until --seconds) from one of two kinds of client, one connection per client: `asyncio` (an
asyncio loop with httpx) and `threads` (one thread per client with the standard library's
http.client). Reports sentences/s, p50/p95/p99 latency, errors, 503s, the server's batches (and
how many merged several requests), how many answers differ from an offline
`Translator.translate` of the same lines at the same beam (and how many of those are another
line's translation: misrouted), and the CPU time per request of the
client, of the server's HTTP process and of its decoding workers: clients and server share the
machine's cores, so a client's own CPU time counts against the server. The offline figures come
first: sentences/s over the same lines, and the p50 latency of a direct one-line call, so that
the targets can be checked: 64 clients at >= 0.6x the offline sentences/s with a p99 <= 1 s,
16 clients at >= 0.5x, and a lone request's p50 (1 client) at <= 1.2x the direct call's.
    .venv/bin/python bench/serve_load.py [--model M.pt] [--clients 1 4 16 64] [--seconds 30]
        [--client asyncio threads]
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
from pathlib import Path

import httpx
import numpy as np
import torch
from common import DEFAULT_DATA, ROOT, THREADS, emit
from time_to_bleu import trained_model

from nmt_cli.decoding.loading import default_precision
from nmt_cli.decoding.translator import Translator
from nmt_cli.decoding.workers import decoding_workers
from nmt_cli.device import configure_cpu

LISTENING = re.compile(r"listening on (http://\S+)")
MAX_CLIENTS = 1024  # the server's --max-client-connections: more than any client level


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--minutes", type=float, default=15.0, help="training time of the cached model")
    parser.add_argument("--model", type=Path, help="default: the cached 15-minute recipe model")
    parser.add_argument(
        "--precision", help="of the server and the offline reference (default: nmt's own on this CPU)"
    )
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 4, 16, 64])
    parser.add_argument("--lines", type=int, default=1000, help="test lines used (each sent once a level)")
    parser.add_argument("--seconds", type=float, default=30.0, help="at most this long per client count")
    parser.add_argument("--max-wait-ms", type=float, help="the server's (default: its own default)")
    parser.add_argument("--workers", type=int, help="the server's decoding workers (default: its own)")
    parser.add_argument("--client", nargs="+", choices=["asyncio", "threads"], default=["asyncio", "threads"])
    parser.add_argument(
        "--overload",
        type=int,
        default=8,
        help="then 64 thread clients on a server of this --max-queue (0: skip)",
    )
    args = parser.parse_args(argv)
    args.precision = args.precision or default_precision(torch.device("cpu"))
    model = args.model or trained_model(args.data, "recipe", args.minutes)[0]
    lines = (args.data / "test_2016_flickr.en").read_text(encoding="utf-8").splitlines()[: args.lines]
    result: dict = {"serve_precision": args.precision, "serve_beam": args.beam, "serve_model": str(model)}
    reference = offline_figures(model, lines, args, result)
    server, url = start_server(model, args)
    try:
        for kind in args.client:
            for clients in args.clients:
                result.update(load(url, server.pid, lines, reference, clients, kind, args))
    finally:
        server.send_signal(signal.SIGTERM)
        result["serve_exit_code"] = server.wait(120)
    if args.overload:
        result.update(overload(model, lines, reference, args))
    offline = result["serve_offline_sent_s"]
    for kind in args.client:
        for clients in (16, 64):
            ratio = _ratio(result.get(f"serve_{kind}_c{clients}_sent_s"), offline)
            result[f"serve_{kind}_c{clients}_vs_offline"] = ratio
        lone = _ratio(result.get(f"serve_{kind}_c1_p50_ms"), result["serve_direct_p50_ms"])
        result[f"serve_{kind}_lone_p50_vs_direct"] = lone
    emit(result)
    return result


def offline_figures(model: Path, lines: list[str], args: argparse.Namespace, result: dict) -> list[str]:
    """In this process: the p50 latency of a direct one-line `Translator.translate` call (one
    process, as a Python user calls it), then the offline sentences/s over the same lines with the
    decoding workers `nmt translate` uses by default; returns the translations, which the server's
    answers are compared with."""
    configure_cpu(THREADS)
    translator = Translator.load(model, device="cpu", precision=args.precision)
    reference = translator.translate(lines, beam=args.beam)
    direct = []
    for line in lines[:100]:
        start = time.perf_counter()
        translator.translate([line], beam=args.beam)
        direct.append(time.perf_counter() - start)
    result["serve_direct_p50_ms"] = round(1000 * float(np.percentile(direct, 50)), 1)
    torch.set_num_threads(1)  # as `nmt translate` does before forking its workers
    workers = decoding_workers(0, 0, torch.device("cpu"))
    translator.start_workers(workers)
    try:
        translator.translate(lines[:100], beam=args.beam)  # warm-up
        start = time.perf_counter()
        translator.translate(lines, beam=args.beam)
        result["serve_offline_sent_s"] = round(len(lines) / (time.perf_counter() - start), 1)
    finally:
        translator.close()
    result["serve_workers"] = workers
    return reference


def start_server(
    model: Path, args: argparse.Namespace, max_queue: int | None = None
) -> tuple[subprocess.Popen[str], str]:
    command = [sys.executable, "-m", "nmt_cli", "serve", "-m", str(model), "--port", "0", "--device", "cpu"]
    command += ["--precision", args.precision]  # and the default workers, as `nmt translate`
    # Every client connects from 127.0.0.1: the server's per-address bound (32 by default) would
    # refuse the 64-client levels' connections with 429 and measure refusals instead of load.
    command += ["--max-client-connections", str(MAX_CLIENTS)]
    if args.workers is not None:
        command += ["--workers", str(args.workers)]
    if args.max_wait_ms is not None:
        command += ["--max-wait-ms", f"{args.max_wait_ms:g}"]
    if max_queue is not None:
        command += ["--max-queue", str(max_queue), "--max-lines", str(max_queue)]
    server = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    found: list[str] = []
    ready = threading.Event()

    def read() -> None:  # drains the server's log for as long as it runs
        assert server.stderr is not None
        for line in server.stderr:
            match = LISTENING.search(line)
            if match and not found:
                found.append(match.group(1))
                ready.set()
        ready.set()

    threading.Thread(target=read, daemon=True).start()
    ready.wait(300)
    if not found:
        server.kill()
        raise SystemExit(f"bench: `{' '.join(command)}` did not start")
    return server, found[0]


def load(
    url: str,
    server_pid: int,
    lines: list[str],
    reference: list[str],
    clients: int,
    kind: str,
    args: argparse.Namespace,
) -> dict:
    """Send each line once from `clients` concurrent clients of `kind` (or until --seconds)."""
    before = httpx.get(f"{url}/health").json()
    server_before, workers_before = _cpu_seconds(server_pid)
    client_before = time.process_time()
    run = _async_clients if kind == "asyncio" else _thread_clients
    latencies, statuses, answers, seconds = run(url, lines, clients, args)
    client_cpu = time.process_time() - client_before
    server_after, workers_after = _cpu_seconds(server_pid)
    after = httpx.get(f"{url}/health").json()
    ok = statuses.count(200)
    tag = f"serve_{kind}_c{clients}"
    per_request = 1000 / max(len(statuses), 1)
    figures = {
        f"{tag}_sent_s": round(ok / seconds, 1),
        f"{tag}_requests": len(statuses),
        f"{tag}_errors": len(statuses) - ok - statuses.count(503),
        f"{tag}_503": statuses.count(503),
        f"{tag}_differ": sum(answer != [reference[i]] for i, answer in answers),
        f"{tag}_misrouted": misrouted(answers, reference),
        f"{tag}_batches": after["batches"] - before["batches"],
        f"{tag}_merged_batches": after["merged_batches"] - before["merged_batches"],
        f"{tag}_client_cpu_ms_per_request": round(client_cpu * per_request, 2),
        f"{tag}_server_cpu_ms_per_request": round((server_after - server_before) * per_request, 2),
        f"{tag}_workers_cpu_ms_per_request": round((workers_after - workers_before) * per_request, 2),
    }
    for p in (50, 95, 99):
        figures[f"{tag}_p{p}_ms"] = round(1000 * float(np.percentile(latencies, p)), 1) if latencies else None
    return figures


def overload(model: Path, lines: list[str], reference: list[str], args: argparse.Namespace) -> dict:
    """64 thread clients that do not back off, against a server whose queue holds --overload
    lines, for --seconds twice: the 503s, any other error, and the server's resident memory
    (with its workers) after the first round and after the second, which should not grow."""
    server, url = start_server(model, args, max_queue=args.overload)
    many, expected = lines * 20, reference * 20  # 503s are quick: enough lines for --seconds
    try:
        load(url, server.pid, many, expected, 64, "threads", args)
        before = _rss_mb(server.pid)
        figures = load(url, server.pid, many, expected, 64, "threads", args)
        figures = {k.replace("serve_threads_c64", "serve_overload"): v for k, v in figures.items()}
        retry = httpx.post(f"{url}/translate", json={"text": lines[:1]})  # a lone one is served
        figures["serve_overload_rss_mb_before"] = before
        figures["serve_overload_rss_mb_after"] = _rss_mb(server.pid)
        figures["serve_overload_lone_status"] = retry.status_code
        figures["serve_overload_max_queue"] = args.overload
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(120)
    return figures


def _rss_mb(pid: int) -> float:
    """Resident memory of the server process and its workers, in MB."""
    total = 0
    for p in [pid, *_children(pid)]:
        try:
            status = Path(f"/proc/{p}/status").read_text()
        except OSError:
            continue
        total += int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:")))
    return round(total / 1024, 1)


def _cpu_seconds(pid: int) -> tuple[float, float]:
    """CPU time (user + system) of the process `pid`, and of its child processes (the decoding
    workers), from /proc."""
    tick = os.sysconf("SC_CLK_TCK")

    def own(p: int) -> float:
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # ended meanwhile
            return 0.0
        return (int(fields[11]) + int(fields[12])) / tick

    return own(pid), sum(own(c) for c in _children(pid))


def _children(pid: int) -> list[int]:
    """The child processes of `pid` (the server's decoding workers)."""
    children = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            children += [int(c) for c in (task / "children").read_text().split()]
        except OSError:  # a thread that ended meanwhile
            continue
    return children


def _async_clients(
    url: str, lines: list[str], clients: int, args: argparse.Namespace
) -> tuple[list[float], list[int], list[tuple[int, list[str]]], float]:
    return asyncio.run(_clients(url, lines, clients, args))


def misrouted(answers: list[tuple[int, list[str]]], reference: list[str]) -> int:
    """Answers that are not their line's offline translation but another line's: a request
    given another's result. (An answer that differs from every offline translation is a
    batch's rounding turning the beam search, counted only as differing.)"""
    lines_of: dict[str, set[int]] = {}
    for i, text in enumerate(reference):
        lines_of.setdefault(text, set()).add(i)
    return sum(
        answer != [reference[i]] and len(answer) == 1 and bool(lines_of.get(answer[0], set()) - {i})
        for i, answer in answers
    )


async def _clients(
    url: str, lines: list[str], clients: int, args: argparse.Namespace
) -> tuple[list[float], list[int], list[tuple[int, list[str]]], float]:
    latencies: list[float] = []
    statuses: list[int] = []
    answers: list[tuple[int, list[str]]] = []  # (line, the translations answered)
    todo = iter(range(len(lines)))
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=300) as client:
        for line in lines[: 2 * clients]:  # warm-up: connections open, the server's first batches
            await client.post("/translate", json={"text": [line], "beam": args.beam})
        start = time.perf_counter()
        deadline = start + args.seconds

        async def one_client() -> None:
            for i in todo:
                if time.perf_counter() > deadline:
                    return
                sent = time.perf_counter()
                try:
                    response = await client.post("/translate", json={"text": [lines[i]], "beam": args.beam})
                except httpx.HTTPError:
                    statuses.append(-1)
                    continue
                statuses.append(response.status_code)
                if response.status_code == 200:
                    latencies.append(time.perf_counter() - sent)
                    answers.append((i, response.json()["translations"]))

        await asyncio.gather(*(one_client() for _ in range(clients)))
        return latencies, statuses, answers, time.perf_counter() - start


def _thread_clients(
    url: str, lines: list[str], clients: int, args: argparse.Namespace
) -> tuple[list[float], list[int], list[tuple[int, list[str]]], float]:
    """One thread per client, each with its own keep-alive connection (http.client)."""
    address = urllib.parse.urlsplit(url)
    latencies: list[float] = []
    statuses: list[int] = []
    answers: list[tuple[int, list[str]]] = []
    todo = iter(range(len(lines)))
    lock = threading.Lock()
    headers = {"Content-Type": "application/json"}
    begin, go = threading.Barrier(clients + 1), threading.Event()
    deadline = [0.0]

    def one_client() -> None:
        connection = http.client.HTTPConnection(address.hostname, address.port, timeout=300)
        connection.request("POST", "/translate", json.dumps({"text": [lines[0]]}), headers)  # warm-up
        connection.getresponse().read()
        begin.wait()
        go.wait()
        while True:
            with lock:
                i = next(todo, None)
            if i is None or time.perf_counter() > deadline[0]:
                break
            sent = time.perf_counter()
            try:
                connection.request(
                    "POST", "/translate", json.dumps({"text": [lines[i]], "beam": args.beam}), headers
                )
                response = connection.getresponse()
                body = response.read()
            except (OSError, http.client.HTTPException):
                with lock:
                    statuses.append(-1)
                connection.close()
                connection = http.client.HTTPConnection(address.hostname, address.port, timeout=300)
                continue
            took = time.perf_counter() - sent
            with lock:
                statuses.append(response.status)
                if response.status == 200:
                    latencies.append(took)
                    answers.append((i, json.loads(body)["translations"]))
        connection.close()

    threads = [threading.Thread(target=one_client) for _ in range(clients)]
    for thread in threads:
        thread.start()
    begin.wait()
    start = time.perf_counter()
    deadline[0] = start + args.seconds
    go.set()
    for thread in threads:
        thread.join()
    return latencies, statuses, answers, time.perf_counter() - start


def _ratio(value: float | None, base: float) -> float | None:
    return None if value is None or not base else round(value / base, 3)


if __name__ == "__main__":
    main()
