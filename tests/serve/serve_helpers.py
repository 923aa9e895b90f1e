"""The server of `nmt serve` for the tests, two ways, with the same client methods:

- `serving_in_process`: the app that `nmt serve` builds (`serving.app.create_app`), lifespan and
  all, called through httpx's ASGI transport on an event loop of its own thread. No socket, no
  process, no model load in a child python: for tests whose subject is a request and its answer.
- `running_server`: a real `nmt serve` process on 127.0.0.1 with --port 0 (the bound port is read
  from its startup line), one torch thread, its stderr and stdout collected as it runs; stopped
  with SIGTERM (then SIGKILL) when the test is done with it. For tests whose subject is the real
  server: sockets, signals, slow clients, worker processes, uvicorn's access log, the exit."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import re
import signal
import subprocess
import threading
import time
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from helpers import nmt_command, one_thread, subprocess_env

from nmt_cli.decoding.translator import Translator
from nmt_cli.serving.app import create_app
from nmt_cli.serving.keys import ApiKeys
from nmt_cli.serving.limits import ServeLimits
from nmt_cli.user_settings import DecodeOverrides

LISTENING = re.compile(r"listening on (http://\S+)")
START_TIMEOUT_S = 120  # python, torch and the model on two busy cores


@dataclass
class Server:
    """A real `nmt serve` process (`running_server`)."""

    process: subprocess.Popen[str]
    url: str = ""
    log: list[str] = field(default_factory=list)

    def request(self, method: str, path: str, **options: Any) -> httpx.Response:
        return httpx.request(method, self.url + path, timeout=60, **options)

    def get(self, path: str) -> httpx.Response:
        return self.request("GET", path)

    def post(self, body: object | bytes, path: str = "/translate") -> httpx.Response:
        if isinstance(body, bytes):
            return self.request("POST", path, content=body)
        return self.request("POST", path, json=body)

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


class InProcess(Server):
    """`nmt serve`'s app in this process (`serving_in_process`): the same methods as a real
    server's, each request awaited on the app's own event loop, so that requests sent from
    several threads at once are served concurrently, as a real server serves them."""

    def __init__(self, client: httpx.AsyncClient, loop: asyncio.AbstractEventLoop, log: list[str]) -> None:
        super().__init__(process=None, url=str(client.base_url).rstrip("/"), log=log)  # type: ignore[arg-type]
        self.client = client
        self.loop = loop

    def on_loop(self, work: Coroutine[Any, Any, httpx.Response]) -> httpx.Response:
        return asyncio.run_coroutine_threadsafe(work, self.loop).result(timeout=60)

    def request(self, method: str, path: str, **options: Any) -> httpx.Response:
        return self.on_loop(self.client.request(method, path, **options))


class LogLines(logging.Handler):
    """nmt's log lines, as a real server writes them to its stderr."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__(logging.INFO)
        self.lines = lines

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage() + "\n")


@dataclass
class Served:
    """What `nmt serve`'s options give the app (those the in-process tests use)."""

    limits: ServeLimits = field(default_factory=ServeLimits)
    checkpoints: list[Path] = field(default_factory=list)
    keys: ApiKeys | None = None
    decode: DecodeOverrides = field(default_factory=DecodeOverrides)


def served_by(checkpoint: Path, options: list[object]) -> Served:
    """`nmt serve`'s --max-* options, --shortlist, further -m checkpoints and --api-keys, as the
    app takes them. --workers may only be 1: worker processes are a real server's subject."""
    served, given = Served(checkpoints=[checkpoint]), iter(options)
    kinds = {f.name: f.type for f in dataclasses.fields(ServeLimits)}
    for name in given:
        if name == "--shortlist":
            served.decode = DecodeOverrides(shortlist=True)
            continue
        value = str(next(given))
        if name == "-m":
            served.checkpoints.append(Path(value))
        elif name == "--api-keys":
            served.keys = ApiKeys(Path(value))
        elif name == "--workers":
            assert value == "1", "several decoding processes need a real server (running_server)"
        else:
            field_name = str(name).removeprefix("--").replace("-", "_")
            convert = float if kinds[field_name] in (float, "float") else int
            served.limits = dataclasses.replace(served.limits, **{field_name: convert(value)})
    served.limits.validate()
    return served


@contextlib.contextmanager
def serving_in_process(checkpoint: Path, *options: object) -> Iterator[InProcess]:
    """`nmt serve -m CHECKPOINT --device cpu --precision fp32 --threads 1 OPTIONS...` without the
    process: one translator per checkpoint (one per language pair, as `nmt serve` makes them when
    each checkpoint is a pair of its own), the app's lifespan run on a loop of its own thread
    (which starts the batchers, and on leaving decodes what is left)."""
    served = served_by(checkpoint, list(options))
    paths = served.checkpoints
    log: list[str] = []
    handler, logger = LogLines(log), logging.getLogger("nmt_cli")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    translators: list[Translator] = []
    try:
        with one_thread():
            translators = [
                Translator.load(p, device="cpu", precision="fp32", decode=served.decode) for p in paths
            ]
            models = [(translator, [path]) for translator, path in zip(translators, paths, strict=True)]
            app = create_app(models, served.limits, served.keys)
            thread.start()
            with _lifespan(app, loop):
                transport = httpx.ASGITransport(app=app)
                client = httpx.AsyncClient(transport=transport, base_url="http://testserver", timeout=60)
                try:
                    yield InProcess(client, loop, log)
                finally:
                    asyncio.run_coroutine_threadsafe(client.aclose(), loop).result(timeout=60)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        if thread.is_alive():
            thread.join(60)
        loop.close()
        for translator in translators:
            translator.close()
        logger.removeHandler(handler)
        logger.setLevel(level)


@contextlib.contextmanager
def _lifespan(app: Any, loop: asyncio.AbstractEventLoop) -> Iterator[None]:
    """The app's lifespan (ASGITransport runs none), entered and left on `loop`."""
    lifespan = app.router.lifespan_context(app)
    asyncio.run_coroutine_threadsafe(lifespan.__aenter__(), loop).result(timeout=60)
    try:
        yield
    finally:
        asyncio.run_coroutine_threadsafe(lifespan.__aexit__(None, None, None), loop).result(timeout=120)
