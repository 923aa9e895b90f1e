"""A second Ctrl-C stops `nmt serve` at once, a request being decoded or not: the process ends with
exit 130 and one line (no traceback, no C++ abort), whether it decodes in its own threads
(--workers 1) or in worker processes (--workers 2, which must not be started afresh while the
server ends, and then keep it waiting for them)."""

from __future__ import annotations

import contextlib
import signal
import threading
import time

import httpx
import pytest
from helpers import TrainedRun, sentences
from serve_helpers import running_server

LINES = 1000  # with 200 steps each: seconds of decoding, still going on when both signals come


@pytest.mark.slow  # a server decoding a long request, twice: about 4 s
@pytest.mark.parametrize("workers", [1, 2])
def test_a_second_ctrl_c_stops_a_busy_server_at_once_with_one_line(trained: TrainedRun, workers: int) -> None:
    limits = ("--max-lines", LINES, "--max-queue", LINES)
    with running_server(trained.checkpoint, "--workers", workers, *limits) as server:
        long_search = {"text": sentences(LINES, seed=5), "beam": 16, "min_len": 200, "max_len_b": 200}

        def post() -> None:
            with contextlib.suppress(httpx.HTTPError):  # dropped, as the second Ctrl-C says
                server.post(long_search)

        busy = threading.Thread(target=post)
        busy.start()
        deadline = time.monotonic() + 60
        while not (server.stats()["requests"] == 1 and server.stats()["queued_lines"] == 0):  # decoding
            assert time.monotonic() < deadline and busy.is_alive(), "the request was never decoded"
            time.sleep(0.02)
        server.process.send_signal(signal.SIGINT)
        while "Shutting down" not in server.text():
            assert time.monotonic() < deadline, "the first Ctrl-C did not start a shutdown"
            time.sleep(0.02)
        server.process.send_signal(signal.SIGINT)
        assert server.process.wait(30) == 130, server.text()
        busy.join(30)
    log = server.text()
    assert "Traceback" not in log and "terminate called" not in log, log
    errors = [line for line in log.splitlines() if line.startswith("nmt: error:")]
    assert errors == ["nmt: error: stopped at once by a second Ctrl-C; requests in flight were dropped"], log
