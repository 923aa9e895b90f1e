"""`nmt serve` with the tiny copy model, its app in process (`serving_in_process`) where requests
and answers are the subject, a real process on 127.0.0.1 where sockets, signals, worker processes
or the exit are: concurrent requests are merged into batches and each gets its own lines'
translations (equal to the Python API's), decode settings are never mixed in a batch, bad
requests get a 4xx naming the field and never reach the model, a full queue gives 503 with
Retry-After, a client that goes away disturbs no one, and SIGTERM finishes the requests in flight
and exits 0."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers import TrainedRun, nmt, nmt_command, one_thread, sentences, subprocess_env, wait_until
from serve_helpers import Server, running_server, serving_in_process

import nmt_cli
from nmt_cli.decoding.settings import Sampling
from nmt_cli.decoding.translator import Translator

MAX_LINES = 8
MAX_INPUT_CHARS = 200
WAIT_MS = 500  # long enough for requests sent together to share a batch on two busy cores


OPTIONS = ["--max-wait-ms", WAIT_MS, "--max-lines", MAX_LINES, "--max-input-chars", MAX_INPUT_CHARS]


@pytest.fixture(scope="module")
def server(trained: TrainedRun) -> Iterator[Server]:
    with serving_in_process(trained.checkpoint, *OPTIONS) as serving:
        yield serving


@pytest.fixture(scope="module")
def real_server(trained: TrainedRun) -> Iterator[Server]:
    """For the tests of what uvicorn and the process do: raw sockets, upgrades, signals."""
    with running_server(trained.checkpoint, *OPTIONS) as running:
        yield running


@pytest.fixture(scope="module")
def offline(trained: TrainedRun) -> Translator:
    with one_thread():
        return Translator.load(trained.checkpoint, device="cpu", precision="fp32")


def translate_offline(translator: Translator, lines: list[str], **settings: Any) -> list[str]:
    with one_thread():
        return translator.translate(lines, **settings)


def together(calls: list[Callable[[], httpx.Response]]) -> list[httpx.Response]:
    """Run the calls from one thread each, released at the same moment; their responses in order."""
    start = threading.Barrier(len(calls))
    responses: list[httpx.Response | None] = [None] * len(calls)

    def run(i: int) -> None:
        start.wait()
        responses[i] = calls[i]()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert all(r is not None for r in responses)
    return [r for r in responses if r is not None]


def test_health_and_info_describe_the_model(server: Server, trained: TrainedRun, offline: Translator) -> None:
    health = server.get("/health")
    assert health.status_code == 200 and health.json()["status"] == "ok"
    info = server.get("/info").json()
    assert info["models"] == [str(trained.checkpoint)]
    assert info["version"] == nmt_cli.__version__
    assert info["precision"] == "fp32" and info["device"] == "cpu"
    assert info["languages"] == ["src", "tgt"]
    assert info["src_vocab_size"] == offline.src_spm.get_piece_size() == 100
    assert info["model"][0]["d_model"] == 32 and info["decode"]["beam"] == 4
    assert info["limits"]["max_lines"] == MAX_LINES
    assert {"batches", "merged_batches", "requests"} <= set(info["stats"])


def test_concurrent_requests_are_merged_and_each_gets_its_own_lines(
    server: Server, offline: Translator
) -> None:
    lines = sentences(10, seed=11)
    requests = [[line] for line in lines] + [["", lines[0], "   ", lines[1]]]  # blank lines come back ""
    before = server.stats()
    responses = together([lambda text=text: server.post({"text": text}) for text in requests])
    after = server.stats()
    for text, response in zip(requests, responses, strict=True):
        assert response.status_code == 200, response.text
        assert response.json() == {"translations": translate_offline(offline, text)}
    assert responses[-1].json()["translations"][0] == responses[-1].json()["translations"][2] == ""
    assert after["requests"] - before["requests"] == len(requests)
    assert after["merged_batches"] > before["merged_batches"]
    assert after["batches"] - before["batches"] < len(requests)  # merging saved decode calls
    assert "batch of " in server.text()  # merged batches are logged


def test_requests_with_different_settings_never_share_a_batch(server: Server, offline: Translator) -> None:
    lines = sentences(8, seed=12)
    two_best = {"nbest": 2, "beam": 2}
    drawn, redrawn = {"sampling": "topk", "topk": 0, "temperature": 3.0}, {"sampling": "topk", "seed": 2}
    settings: list[dict[str, Any]] = [
        {},
        {},
        {"beam": 1},
        {"beam": 1},
        two_best,
        {"lenpen": 1.0},
        drawn,
        redrawn,
    ]
    before = server.stats()
    responses = together(
        [
            lambda line=line, s=s: server.post({"text": [line], **s})
            for line, s in zip(lines, settings, strict=True)
        ]
    )
    after = server.stats()
    assert all(r.status_code == 200 for r in responses), [r.text for r in responses]
    # Six distinct settings, sent together: mixing would need fewer than six decode calls.
    assert after["batches"] - before["batches"] >= 6
    for line, s, response in zip(lines, settings, responses, strict=True):
        got = response.json()["translations"]
        if s.get("nbest"):
            (hyps,) = got
            assert len(hyps) == 2 and hyps[0]["score"] >= hyps[1]["score"]
            nbest = offline.translate_nbest([line], 2, beam=2)[0]
            assert [h["text"] for h in hyps] == [text for text, _ in nbest]
        elif s.get("sampling"):
            sampling = Sampling(**{k: v for k, v in s.items() if k != "sampling"}, method=s["sampling"])
            assert got == translate_offline(offline, [line], sampling=sampling)
        else:
            assert got == translate_offline(offline, [line], beam=s.get("beam"), lenpen=s.get("lenpen"))


def test_sampled_translations_are_the_python_apis_whatever_the_batch(
    server: Server, offline: Translator
) -> None:
    lines = sentences(8, seed=13, min_words=3)
    draw = {"sampling": "topk", "topk": 0, "temperature": 3.0, "seed": 5}
    requests = [[line] for line in lines[:4]] + [lines[4:]]
    before = server.stats()
    responses = together([lambda text=text: server.post({"text": text, **draw}) for text in requests])
    after = server.stats()
    assert all(r.status_code == 200 for r in responses), [r.text for r in responses]
    got = [text for r in responses for text in r.json()["translations"]]
    want = translate_offline(offline, lines, sampling=Sampling("topk", topk=0, temperature=3.0, seed=5))
    assert got == want  # drawn in shared batches, yet each line's draw is its own
    assert after["merged_batches"] > before["merged_batches"]
    assert want != translate_offline(offline, lines, beam=1)  # drawn, not searched
    reseeded = server.post({"text": lines, **draw, "seed": 6})
    assert reseeded.status_code == 200 and reseeded.json()["translations"] != want


LONG = "a" * (MAX_INPUT_CHARS + 1)
BAD_REQUESTS = [
    (b"{not json", 400, "body: "),
    (b'{"text": ["\xff"]}', 400, "body: "),
    (b"[" * 5000 + b"]" * 5000, 400, "body: "),
    (b"[1, 2]", 422, "body: "),
    (b"{}", 422, "text: "),
    ({"txt": ["a"]}, 422, "txt: "),
    ({"text": []}, 422, "text: "),
    ({"text": "apple"}, 422, "text: "),
    ({"text": ["apple", 3]}, 422, "text: "),
    ({"text": [None]}, 422, "text: "),
    ({"text": ["apple"] * (MAX_LINES + 1)}, 422, "text: "),
    ({"text": ["apple", LONG]}, 422, "text[1]: "),
    (b'{"text": ["\\ud800"]}', 422, "text[0]: "),
    ({"text": ["apple"], "beam": 0}, 422, "beam: "),
    ({"text": ["apple"], "beam": "4"}, 422, "beam: "),
    ({"text": ["apple"], "beam": 2.5}, 422, "beam: "),
    ({"text": ["apple"], "beam": True}, 422, "beam: "),
    ({"text": ["apple"], "beam": 10_000}, 422, "beam: "),
    ({"text": ["apple"], "nbest": 0}, 422, "nbest: "),
    ({"text": ["apple"], "nbest": 3, "beam": 2}, 422, "nbest: "),
    ({"text": ["apple"], "lenpen": -1}, 422, "lenpen: "),
    ({"text": ["apple"], "lenpen": "high"}, 422, "lenpen: "),
    (b'{"text": ["apple"], "lenpen": NaN}', 422, "lenpen: "),
    (b" " * 100_000, 413, "body: "),
    ({"text": ["apple"], "sampling": "beam"}, 422, "sampling: "),
    ({"text": ["apple"], "topk": 5}, 422, "topk: "),
    ({"text": ["apple"], "sampling": "topk", "topp": 0.5}, 422, "topp: "),
    ({"text": ["apple"], "sampling": "topk", "topk": -1}, 422, "topk: "),
    ({"text": ["apple"], "sampling": "topk", "topk": 2.0}, 422, "topk: "),
    ({"text": ["apple"], "sampling": "topp", "topp": 0}, 422, "topp: "),
    ({"text": ["apple"], "sampling": "topp", "topp": 1.5}, 422, "topp: "),
    ({"text": ["apple"], "sampling": "topk", "temperature": 0}, 422, "temperature: "),
    ({"text": ["apple"], "sampling": "topk", "seed": "1"}, 422, "seed: "),
    ({"text": ["apple"], "sampling": "topk", "beam": 4}, 422, "beam: "),
    ({"text": ["apple"], "sampling": "topk", "nbest": 2}, 422, "nbest: "),
    ({"text": ["apple"], "sampling": "topk", "lenpen": 1.0}, 422, "lenpen: "),
    ({"text": ["apple"], "sampling": ["topk"]}, 422, "sampling: "),
    ({"text": ["apple"], "sampling": {"topk": 3}}, 422, "sampling: "),
    (b'{"text": ["apple"], "sampling": "topk", "temperature": Infinity}', 422, "temperature: "),
    (b'{"text": ["apple"], "sampling": "topk", "temperature": 1' + b"0" * 400 + b"}", 422, "temperature: "),
    (b'{"text": ["apple"], "beam": 1' + b"0" * 5000 + b"}", 400, "body: "),
]


def test_bad_requests_get_4xx_naming_the_field_and_never_reach_the_model(server: Server) -> None:
    before = server.stats()
    for body, status, field in BAD_REQUESTS:
        response = server.post(body)
        assert response.status_code == status, (body[:80], response.text)
        assert response.json()["error"].startswith(field), (body[:80], response.text)
    assert server.get("/translate").status_code == 405
    missing = server.post({"text": ["apple"]}, path="/nowhere")
    assert missing.status_code == 404 and missing.json()["error"].startswith("/nowhere: ")
    assert server.stats()["requests"] == before["requests"]  # none was queued
    assert "Traceback" not in server.text()


def test_head_answers_wherever_get_does(server: Server) -> None:
    for path in ("/", "/health", "/languages"):
        head = server.request("HEAD", path)
        assert head.status_code == 200 and head.content == b"", path
        assert head.headers["content-type"] == server.get(path).headers["content-type"]


def test_a_websocket_upgrade_is_answered_as_http(real_server: Server) -> None:
    upgrade = {"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13"}
    upgrade["Sec-WebSocket-Key"] = "dGhlIHNhbXBsZSBub25jZQ=="
    response = httpx.get(real_server.url + "/health", headers=upgrade, timeout=30)
    assert response.status_code == 200 and "batches" in response.json()  # no route for WebSockets


def test_bytes_that_are_not_http_get_a_json_400(real_server: Server) -> None:
    host, port = real_server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n")
        data = b""
        while chunk := sock.recv(4096):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 ") and b"content-type: application/json" in head
    assert json.loads(body)["error"].startswith("not a valid HTTP/1.1 request")


def test_a_request_larger_than_the_whole_queue_is_413_not_503(trained: TrainedRun) -> None:
    # Three texts of four sentences each: twelve lines for a queue of eight. A 503 would have
    # the client retry for ever.
    texts = [" ".join(f"{s.capitalize()}." for s in sentences(4, seed=seed)) for seed in (21, 22, 23)]
    with serving_in_process(trained.checkpoint, "--max-queue", 8, "--max-lines", 8) as server:
        response = server.post({"text": texts})
        assert response.status_code == 413, response.text
        assert "Retry-After" not in response.headers
        assert response.json()["error"] == (
            "text: 12 lines, more than the whole queue holds (8); send fewer or shorter texts per request"
        )
        assert server.post({"text": texts[:2]}).status_code == 200  # eight: they fit


def test_a_client_that_goes_away_does_not_disturb_the_batch(real_server: Server, offline: Translator) -> None:
    body = json.dumps({"text": ["apple river stone"]}).encode()
    host, port = real_server.url.removeprefix("http://").split(":")
    lines = sentences(3, seed=13)
    before = real_server.stats()

    def hang_up() -> httpx.Response:
        with socket.create_connection((host, int(port))) as sock:
            head = f"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n"
            sock.sendall(head.encode() + body)
            # Gone once its line is queued (the other request brings 3): a client that hangs up
            # before the server read its body is refused unqueued, which is not this test's case.
            wait_until(lambda: real_server.stats()["lines"] - before["lines"] in (1, 4), "the line queued")
        return httpx.Response(499)  # gone before the answer

    responses = together([hang_up, lambda: real_server.post({"text": lines})])
    assert responses[1].status_code == 200
    assert responses[1].json() == {"translations": translate_offline(offline, lines)}
    assert real_server.stats()["requests"] - before["requests"] == 2
    assert real_server.post({"text": ["green music"]}).json() == {"translations": ["green music"]}
    assert "Traceback" not in real_server.text()


def test_a_full_queue_answers_503_with_retry_after(trained: TrainedRun, offline: Translator) -> None:
    options = ["--max-queue", 2, "--max-lines", 2, "--max-wait-ms", 3000]
    with serving_in_process(trained.checkpoint, *options) as server:
        lines = sentences(2, seed=14)
        first: list[httpx.Response] = []
        waiting = threading.Thread(target=lambda: first.append(server.post({"text": lines})))
        waiting.start()
        server.wait_for_queued(2)  # the first request fills the queue for 3 s
        refused = server.post({"text": ["apple"]})
        waiting.join(60)
        assert refused.status_code == 503
        assert refused.headers["Retry-After"] == "1"
        assert refused.json()["error"].startswith("queue: ")
        assert first[0].status_code == 200
        assert first[0].json() == {"translations": translate_offline(offline, lines)}
        assert server.stats()["rejected"] == 1


def test_sigterm_finishes_requests_in_flight_and_exits_0(trained: TrainedRun, offline: Translator) -> None:
    with running_server(trained.checkpoint, "--max-wait-ms", 2000) as server:
        lines = sentences(3, seed=15)
        results: dict[int, httpx.Response] = {}

        def post(i: int) -> None:
            results[i] = server.post({"text": [lines[i]]})

        threads = [threading.Thread(target=post, args=(i,)) for i in range(3)]
        for thread in threads:
            thread.start()
        server.wait_for_queued(3)  # all three wait for their batch (2 s)
        server.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 30
        while True:  # until new connections are no longer accepted
            try:
                httpx.get(server.url + "/health", timeout=5)
            except httpx.TransportError:
                break
            assert time.monotonic() < deadline, "new connections were still accepted"
            time.sleep(0.05)
        refused_in_flight = not results  # refused while the three still waited for their answers
        for thread in threads:
            thread.join(60)
        assert server.process.wait(60) == 0
    assert refused_in_flight
    for i, line in enumerate(lines):
        assert results[i].status_code == 200
        assert results[i].json() == {"translations": translate_offline(offline, [line])}
    assert "served 3 requests in 1 batches (1 merged)" in server.text()


def test_without_the_extra_it_says_which_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "fastapi", None)  # `import fastapi` now fails
    assert nmt("serve", "-m", "no-such-model.pt") == 2  # the extra is checked before anything else
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nmt-cli[serve]" in err and "Traceback" not in err


@pytest.mark.parametrize(
    "options, named",
    [
        (["--max-lines", 10, "--max-queue", 5], "--max-lines"),
        (["--max-queue", 0], "--max-queue -> must be an integer from 1"),
        (["--max-batch-tokens", 0], "--max-batch-tokens"),
        (["--max-wait-ms", -1], "--max-wait-ms"),
        (["--request-timeout", 0], "--request-timeout -> must be a number from 0.1"),
        (["--max-client-connections", 0], "--max-client-connections -> must be an integer from 1"),
        (["--port", 70000], "--port"),
    ],
)
def test_bad_options_are_one_line_errors(
    trained: TrainedRun, capsys: pytest.CaptureFixture[str], options: list[object], named: str
) -> None:
    assert nmt("serve", "-m", trained.checkpoint, "--threads", 1, *options) == 2
    err = capsys.readouterr().err
    option, _, problem = named.partition(" -> ")
    assert err.count("\n") == 1 and option in err and problem in err


def test_a_missing_checkpoint_is_a_one_line_error(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    assert nmt("serve", "-m", tmp_path / "missing.pt", "--port", 0, "--threads", 1) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "missing.pt" in err


def test_a_port_in_use_is_a_one_line_error(trained: TrainedRun, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        assert nmt("serve", "-m", trained.checkpoint, "--port", port, "--threads", 1) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--port {port}" in err


def children(pid: int) -> set[int]:
    """The processes `pid` forked (its decoding workers), from /proc."""
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            found.update(int(child) for child in (task / "children").read_text().split())
    return found


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def kills_workers(test: Callable[..., None]) -> Callable[..., None]:
    """A test whose server's worker processes are killed, found through /proc: a server of its
    own each (4-7 s), so in the slow tier."""
    test = pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="reads /proc")(test)
    return pytest.mark.slow(test)


@kills_workers
def test_a_dead_worker_costs_no_request_and_the_port_closes_with_the_server(trained: TrainedRun) -> None:
    with running_server(trained.checkpoint, "--workers", 2) as server:
        workers = children(server.process.pid)
        assert len(workers) == 2
        assert server.post({"text": ["apple river"]}).json() == {"translations": ["apple river"]}
        victim = min(workers)
        os.kill(victim, signal.SIGKILL)  # idle, as an out-of-memory kill would leave it
        deadline = time.monotonic() + 10
        while alive(victim):  # dead before the next request comes
            assert time.monotonic() < deadline, "the killed worker is still running"
            time.sleep(0.02)
        answer = server.post({"text": ["stone cloud"]})
        assert answer.status_code == 200 and answer.json() == {"translations": ["stone cloud"]}
        assert server.stats()["status"] == "ok"
        fresh = children(server.process.pid)
        assert len(fresh) == 2 and not fresh & workers
        host, port = server.url.removeprefix("http://").rsplit(":", 1)
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(30) == 0
    deadline = time.monotonic() + 5
    while any(alive(pid) for pid in fresh) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(alive(pid) for pid in fresh)
    with pytest.raises(ConnectionRefusedError):  # no worker kept the listening socket open
        socket.create_connection((host, int(port)), timeout=5)


@kills_workers
def test_workers_die_with_a_killed_server(trained: TrainedRun) -> None:
    with running_server(trained.checkpoint, "--workers", 2) as server:
        workers = children(server.process.pid)
        assert len(workers) == 2
        server.process.kill()
        server.process.wait(30)
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(alive(pid) for pid in workers)  # no orphans left decoding nothing


@pytest.mark.slow  # two servers of their own racing for a port: about 7 s
def test_two_servers_started_at_once_on_one_port_one_serves_one_refuses(trained: TrainedRun) -> None:
    with socket.create_server(("127.0.0.1", 0)) as probe:
        port = probe.getsockname()[1]
    command = nmt_command("serve", "-m", trained.checkpoint, "--port", port, "--threads", 1, "--workers", 1)
    streams = {"stdin": subprocess.DEVNULL, "stdout": subprocess.DEVNULL, "stderr": subprocess.PIPE}
    servers = [subprocess.Popen(command, env=subprocess_env(), text=True, **streams) for _ in range(2)]
    try:
        deadline = time.monotonic() + 120
        while all(s.poll() is None for s in servers):
            assert time.monotonic() < deadline, "neither server was refused"
            time.sleep(0.1)
        loser = next(s for s in servers if s.poll() is not None)
        winner = next(s for s in servers if s is not loser)
        err = loser.communicate(timeout=30)[1]
        assert loser.returncode == 2 and err.count("\n") == 1 and f"--port {port}" in err, err
        answer = httpx.post(f"http://127.0.0.1:{port}/translate", json={"text": ["apple river"]}, timeout=120)
        assert answer.status_code == 200 and winner.poll() is None
    finally:
        for server in servers:
            if server.poll() is None:
                server.send_signal(signal.SIGTERM)
                server.wait(60)


def test_a_request_whose_client_went_away_is_not_decoded(real_server: Server) -> None:
    body = json.dumps({"text": ["apple river stone"]}).encode()
    host, port = real_server.url.removeprefix("http://").split(":")
    before = real_server.stats()
    with socket.create_connection((host, int(port))) as sock:  # gone while its request waits (500 ms)
        head = f"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n"
        sock.sendall(head.encode() + body)
        real_server.wait_for_queued(1)
    deadline = time.monotonic() + 10
    while real_server.stats()["cancelled"] == before["cancelled"]:
        assert time.monotonic() < deadline, real_server.text()
        time.sleep(0.05)
    after = real_server.stats()
    assert after["cancelled"] == before["cancelled"] + 1 and after["batches"] == before["batches"]
    assert real_server.post({"text": ["green music"]}).json() == {"translations": ["green music"]}


def cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


@kills_workers
def test_workers_killed_mid_request_fail_it_with_503_and_sigterm_still_exits(trained: TrainedRun) -> None:
    limits = ("--max-lines", 3000, "--max-queue", 3000)
    with running_server(trained.checkpoint, "--workers", 2, *limits) as server:
        workers = children(server.process.pid)
        before = {pid: cpu_ticks(pid) for pid in workers}
        answers: list[httpx.Response] = []
        busy = threading.Thread(
            target=lambda: answers.append(server.post({"text": sentences(3000, seed=4), "beam": 16}))
        )
        busy.start()
        deadline = time.monotonic() + 60
        while all(cpu_ticks(pid) - before[pid] < 20 for pid in workers):  # 0.2 s of decoding
            assert time.monotonic() < deadline and busy.is_alive(), "the workers never got busy"
            time.sleep(0.02)
        for pid in workers:
            os.kill(pid, signal.SIGKILL)
        busy.join(60)
        assert not busy.is_alive()
        assert answers[0].status_code == 503, answers[0].text
        assert "worker" in answers[0].json()["error"]
        assert server.post({"text": ["stone cloud"]}).json() == {"translations": ["stone cloud"]}
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(30) == 0


def test_sighup_without_api_keys_leaves_the_server_serving(real_server: Server) -> None:
    real_server.process.send_signal(signal.SIGHUP)  # its default action would end the process at once
    assert real_server.post({"text": ["apple"]}).status_code == 200
    assert real_server.process.poll() is None


def test_a_json_body_sent_as_a_form_is_read_as_json(server: Server, offline: Translator) -> None:
    """What `curl -d '{...}'` sends: the README's examples, as written."""
    body = json.dumps({"text": ["apple river", "stone"], "beam": 2, "nbest": 2})
    form = {"content-type": "application/x-www-form-urlencoded"}
    response = server.request("POST", "/translate", content=body, headers=form)
    assert response.status_code == 200, response.text
    with one_thread():
        expected = offline.translate_nbest(["apple river", "stone"], nbest=2, beam=2)
    assert [[h["text"] for h in line] for line in response.json()["translations"]] == [
        [text for text, _ in line] for line in expected
    ]


@kills_workers
def test_a_worker_that_dies_idle_is_replaced_before_any_request(trained: TrainedRun) -> None:
    with running_server(trained.checkpoint, "--workers", 2) as server:
        workers = children(server.process.pid)
        assert len(workers) == 2
        os.kill(min(workers), signal.SIGKILL)
        deadline = time.monotonic() + 15
        while True:  # no request meanwhile: /metrics is read, and it decodes nothing
            metrics = server.get("/metrics").text
            alive = [line for line in metrics.splitlines() if line.startswith("nmt_workers_alive{")]
            fresh = children(server.process.pid)
            if alive and alive[0].endswith(" 2.0") and len(fresh) == 2 and not fresh & workers:
                break
            assert time.monotonic() < deadline, f"the dead worker was not replaced: {alive}, {fresh}"
            time.sleep(0.2)
        assert server.stats()["requests"] == 0
        assert "a decoding worker died" in server.text()
