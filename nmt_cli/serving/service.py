"""What the routes of `nmt serve` share, as one `Service` that the app holds in `app.state` and
hands to each route as a dependency (`serving.dependencies`): the language pairs served, each a
translator with a queue and decoding threads of its own; the limits; the API keys; the metrics.
Also what the app does with them over its life: start the queues, keep the decoding workers
alive, and on shutdown decode what is left. Nothing here knows of HTTP."""

import asyncio
import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nmt_cli import __version__
from nmt_cli.decoding.terms import text_of
from nmt_cli.decoding.texts import Result
from nmt_cli.ranges import MAX_BEAM
from nmt_cli.serving.batcher import Batcher
from nmt_cli.serving.detect import Detector
from nmt_cli.serving.keys import ApiKeys
from nmt_cli.serving.limits import ServeLimits
from nmt_cli.serving.metrics import Metrics
from nmt_cli.serving.requests import Served
from nmt_cli.serving.text_lane import TextLane

if TYPE_CHECKING:
    from nmt_cli.decoding.translator import Translator

WORKER_CHECK_S = 1.0  # how often the decoding processes of each pair are checked
log = logging.getLogger("nmt_cli.serving")


@dataclass
class Service:
    """The state every route reads; fixed once the app is made (the keys reload themselves)."""

    served: list[Served]
    limits: ServeLimits
    keys: ApiKeys | None
    """None: anyone may use every route."""
    metrics: Metrics
    described: list[dict[str, Any]]
    """What GET /info says of each pair, computed once."""
    detector: Detector
    """The source language of a text, among the served ones (POST /detect, source "auto")."""
    text_lane: TextLane
    """Where the requests' texts are parsed, cut, joined and rebuilt, off the event loop."""

    @classmethod
    def over(
        cls, models: Sequence[tuple["Translator", list[Path]]], limits: ServeLimits, keys: ApiKeys | None
    ) -> "Service":
        """The service over one (translator, checkpoint paths) per language pair."""
        metrics = Metrics()
        served = [_served(translator, paths, limits, metrics) for translator, paths in models]
        described = [{**describe_model(s.translator, s.paths), "pair": s.name} for s in served]
        detector = Detector([s.pair[0] for s in served if s.pair is not None])
        text_lane = TextLane(limits.max_queue, limits.max_tags_read)
        return cls(served, limits, keys, metrics, described, detector, text_lane)

    def health(self) -> dict[str, Any]:
        """GET /health: the batch counters of every pair, summed."""
        counters = [dataclasses.asdict(s.batcher.stats) for s in self.served]
        summed = {name: sum(c[name] for c in counters) for name in counters[0]}
        summed["most_requests_in_a_batch"] = max(c["most_requests_in_a_batch"] for c in counters)
        return {
            "status": "ok",
            "queued_lines": sum(s.batcher.waiting_lines for s in self.served),
            "truncated": sum(s.translator.truncated for s in self.served),
            **summed,
        }

    def info(self) -> dict[str, Any]:
        """GET /info: the first pair at the top level (as when one pair is served), every pair
        under "pairs", with the limits and the counters."""
        return {
            **self.described[0],
            "models": [str(path) for s in self.served for path in s.paths],
            "pairs": self.described,
            "limits": {**dataclasses.asdict(self.limits), "max_beam": MAX_BEAM},
            "stats": self.health(),
        }

    def pairs(self) -> list[tuple[str, str]]:
        """The (source, target) of every pair whose checkpoints record their languages."""
        return [s.pair for s in self.served if s.pair is not None]

    def start(self) -> None:
        for s in self.served:
            s.batcher.start()

    async def finish(self) -> None:
        """Decode everything still queued (uvicorn has answered every open request by now) and
        log what each pair served."""
        await asyncio.to_thread(self.text_lane.close)
        for s in self.served:
            await asyncio.to_thread(s.batcher.close)
            stats = s.batcher.stats
            log.info(
                f"{s.name}: served {stats.requests} requests in {stats.batches} batches "
                f"({stats.merged_batches} merged)"
            )

    async def keep_workers(self) -> None:
        """Replace a pair's dead decoding processes within WORKER_CHECK_S, also while no request
        comes (the next request would otherwise find none, and /metrics shows 0 until then)."""
        while True:
            await asyncio.sleep(WORKER_CHECK_S)
            for s in self.served:
                if s.translator.workers_alive() < s.translator.workers:
                    try:
                        if await asyncio.to_thread(s.translator.heal_workers):
                            log.warning(f"{s.name}: a decoding worker died; the workers were started afresh")
                    except Exception as err:  # noqa: BLE001 - the watch goes on; the next request retries
                        log.warning(f"{s.name}: decoding workers could not be restarted ({err})")


def describe_model(translator: "Translator", models: Sequence[Path]) -> dict[str, Any]:
    """What GET /info tells about a language pair's model (fixed while the server runs)."""
    return {
        "version": __version__,
        "models": [str(path) for path in models],
        "device": str(translator.device),
        "precision": translator.precision,
        "languages": list(translator.languages) if translator.languages else None,
        "src_vocab_size": translator.src_spm.get_piece_size(),
        "tgt_vocab_size": translator.tgt_spm.get_piece_size(),
        "model": [dataclasses.asdict(model.cfg) for model in translator.ensemble.models],
        "decode": dataclasses.asdict(translator.decode),
        "shortlist": None
        if translator.shortlist is None
        else dict(zip(("candidates", "frequent"), translator.shortlist.sizes, strict=True)),
    }


def _served(translator: "Translator", paths: list[Path], limits: ServeLimits, metrics: Metrics) -> Served:
    name = "-".join(translator.languages) if translator.languages else "model"

    def on_batch(requests: int, lines: int, tokens: int, seconds: float) -> None:
        metrics.batch(name, lines, tokens)
        _log_batch(name, requests, lines, tokens, seconds)

    batcher: Batcher[Result] = Batcher(
        translator.translate_results,
        lambda line: len(translator.src_spm.encode(text_of(line))) + 1,  # + EOS
        limits.max_batch_tokens,
        limits.max_wait_ms / 1000,
        limits.max_queue,
        on_batch=on_batch,
        decoders=translator.workers,  # one batch a worker: batches of a few lines are not split
    )
    metrics.watch(name, lambda: batcher.waiting_lines, translator.workers_alive)
    return Served(translator, paths, batcher)


def _log_batch(pair: str, requests: int, lines: int, tokens: int, seconds: float) -> None:
    # Merged batches are the ones worth seeing; single ones only at debug level.
    level = logging.INFO if requests > 1 else logging.DEBUG
    log.log(
        level,
        f"{pair}: batch of {requests} requests, {lines} lines, {tokens} tokens: {seconds * 1000:.0f} ms",
    )
