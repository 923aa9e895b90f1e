"""The self-attention cache written in place (`StaticKVCache`), and the searches over it against
the same searches over a decoder that keeps no cache at all.

The reference decoder recomputes every hypothesis's whole prefix at every step with the
teacher-forced `Transformer.forward` (and `cross_attention` for the links); the search's own
bookkeeping is shared, so tokens must agree exactly and scores within float32 rounding, for beam
1, 4 and 5, n-best lists, constraints, alignments, shortlists and ensembles. In bf16, where a
recomputation rounds differently, the search is compared with a cache grown by concatenation, as
caches were before they were written in place.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from helpers import VARIANTS, tiny_model
from test_search import tiny
from torch import Tensor

from nmt_cli.config import DecodeConfig
from nmt_cli.decoding.alignment import default_layer
from nmt_cli.decoding.constraints import Constraints
from nmt_cli.decoding.ensemble import Batch, Ensemble
from nmt_cli.decoding.search import Hypothesis, beam_search, greedy_search
from nmt_cli.decoding.settings import DecodeSettings
from nmt_cli.model import Transformer, transformer
from nmt_cli.model.kv_cache import KVCache, StaticKVCache
from nmt_cli.special_ids import BOS_ID, EOS_ID, PAD_ID

VOCAB = 30


# --- the cache --------------------------------------------------------------------------------


def test_writes_and_reorderings_hold_what_concatenation_and_index_select_would() -> None:
    """Beam search's pattern: a first step of one row per sentence, K rows per sentence after it,
    a reordering at every step, sentences leaving; the cache's views equal the eager tensors."""
    torch.manual_seed(0)
    cache, k_ref, v_ref = StaticKVCache(8), torch.empty(3, 2, 0, 4), torch.empty(3, 2, 0, 5)
    orders = [[0, 0, 1, 1, 2, 2], [5, 4, 0, 0, 1, 3], [1, 1, 2, 3], [3, 2, 0, 0], [1, 0]]
    for order in orders:
        new_k, new_v = torch.randn(k_ref.shape[0], 2, 1, 4), torch.randn(v_ref.shape[0], 2, 1, 5)
        cache = cache.extended(new_k, new_v)
        k_ref, v_ref = torch.cat([k_ref, new_k], dim=2), torch.cat([v_ref, new_v], dim=2)
        assert torch.equal(cache.k, k_ref) and torch.equal(cache.v, v_ref)
        index = torch.tensor(order)
        cache = cache.reordered(index)
        k_ref, v_ref = k_ref.index_select(0, index), v_ref.index_select(0, index)
        assert torch.equal(cache.k, k_ref) and torch.equal(cache.v, v_ref)
    assert cache.length == len(orders) and cache.buffers is not None
    assert cache.buffers.k.shape[2] == 8, "allocated for the capacity, never grown"


def test_steps_allocate_nothing_after_the_first_ones() -> None:
    """Two sets of buffers, written in turn: once beam search's rows have reached K a sentence,
    every step writes and gathers into the same two."""
    cache = StaticKVCache(20)
    seen = set()
    for step in range(12):
        rows = 2 if step == 0 else 8
        cache = cache.extended(torch.randn(rows, 2, 1, 4), torch.randn(rows, 2, 1, 4))
        cache = cache.reordered(torch.randint(0, rows, (8,)))
        assert cache.buffers is not None
        if step >= 2:
            seen.add(cache.buffers.k.data_ptr())
    assert len(seen) == 2


def test_a_cache_made_without_capacity_grows_by_doubling() -> None:
    """A teacher-forced pass keeps its keys as they are (`KVCache`); steps after it write into
    buffers of twice the positions, doubled whenever they are full."""
    torch.manual_seed(1)
    k, v = torch.randn(2, 2, 3, 4), torch.randn(2, 2, 3, 4)
    cache = KVCache(k, v).extended(torch.randn(2, 2, 1, 4), torch.randn(2, 2, 1, 4))
    k_ref = torch.cat([k, torch.zeros(2, 2, 0, 4)], dim=2)
    assert isinstance(cache, StaticKVCache) and cache.buffers is not None
    capacities = [cache.buffers.k.shape[2]]
    for _ in range(10):
        cache = cache.extended(torch.randn(2, 2, 1, 4), torch.randn(2, 2, 1, 4))
        capacities.append(cache.buffers.k.shape[2])
    assert torch.equal(cache.k[:, :, :3], k_ref) and cache.length == 14
    assert sorted(set(capacities)) == [8, 16]


def test_a_cache_overwritten_since_it_was_made_cannot_go_on() -> None:
    first = StaticKVCache(4).extended(torch.randn(2, 2, 1, 4), torch.randn(2, 2, 1, 4))
    first.extended(torch.randn(2, 2, 1, 4), torch.randn(2, 2, 1, 4))
    with pytest.raises(RuntimeError, match="already extended or reordered"):
        first.extended(torch.randn(2, 2, 1, 4), torch.randn(2, 2, 1, 4))


@pytest.mark.parametrize("capacity", [None, 3, 12], ids=["none", "short", "enough"])
@pytest.mark.parametrize("variant", VARIANTS)
def test_steps_over_the_cache_are_the_teacher_forced_pass(variant: str, capacity: int | None) -> None:
    """Each step attends to exactly the positions written so far, windowed where the model is;
    a capacity too short for the steps fed is made room for."""
    model = tiny_model(VOCAB, 0, **VARIANTS[variant])
    src = sources()
    tgt = torch.randint(4, VOCAB, (src.shape[0], 7), generator=torch.Generator().manual_seed(3))
    tgt[:, 0] = BOS_ID
    with torch.inference_mode():
        full = model(src, tgt).float().log_softmax(-1)
        state = model.init_state(*model.encode(src), capacity=capacity)
        steps = []
        for i in range(tgt.shape[1]):
            log_probs, state = model.decode_step(tgt[:, i : i + 1], state)
            steps.append(log_probs)
    torch.testing.assert_close(torch.stack(steps, dim=1), full, rtol=0, atol=1e-5)


# --- the searches ---------------------------------------------------------------------------------


@dataclass
class Watched:
    """What `Batch.stored` reads of the first model's state: the watched layer's attention of the
    last step, averaged over heads (rows, T, S)."""

    attended: Tensor | None


class Prefixes(Batch):
    """A batch decoded without a cache: the tokens fed to each row so far, and its source."""

    def __init__(self, src: Tensor, vocab: Tensor | None, alignable: Tensor | None):
        super().__init__([Watched(None)], vocab, [], alignable)  # type: ignore[list-item]
        self.src, self.fed = src, torch.empty((src.shape[0], 0), dtype=torch.long)

    def reorder(self, rows: Tensor, sentences: Tensor | None = None, beam: int | None = None) -> None:
        self.fed = self.fed[rows]
        if sentences is not None:
            self.src = self.src[sentences]
            self.alignable = self.alignable[sentences] if self.alignable is not None else None


class Recomputing(Ensemble):
    """The ensemble as the search sees it, each step a full teacher-forced pass of each model over
    every row's tokens so far: nothing carried from one step to the next but the tokens."""

    def start(
        self, src: Tensor, *, vocab: Tensor | None = None, align: bool = False, steps: int | None = None
    ) -> Batch:
        return Prefixes(src, vocab, (src != PAD_ID) & (src != EOS_ID) if align else None)

    def step(self, tokens: Tensor, batch: Batch, normalize: bool = True) -> Tensor:
        assert isinstance(batch, Prefixes)
        batch.fed = torch.cat([batch.fed, batch.target_ids(tokens)], dim=1)
        src = batch.src.repeat_interleave(batch.fed.shape[0] // batch.src.shape[0], dim=0)
        per_model = []
        for model in self.models:
            logits = model(src, batch.fed)[:, -1].float()
            per_model.append((logits if batch.vocab is None else logits[:, batch.vocab]).log_softmax(-1))
        log_probs = torch.stack(per_model).mean(dim=0)
        log_probs[:, PAD_ID] = log_probs[:, BOS_ID] = float("-inf")
        if batch.alignable is not None:
            model = self.models[0]
            weights = model.cross_attention(src, batch.fed, default_layer(model))
            batch.states = [Watched(weights.mean(dim=1))]  # type: ignore[list-item]
        return log_probs


@dataclass
class Concatenated:
    """The self-attention cache as it was before it was written in place: grown by torch.cat
    into a new tensor at every step, reordered by index_select."""

    capacity: int
    k: Tensor | None = None
    v: Tensor | None = None

    def extended(self, k: Tensor, v: Tensor) -> Concatenated:
        if self.k is None or self.v is None:
            return Concatenated(self.capacity, k, v)
        return Concatenated(self.capacity, torch.cat([self.k, k], dim=2), torch.cat([self.v, v], dim=2))

    def reordered(self, index: Tensor) -> Concatenated:
        if self.k is None or self.v is None:
            return self
        return Concatenated(self.capacity, self.k.index_select(0, index), self.v.index_select(0, index))


def sources() -> Tensor:
    g = torch.Generator().manual_seed(5)
    src = torch.randint(4, VOCAB, (8, 9), generator=g)
    src[:, -1] = EOS_ID
    for row, length in ((1, 3), (3, 6), (5, 1), (6, 8)):  # shorter sentences, padded
        src[row, length:] = PAD_ID
        src[row, length - 1] = EOS_ID
    return src


PHRASES = [[[7, 8]], [[12]], [[20, 21, 22], [5]], [], [[9], [9, 10]], [[25, 4], [6, 11]], [], [[13]]]
"""One sentence's phrases a row of `sources()`."""

SHORTLIST = torch.tensor([0, 1, 2, 3, *range(5, VOCAB, 2)])


@dataclass(frozen=True)
class Case:
    """One search: the beam, n-best, how often finished sentences leave, and what it searches with."""

    beam: int
    nbest: int = 1
    prune_every: int = 1
    constraints: bool = False
    align: bool = False
    shortlist: bool = False

    def search(self, ensemble: Ensemble) -> list[list[Hypothesis]]:
        cfg = DecodeConfig(beam=self.beam, lenpen=0.8, max_len_a=1.2, max_len_b=4, min_len=1)
        vocab = SHORTLIST if self.shortlist else None
        constraints = Constraints.of(PHRASES, False, torch.device("cpu")) if self.constraints else None
        with torch.inference_mode():
            settings = DecodeSettings(cfg, self.nbest, alignments=self.align, prune_every=self.prune_every)
            if self.beam == 1 and constraints is None:
                return greedy_search(ensemble, sources(), settings, vocab)
            return beam_search(ensemble, sources(), settings, vocab, constraints)


CASES = [
    *(Case(beam, min(beam, 3), every) for beam in (1, 4, 5) for every in (1, 3)),
    *(Case(beam, constraints=True) for beam in (1, 4, 5)),
    *(Case(beam, nbest=beam, align=True, prune_every=3) for beam in (1, 4)),
    *(Case(beam, shortlist=True) for beam in (1, 4)),
    Case(4, 2, 3, constraints=True, align=True, shortlist=True),
]
VARIANT_NAMES = ["post", "learned-pre-realformer-windowed"]


def models(count: int, variant: str, dtype: torch.dtype = torch.float32) -> list[Transformer]:
    return [tiny(VOCAB, seed, **VARIANTS[variant]).to(dtype) for seed in range(count)]


def assert_same(fast: list[list[Hypothesis]], slow: list[list[Hypothesis]], atol: float) -> None:
    assert [[(h.tokens, h.links) for h in hyps] for hyps in fast] == [
        [(h.tokens, h.links) for h in hyps] for hyps in slow
    ]
    for mine, theirs in zip(fast, slow, strict=True):
        assert [h.score for h in mine] == pytest.approx([h.score for h in theirs], rel=0, abs=atol)


@pytest.mark.parametrize("case", CASES, ids=str)
@pytest.mark.parametrize("count", [1, 2])
@pytest.mark.parametrize("variant", VARIANT_NAMES)
def test_the_search_over_the_cache_is_the_search_without_one(case: Case, count: int, variant: str) -> None:
    ensemble = models(count, variant)
    assert_same(case.search(Ensemble(ensemble)), case.search(Recomputing(ensemble)), atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("count", [1, 2])
@pytest.mark.parametrize("variant", VARIANT_NAMES)
def test_the_search_finds_what_it_found_over_a_cache_grown_by_concatenation(
    dtype: torch.dtype, count: int, variant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In bf16 too (on a CPU, attention of several queries is written out there: `_explicit`)."""
    ensemble = Ensemble(models(count, variant, dtype))
    in_place = [case.search(ensemble) for case in CASES]
    monkeypatch.setattr(transformer, "StaticKVCache", Concatenated)
    for case, found in zip(CASES, in_place, strict=True):
        assert_same(found, case.search(ensemble), atol=0.0)
