"""Which target words each inline element of a unit wraps when its translation is put back into
its markup (`markup_projection`): the words aligned to the element's source words, nested as
the elements were in the source."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from lxml.etree import _Element

from nmt_cli.decoding.markup_units import Unit


@dataclass
class Span:
    element: _Element
    parent: int | None  # the id of the enclosing inline element
    start: int  # first target word; start > end: empty, placed before word `start`
    end: int


def spans_of(
    unit: Unit,
    word_owners: list[set[int]],
    linked: dict[int, list[int]],
    target_of: Callable[[int], int],
    n_target: int,
) -> dict[int, Span]:
    """Each inline element's target words, parents first: the words aligned to its source words,
    kept inside its parent's span and off its siblings' (the longest free run of them); an
    element left with none stays, empty, where it touches no sibling."""
    # One pass each, not one per element: a block may hold thousands of inline elements.
    order: dict[int, int | None] = {}
    for _, stack in unit.texts:
        for depth, element_id in enumerate(stack):
            order.setdefault(element_id, stack[depth - 1] if depth else None)
    words_of: dict[int, list[int]] = {}
    for i, owned in enumerate(word_owners):
        for element_id in owned:
            words_of.setdefault(element_id, []).append(i)
    spans: dict[int, Span] = {}
    taken: dict[int | None, set[int]] = {}  # target words held by a parent's children
    for element_id, parent in order.items():
        words = words_of.get(element_id, [])
        targets = sorted({j for i in words for j in linked.get(i, [])}) or (
            [target_of(words[0])] if words else []
        )
        low, high = 0, n_target - 1
        if parent is not None and parent in spans:
            low, high = spans[parent].start, spans[parent].end
        held = taken.setdefault(parent, set())
        free = (
            [j for j in range(max(low, targets[0]), min(high, targets[-1]) + 1) if j not in held]
            if targets
            else []
        )
        run = _longest_run(free)
        if run:
            start, end = run[0], run[-1]
        else:
            # Empty: after the words it is aligned to (beside the sibling that holds them), else from
            # the start of the parent's span: before the first word no sibling holds, or at its end.
            after = max(low, targets[-1] + 1) if targets else low
            start = next((j for j in range(after, high + 1) if j not in held), high + 1)
            end = start - 1
        held.update(range(start, end + 1))
        spans[element_id] = Span(unit.elements[element_id], parent, start, end)
    return spans


def _longest_run(positions: list[int]) -> list[int]:
    """The longest run of consecutive numbers in sorted `positions`."""
    best: list[int] = []
    run: list[int] = []
    for j in positions:
        run = [*run, j] if run and j == run[-1] + 1 else [j]
        if len(run) > len(best):
            best = run
    return best
