"""Host synchronisations in a search. On a GPU each read of a tensor's value on the host waits for
the device to catch up; between two prunings of finished sentences a search must read nothing
back. Counted on CPU as in `test_update_syncs`, over searches of two lengths: the difference is
the prunings alone."""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest
import torch
from test_search import decoding, tiny
from test_update_syncs import SYNCING
from torch.profiler import ProfilerActivity, profile

from nmt_cli.decoding.ensemble import Ensemble
from nmt_cli.decoding.search import beam_search, greedy_search
from nmt_cli.decoding.settings import DecodeSettings
from nmt_cli.special_ids import EOS_ID


def syncs(search: str, steps: int, early_stopping: bool, prune_every: int) -> Counter[str]:
    """Read-backs of a search of 16 sentences that runs to `steps` steps (a model that never ends
    before its limit)."""
    model = tiny(30)
    src = torch.randint(4, 30, (16, 6), generator=torch.Generator().manual_seed(1))
    src[:, -1] = EOS_ID
    cfg = dataclasses.replace(
        decoding(4 if search == "beam" else 1, 1.0, "gnmt", 0.0, steps - 1), early_stopping=early_stopping
    )
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        if search == "beam":
            beam_search(Ensemble([model]), src, DecodeSettings(cfg, prune_every=prune_every))
        else:
            greedy_search(Ensemble([model]), src, DecodeSettings(cfg, prune_every=prune_every))
    return Counter(e.name for e in prof.events() if e.name in SYNCING)


@pytest.mark.parametrize("search, early_stopping", [("beam", True), ("beam", False), ("greedy", True)])
def test_a_search_reads_back_once_per_pruning(search: str, early_stopping: bool) -> None:
    every = 4
    short = syncs(search, 8, early_stopping, every)
    long = syncs(search, 24, early_stopping, every)
    grown = {name: long[name] - short[name] for name in SYNCING if long[name] != short[name]}
    assert grown == {"aten::nonzero": (24 - 8) // every}
