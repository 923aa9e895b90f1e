"""GET /metrics of `nmt serve`, in Prometheus' text format through `prometheus-client`: requests
by route, method and status, their latency, lines and source tokens translated, batch sizes, and the
queue depth and live workers of each language pair. Routes are labelled by the app's route
templates (anything else is "other") and methods likewise, so that a scan of random paths or
methods cannot grow the series; a browser's CORS preflight (OPTIONS) is thus not a translation."""

from __future__ import annotations

from collections.abc import Callable

LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
METHODS = ("GET", "HEAD", "POST", "OPTIONS")


class Metrics:
    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "nmt_requests", "HTTP requests answered.", ["route", "method", "status"], registry=r
        )
        self.latency = Histogram(
            "nmt_request_seconds",
            "Time to answer a request.",
            ["route", "method"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.lines = Counter("nmt_lines_translated", "Lines translated.", ["pair"], registry=r)
        self.tokens = Counter(
            "nmt_source_tokens_translated", "Source tokens translated.", ["pair"], registry=r
        )
        self.batch_lines = Histogram(
            "nmt_batch_lines", "Lines decoded together.", ["pair"], buckets=BATCH_BUCKETS, registry=r
        )
        self._queue = Gauge("nmt_queued_lines", "Lines waiting to be decoded.", ["pair"], registry=r)
        self._workers = Gauge("nmt_workers_alive", "Decoding processes alive.", ["pair"], registry=r)

    def watch(self, pair: str, queued: Callable[[], float], workers: Callable[[], float]) -> None:
        """Read a pair's queue depth and live workers at each scrape."""
        self._queue.labels(pair).set_function(queued)
        self._workers.labels(pair).set_function(workers)

    def batch(self, pair: str, lines: int, tokens: int) -> None:
        self.lines.labels(pair).inc(lines)
        self.tokens.labels(pair).inc(tokens)
        self.batch_lines.labels(pair).observe(lines)

    def answered(self, route: str, method: str, status: int, seconds: float) -> None:
        method = method if method in METHODS else "other"
        self.requests.labels(route, method, str(status)).inc()
        self.latency.labels(route, method).observe(seconds)

    def text(self) -> tuple[bytes, str]:
        """The exposition and its content type."""
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return generate_latest(self.registry), CONTENT_TYPE_LATEST
