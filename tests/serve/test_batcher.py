"""The request batcher of `nmt serve` with a stand-in decoder (no model, no HTTP): requests that
arrive together share one decode call and each gets its own results in order; settings are never
mixed; the token budget and the queue bound hold; a failing request fails alone; a cancelled one is
skipped; close() decodes what is waiting without waiting for more."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future

import pytest

from nmt_cli.config import DecodeConfig
from nmt_cli.decoding.settings import DecodeSettings
from nmt_cli.serving.batcher import Batcher, Closed, QueueFull, TooLarge

BEAM4 = DecodeSettings(DecodeConfig(beam=4))
GREEDY = DecodeSettings(DecodeConfig(beam=1))


class Recorder:
    """Decodes a line to its upper case, recording every call's lines and settings."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[str], DecodeSettings]] = []
        self.release = threading.Event()
        self.release.set()
        self.started = 0  # calls begun, under _begun
        self._begun = threading.Condition()

    def __call__(self, lines: list[str], key: DecodeSettings) -> list[str]:
        with self._begun:
            self.started += 1
            self._begun.notify_all()
        self.release.wait(10)
        if any("boom" in line for line in lines):
            raise ValueError("cannot decode 'boom'")
        self.calls.append((list(lines), key))
        return [line.upper() for line in lines]


def wait_started(recorder: Recorder, calls: int) -> None:
    """Until `calls` decode calls have begun (a decoding thread has taken their batch)."""
    with recorder._begun:
        assert recorder._begun.wait_for(lambda: recorder.started >= calls, timeout=10), recorder.started


def make(recorder: Recorder, wait_s: float = 0.3, max_tokens: int = 1000, queue: int = 100) -> Batcher[str]:
    # A token is a word here.
    return Batcher(recorder, lambda line: len(line.split()), max_tokens, wait_s, queue)


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    yield Recorder()


def results(futures: list[Future[list[str]]]) -> list[list[str]]:
    return [f.result(timeout=10) for f in futures]


def test_requests_that_arrive_together_share_one_decode_call(recorder: Recorder) -> None:
    batcher = make(recorder)
    batcher.start()
    futures = [batcher.submit([f"line {i}", f"more {i}"], BEAM4) for i in range(5)]
    assert results(futures) == [[f"LINE {i}", f"MORE {i}"] for i in range(5)]
    batcher.close()
    assert len(recorder.calls) == 1 and len(recorder.calls[0][0]) == 10
    assert batcher.stats.batches == 1 and batcher.stats.merged_batches == 1
    assert batcher.stats.most_requests_in_a_batch == 5


def test_different_settings_are_never_mixed(recorder: Recorder) -> None:
    batcher = make(recorder)
    batcher.start()
    futures = [batcher.submit([f"line {i}"], BEAM4 if i % 2 else GREEDY) for i in range(6)]
    assert results(futures) == [[f"LINE {i}"] for i in range(6)]
    batcher.close()
    assert sorted(key.search.beam for _, key in recorder.calls) == [1, 4]
    for lines, key in recorder.calls:
        assert all((int(line.split()[1]) % 2 == 1) == (key == BEAM4) for line in lines)


def test_a_batch_holds_at_most_max_batch_tokens(recorder: Recorder) -> None:
    batcher = make(recorder, wait_s=0.2, max_tokens=6)
    batcher.start()
    futures = [batcher.submit(["one two three"], BEAM4) for _ in range(5)]  # 3 tokens each
    assert results(futures) == [["ONE TWO THREE"]] * 5
    batcher.close()
    assert [len(lines) for lines, _ in recorder.calls] == [2, 2, 1]


def test_a_lone_request_waits_at_most_max_wait(recorder: Recorder) -> None:
    batcher = make(recorder, wait_s=0.05)
    batcher.start()
    start = time.monotonic()
    assert batcher.submit(["alone"], BEAM4).result(timeout=10) == ["ALONE"]
    assert time.monotonic() - start < 2
    batcher.close()


def test_the_queue_is_bounded_in_lines(recorder: Recorder) -> None:
    recorder.release.clear()  # the decoder is busy: nothing leaves the queue
    batcher = make(recorder, wait_s=0.0, queue=4)
    batcher.start()
    busy = batcher.submit(["taken at once"], BEAM4)
    wait_started(recorder, 1)  # the decoding thread has taken it and is stuck in decode
    waiting = batcher.submit(["a", "b", "c"], BEAM4)
    with pytest.raises(QueueFull):
        batcher.submit(["d", "e"], BEAM4)
    fits = batcher.submit(["d"], BEAM4)
    assert batcher.waiting_lines == 4 and batcher.stats.rejected == 1
    recorder.release.set()
    assert results([busy, waiting, fits]) == [["TAKEN AT ONCE"], ["A", "B", "C"], ["D"]]
    batcher.close()
    assert batcher.waiting_lines == 0


def test_a_request_larger_than_the_whole_queue_is_too_large_not_full(recorder: Recorder) -> None:
    batcher = make(recorder, wait_s=0.0, queue=4)
    batcher.start()
    with pytest.raises(TooLarge, match="5 lines, more than the whole queue holds"):
        batcher.submit(["a", "b", "c", "d", "e"], BEAM4)  # waiting could never help: not QueueFull
    assert batcher.submit(["a", "b", "c", "d"], BEAM4).result(timeout=10) == ["A", "B", "C", "D"]
    batcher.close()


def test_a_request_that_fails_fails_alone(recorder: Recorder) -> None:
    batcher = make(recorder)
    batcher.start()
    good, bad, other = (batcher.submit(lines, BEAM4) for lines in (["fine"], ["boom"], ["also fine"]))
    assert good.result(timeout=10) == ["FINE"] and other.result(timeout=10) == ["ALSO FINE"]
    with pytest.raises(ValueError, match="boom"):
        bad.result(timeout=10)
    batcher.close()


def test_a_cancelled_request_is_not_decoded(recorder: Recorder) -> None:
    batcher = make(recorder, wait_s=0.3)
    batcher.start()
    gone = batcher.submit(["client left"], BEAM4)
    kept = batcher.submit(["client stayed"], BEAM4)
    assert gone.cancel()  # still waiting for its batch, so it can be cancelled
    assert kept.result(timeout=10) == ["CLIENT STAYED"]
    batcher.close()
    assert [lines for lines, _ in recorder.calls] == [["client stayed"]]


def test_close_decodes_what_waits_without_waiting_for_more(recorder: Recorder) -> None:
    batcher = make(recorder, wait_s=30)
    batcher.start()
    futures = [batcher.submit([f"line {i}"], BEAM4) for i in range(3)]
    start = time.monotonic()
    batcher.close()
    assert time.monotonic() - start < 10  # not the 30 s window
    assert results(futures) == [[f"LINE {i}"] for i in range(3)]
    with pytest.raises(Closed):
        batcher.submit(["late"], BEAM4)


def test_two_decoding_threads_decode_two_batches_at_once() -> None:
    both_running = threading.Barrier(2, timeout=10)  # breaks (an error) unless two calls overlap
    calls: list[list[str]] = []

    def decode(lines: list[str], key: DecodeSettings) -> list[str]:
        calls.append(list(lines))
        both_running.wait()
        return [line.upper() for line in lines]

    batcher = Batcher(decode, lambda line: 1, max_batch_tokens=1, max_wait_s=0.0, max_queue=10, decoders=2)
    batcher.start()
    futures = [batcher.submit([f"line {i}"], BEAM4) for i in range(2)]
    assert results(futures) == [["LINE 0"], ["LINE 1"]]
    batcher.close()
    assert sorted(calls) == [["line 0"], ["line 1"]] and batcher.stats.batches == 2


@pytest.mark.parametrize("decoders", [1, 2])
def test_a_request_that_finds_every_decoder_idle_waits_only_with_one_decoder(
    recorder: Recorder, decoders: int
) -> None:
    """With a second decoding thread free for latecomers, a lone request does not pay the wait;
    with one, it waits for others to join (a burst would otherwise wait a whole decode)."""
    wait_s = 1.0
    batcher = Batcher(recorder, lambda line: 1, 1000, wait_s, 100, decoders=decoders)
    batcher.start()
    for _ in range(2):  # the second finds the decoders idle again after the first
        start = time.monotonic()
        assert batcher.submit(["alone"], BEAM4).result(timeout=10) == ["ALONE"]
        took = time.monotonic() - start
        assert took < wait_s / 2 if decoders > 1 else took >= wait_s * 0.9
    # A burst at an idle server with two decoders: the first starts at once, the rest merge
    # while it decodes.
    if decoders > 1:
        recorder.release.clear()  # the first call blocks until released
        begun = recorder.started
        first = batcher.submit(["first"], BEAM4)
        wait_started(recorder, begun + 1)
        rest = [batcher.submit([f"line {i}"], BEAM4) for i in range(3)]
        wait_started(recorder, begun + 2)  # the rest taken while the first still decodes
        recorder.release.set()
        assert results([first, *rest]) == [["FIRST"], ["LINE 0"], ["LINE 1"], ["LINE 2"]]
        calls = sorted(lines for lines, _ in recorder.calls[-2:])
        assert calls == [["first"], ["line 0", "line 1", "line 2"]]
        # After a batch of several requests, their clients' next requests come back together:
        # the first of them waits for the others even though every decoder is idle...
        start = time.monotonic()
        assert batcher.submit(["next"], BEAM4).result(timeout=10) == ["NEXT"]
        assert time.monotonic() - start >= wait_s * 0.9
        # ...and once a batch of one request has gone through, a lone request starts at once again.
        start = time.monotonic()
        assert batcher.submit(["alone again"], BEAM4).result(timeout=10) == ["ALONE AGAIN"]
        assert time.monotonic() - start < wait_s / 2
    batcher.close()


def test_once_the_last_batchs_requests_are_back_the_next_batch_starts_without_waiting(
    recorder: Recorder,
) -> None:
    """The clients of a batch of several requests send their next requests together: as soon as
    as many as that batch held are waiting, they are decoded, without waiting out max_wait; fewer
    still wait for the rest."""
    wait_s = 1.0
    batcher = Batcher(recorder, lambda line: 1, 1000, wait_s, 100, decoders=1)
    batcher.start()
    burst = [batcher.submit([f"first {i}"], BEAM4) for i in range(3)]  # one batch of 3, after the wait
    assert results(burst) == [[f"FIRST {i}"] for i in range(3)]
    start = time.monotonic()
    again = [batcher.submit([f"again {i}"], BEAM4) for i in range(3)]
    assert results(again) == [[f"AGAIN {i}"] for i in range(3)]
    assert time.monotonic() - start < wait_s / 2
    start = time.monotonic()
    fewer = [batcher.submit([f"fewer {i}"], BEAM4) for i in range(2)]
    assert results(fewer) == [[f"FEWER {i}"] for i in range(2)]
    assert time.monotonic() - start >= wait_s * 0.9
    batcher.close()
    assert [lines for lines, _ in recorder.calls] == [
        [f"first {i}" for i in range(3)],
        [f"again {i}" for i in range(3)],
        [f"fewer {i}" for i in range(2)],
    ]


def test_a_burst_that_finds_several_decoders_idle_is_shared_among_them(recorder: Recorder) -> None:
    """The clients of both decoders' last batches come back together: they are split between the
    two idle decoders, which decode side by side, rather than taken by one while the other
    waits for its answers to come back as its next requests."""
    wait_s = 0.3
    batcher = Batcher(recorder, lambda line: 1, 1000, wait_s, 100, decoders=2)
    batcher.start()
    recorder.release.clear()
    first = batcher.submit(["first"], BEAM4)  # starts at once on one decoder, and blocks
    wait_started(recorder, 1)
    rest = [batcher.submit([f"line {i}"], BEAM4) for i in range(8)]  # all 8 to the other
    wait_started(recorder, 2)
    recorder.release.set()
    assert results([first, *rest]) == [["FIRST"]] + [[f"LINE {i}"] for i in range(8)]
    assert sorted(len(lines) for lines, _ in recorder.calls) == [1, 8]
    running = threading.Barrier(2, timeout=10)  # breaks (an error) unless the two calls overlap
    decode = recorder.__call__

    def both_at_once(lines: list[str], key: DecodeSettings) -> list[str]:
        running.wait()
        return decode(lines, key)

    batcher.decode = both_at_once
    burst = [batcher.submit([f"again {i}"], BEAM4) for i in range(8)]
    assert results(burst) == [[f"AGAIN {i}"] for i in range(8)]
    batcher.close()
    assert sorted(lines for lines, _ in recorder.calls[2:]) == [
        [f"again {i}" for i in range(4)],
        [f"again {i}" for i in range(4, 8)],
    ]
