"""A real `nmt serve` process for the tests: started on 127.0.0.1 with --port 0 (the bound port is
read from its startup line), one torch thread, its stderr and stdout collected as it runs; stopped with
SIGTERM (then SIGKILL) when the test is done with it."""

from __future__ import annotations

import contextlib
import re
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from conftest import nmt_command, subprocess_env

LISTENING = re.compile(r"listening on (http://\S+)")
START_TIMEOUT_S = 120  # python, torch and the model on two busy cores


@dataclass
class Server:
    process: subprocess.Popen[str]
    url: str = ""
    log: list[str] = field(default_factory=list)

    def get(self, path: str) -> httpx.Response:
        return httpx.get(self.url + path, timeout=60)

    def post(self, body: object | bytes, path: str = "/translate") -> httpx.Response:
        if isinstance(body, bytes):
            return httpx.post(self.url + path, content=body, timeout=60)
        return httpx.post(self.url + path, json=body, timeout=60)

    def stats(self) -> dict:
        response = self.get("/health")
        assert response.status_code == 200
        return response.json()

    def wait_for_queued(self, lines: int, timeout: float = 30) -> None:
        """Until `lines` lines wait in the server's queue."""
        deadline = time.monotonic() + timeout
        while self.stats()["queued_lines"] < lines:
            assert time.monotonic() < deadline, f"never saw {lines} queued lines; log:\n{self.text()}"
            time.sleep(0.02)

    def text(self) -> str:
        return "".join(self.log)


@contextlib.contextmanager
def running_server(checkpoint: Path, *options: object) -> Iterator[Server]:
    command = nmt_command(
        "serve",
        "-m",
        checkpoint,
        "--port",
        0,
        "--threads",
        1,
        "--device",
        "cpu",
        "--precision",
        "fp32",
        *options,
    )
    # stdout too: uvicorn writes its access log there.
    streams = {"stdin": subprocess.DEVNULL, "stdout": subprocess.PIPE, "stderr": subprocess.STDOUT}
    process = subprocess.Popen(command, env=subprocess_env(), text=True, **streams)
    server = Server(process)
    ready = threading.Event()

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            server.log.append(line)
            found = LISTENING.search(line)
            if found:
                server.url = found.group(1)
                ready.set()
        ready.set()  # the process ended

    threading.Thread(target=read, daemon=True).start()
    try:
        ready.wait(START_TIMEOUT_S)
        assert server.url, f"the server did not start; its log:\n{server.text()}"
        yield server
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
