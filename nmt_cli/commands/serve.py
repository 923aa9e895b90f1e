"""`nmt serve`: translation over HTTP, with requests from concurrent clients decoded together.

Order matters for the user: the extra and the options are checked first, then the port is
bound (a taken port fails before a long model load), then the model is loaded, and only then
does the server accept connections, so GET /health answers only once translations can be made.
The service itself is `nmt_cli.serving`.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path

from nmt_cli.config import DecodeOverrides, RuntimeConfig, ServeLimits
from nmt_cli.decoding.translator import decoding_workers, default_precision, load_translator
from nmt_cli.device import configure_cpu, resolve_device
from nmt_cli.report import Reporter
from nmt_cli.serving import app, server


def run(
    models: list[Path],
    host: str,
    port: int,
    runtime: RuntimeConfig,
    limits: ServeLimits,
    quiet: bool,
    decode: DecodeOverrides = DecodeOverrides(),
) -> None:
    """`decode`: the requests' default search settings, over the checkpoint's recipe."""
    app.require_extra()
    limits.validate()
    dev = resolve_device(runtime.device)
    workers = decoding_workers(runtime, dev)
    configure_cpu(1 if workers > 1 else runtime.threads)
    sock = server.bind_socket(host, port)
    translator = None
    try:
        translator = load_translator(models, dev, runtime.precision or default_precision(dev), decode)
        # Forked before the server starts any thread; the socket stays the server's alone, so that
        # the port closes when the server ends.
        translator.start_workers(workers, close_fds=[sock.fileno()])
        service = app.create_app(translator, limits, app.describe_model(translator, models))
        if not _is_loopback(host):
            Reporter(quiet).warn(f"--host {host}: reachable beyond this machine, with no authentication")
        server.run_server(service, sock, limits, quiet)
    finally:
        if translator is not None:
            translator.close()
        sock.close()


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"
