"""`nmt serve`: translation over HTTP, with requests from concurrent clients decoded together.

Order matters for the user: the extra, the options and the keys are checked first, then the
port is bound (a taken port fails before a long model load), then the models are loaded (one
translator per language pair the checkpoints record), and only then does the server accept
connections, so GET /health answers only once translations can be made. The service itself is
`nmt_cli.serving`.
"""

from __future__ import annotations

import ipaddress
import signal
from pathlib import Path

from nmt_cli.decoding.loading import default_precision
from nmt_cli.decoding.translator import Translator, load_translators
from nmt_cli.decoding.workers import decoding_workers
from nmt_cli.device import configure_cpu, resolve_device
from nmt_cli.errors import InputError
from nmt_cli.serving import app, server
from nmt_cli.serving.keys import ApiKeys
from nmt_cli.serving.limits import ServeLimits
from nmt_cli.user_settings import DecodeOverrides, RuntimeConfig


def run(
    models: list[Path],
    host: str,
    port: int,
    runtime: RuntimeConfig,
    limits: ServeLimits,
    quiet: bool,
    decode: DecodeOverrides = DecodeOverrides(),
    api_keys: Path | None = None,
    allow_anonymous: bool = False,
) -> None:
    """`decode`: the requests' default search settings, over the checkpoints' recipes. `api_keys`:
    the file of keys that requests must carry (read again on SIGHUP)."""
    app.require_extra()
    limits.validate()
    keys = ApiKeys(api_keys) if api_keys is not None else None
    if keys is None and not allow_anonymous and not _is_loopback(host):
        raise InputError(
            f"--host {host}: reachable beyond this machine, and no --api-keys FILE says who may use "
            "it; give one, or --allow-anonymous to serve anyone who can reach it"
        )
    dev = resolve_device(runtime.device)
    workers = decoding_workers(runtime.workers, runtime.threads, dev)
    configure_cpu(1 if workers > 1 else runtime.threads)
    sock = server.bind_socket(host, port)
    loaded: list[tuple[Translator, list[Path]]] = []
    # SIGHUP rereads the keys, once the server runs; until then, and without keys, it does nothing
    # (its default action would end the server, say when the terminal that started it closes).
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        precision = runtime.precision or default_precision(dev)
        loaded = load_translators(models, dev, precision, decode)
        for translator, _ in loaded:
            # Forked before the server starts any thread; the socket stays the server's alone, so
            # that the port closes when the server ends.
            translator.start_workers(workers, close_fds=[sock.fileno()])
        service = app.create_app(loaded, limits, keys)
        if keys is not None:
            signal.signal(signal.SIGHUP, lambda *_: keys.reload())
        server.run_server(service, sock, limits, quiet, keys)
    finally:
        signal.signal(signal.SIGHUP, previous)
        for translator, _ in loaded:
            translator.close()
        sock.close()


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"
