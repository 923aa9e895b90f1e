"""`nmt serve` on the command line: its options parsed into typed settings, then the plain `run`
of `commands/serve.py`. `cli.app` registers it with its epilog, as `score` and `plot`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from nmt_cli.cli import options as opt
from nmt_cli.cli.session import Globals, imported

SERVE_EPILOG = (
    'Examples: nmt serve -m avg.pt --port 8080   (then POST {"text": [...]} to /translate)\n\n'
    "nmt serve -m en-de.pt -m de-en.pt --host 0.0.0.0 --api-keys keys.txt"
)


def serve(
    model: opt.Models,
    host: Annotated[str, typer.Option(help="Address to listen on (0.0.0.0: every interface).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port (0: any free port, logged at start).")] = 8080,
    device: opt.Device = "auto",
    precision: opt.DecodePrecision = None,
    threads: opt.Threads = 0,
    workers: opt.Workers = 0,
    max_batch_tokens: Annotated[int, typer.Option(help="Source tokens decoded together.")] = 4096,
    max_wait_ms: Annotated[float, typer.Option(help="How long a request waits for others to join.")] = 5.0,
    max_queue: Annotated[int, typer.Option(help="Lines waiting; beyond, 503 and Retry-After.")] = 1024,
    max_input_chars: Annotated[int, typer.Option(help="Longest line a request may send.")] = 2000,
    max_lines: Annotated[int, typer.Option(help="Most lines in one request.")] = 256,
    request_timeout: Annotated[
        float,
        typer.Option(
            help="Seconds to send a whole request (headers and body), then 408; a client that reads "
            "nothing of its answer for as long is dropped."
        ),
    ] = 10.0,
    max_client_connections: Annotated[
        int, typer.Option(help="Open connections per client address; beyond, 429.")
    ] = 32,
    max_html_tags: Annotated[
        int, typer.Option(help="HTML tags (each < counts) in one request of format html; beyond, 413.")
    ] = 32_768,
    shortlist: opt.Shortlist = None,
    api_keys: Annotated[
        Path | None,
        typer.Option(
            help="File of API keys, one a line, that requests must carry (SIGHUP rereads).", **opt.AS_PATH
        ),
    ] = None,
    allow_anonymous: Annotated[
        bool, typer.Option("--allow-anonymous", help="Serve a non-loopback --host without --api-keys.")
    ] = False,
    quiet: opt.Quiet = False,
) -> None:
    """Translate over HTTP: nmt's POST /translate and LibreTranslate's API, GET /languages, /health,
    /info, /metrics and a page at / (pip install 'nmt-cli[serve]').

    -m may repeat: checkpoints of one language pair form an ensemble, and several pairs are served
    side by side, each with its own workers and queue, routed by the requests' source and target.
    --shortlist sets the default of requests, which may still say "shortlist": false.
    """
    from nmt_cli.serving.limits import ServeLimits
    from nmt_cli.user_settings import DecodeOverrides, RuntimeConfig

    limits = ServeLimits(
        max_batch_tokens=max_batch_tokens, max_wait_ms=max_wait_ms, max_queue=max_queue,
        max_input_chars=max_input_chars, max_lines=max_lines, request_timeout=request_timeout,
        max_client_connections=max_client_connections, max_html_tags=max_html_tags,
    )  # fmt: skip
    limits.validate()  # here, before torch is imported; `run` checks again for its other callers
    runtime = RuntimeConfig(device=device, precision=precision, threads=threads, workers=workers)
    decode = DecodeOverrides(shortlist=shortlist)
    from nmt_cli.commands import serve as command  # torch: after the options are checked
    from nmt_cli.serving.server import StoppedAtOnce

    imported()
    try:
        command.run(
            models=model, host=host, port=port, api_keys=api_keys, allow_anonymous=allow_anonymous,
            runtime=runtime, limits=limits, decode=decode, quiet=Globals.quiet or quiet,
        )  # fmt: skip
    except StoppedAtOnce:
        Globals.exit_at_once = True  # its decoding threads may still run: no teardown (`__main__`)
        raise
