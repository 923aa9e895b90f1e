"""The text lane of `nmt serve` (`serving.text_lane`): one thread, work done in order, and what is
taken bounded in texts and in HTML tags, counted until the work is done or cancelled, so that a
flood of HTML is refused (QueueFull) rather than held."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from nmt_cli.serving.batcher import QueueFull
from nmt_cli.serving.text_lane import TextLane


@pytest.fixture
def lane() -> Iterator[TextLane]:
    lane = TextLane(max_texts=10, max_tags=100)
    yield lane
    lane.close()


def test_work_runs_on_one_thread_of_its_own_in_order(lane: TextLane) -> None:
    seen: list[tuple[int, str]] = []
    futures = [
        lane.submit(1, 0, lambda i=i: seen.append((i, threading.current_thread().name))) for i in range(5)
    ]
    for future in futures:
        future.result(timeout=10)
    assert [i for i, _ in seen] == list(range(5))
    assert {name for _, name in seen} == {seen[0][1]} and seen[0][1] != threading.current_thread().name


def test_what_is_taken_is_bounded_in_texts_and_in_tags(lane: TextLane) -> None:
    release = threading.Event()
    running = lane.submit(6, 60, lambda: release.wait(10))
    waiting = lane.submit(4, 40, lambda: "done")
    with pytest.raises(QueueFull, match="10 texts with 100 HTML tags"):
        lane.submit(1, 0, lambda: None)
    assert waiting.cancel()  # not begun: dropped, and its texts and tags are free again
    lane.submit(4, 0, lambda: None)
    with pytest.raises(QueueFull):
        lane.submit(0, 41, lambda: None)
    release.set()
    running.result(timeout=10)
    assert lane.submit(0, 100, lambda: "room again").result(timeout=10) == "room again"
