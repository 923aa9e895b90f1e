"""The keys and values a decoder keeps between steps: `KVCache` (cross-attention's, or a pass
not decoded step by step) and `StaticKVCache` (self-attention's, written in place step by step).
Each is a value passed in and returned, never state hidden in a module."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class KVCache:
    """Keys and values of one attention layer, (B, h, T, d) each: cross-attention's, projected
    from the encoder output, or self-attention's in a pass that is not decoded step by step."""

    k: Tensor
    v: Tensor

    def index_select(self, index: Tensor) -> KVCache:
        """Reorder the batch dimension (sentences leaving the batch keep their memory rows)."""
        return KVCache(self.k.index_select(0, index), self.v.index_select(0, index))

    def reordered(self, index: Tensor) -> KVCache:
        """`index_select`, as `StaticKVCache.reordered` takes it."""
        return self.index_select(index)

    def extended(self, k: Tensor, v: Tensor) -> StaticKVCache:
        """The cache with `k` and `v` of new positions (B, h, T', d) appended: a decoder state
        made without a capacity (`Transformer.init_state`) goes on in buffers of twice the
        positions it holds, which double whenever they are full."""
        held = self.k.shape[2]
        grown = _Buffers.allocate(self.k, self.v, self.k.shape[0], 2 * (held + k.shape[2]))
        grown.k[:, :, :held] = self.k
        grown.v[:, :, :held] = self.v
        return StaticKVCache(grown.k.shape[2], grown, None, self.k.shape[0], held).extended(k, v)


class _Buffers:
    """Keys and values (R, h, capacity, d) that the caches of one decoding share and write in
    place, with the number of writes so far: a cache may only write buffers that nobody wrote
    since it was made, so that a cache used twice is an error instead of a wrong answer."""

    __slots__ = ("k", "v", "writes")

    def __init__(self, k: Tensor, v: Tensor):
        self.k, self.v, self.writes = k, v, 0

    @classmethod
    def allocate(cls, k: Tensor, v: Tensor, rows: int, capacity: int) -> _Buffers:
        """Room for `rows` rows of `capacity` positions of keys like `k` and values like `v`."""
        h, d_k, d_v = k.shape[1], k.shape[3], v.shape[3]
        return cls(k.new_empty(rows, h, capacity, d_k), v.new_empty(rows, h, capacity, d_v))


class StaticKVCache:
    """Self-attention keys and values of step-by-step decoding, in buffers allocated at the first
    step and written in place: each step writes its positions into them and attention reads a
    view of the positions so far, so that a step allocates and copies nothing, whatever the
    length (a cache grown by concatenation copies all of itself at every step).

    The cache is rows :rows and positions :length of `buffers`. Reordering rows (beam search's
    surviving hypotheses, sentences leaving the batch) gathers them into `spare`, buffers of the
    same size, which then hold the cache while the old ones become the spare: two sets of
    buffers, written in turn. Decoding goes on from the cache each call returns: a cache whose
    buffers were written after it was made (by extending or reordering it, or a cache made from
    it) cannot be extended or reordered again, which is an error, not a wrong answer.

    A plain class with slots, its views made once: every decoder layer makes one at every step.
    """

    __slots__ = ("capacity", "buffers", "spare", "rows", "length", "seen", "_k", "_v")

    def __init__(
        self,
        capacity: int,
        buffers: _Buffers | None = None,
        spare: _Buffers | None = None,
        rows: int = 0,
        length: int = 0,
    ):
        # The positions to allocate at the first step: the longest output the search allows
        # (more are made room for by doubling).
        self.capacity = capacity
        self.buffers, self.spare, self.rows, self.length = buffers, spare, rows, length
        self.seen = 0 if buffers is None else buffers.writes  # the buffers' writes when made
        self._k = None if buffers is None else buffers.k[:rows, :, :length]
        self._v = None if buffers is None else buffers.v[:rows, :, :length]

    @property
    def k(self) -> Tensor:
        """Keys so far, (rows, h, length, d_k): a view of the buffers."""
        assert self._k is not None, "nothing cached yet"
        return self._k

    @property
    def v(self) -> Tensor:
        """Values so far, (rows, h, length, d_v): a view of the buffers."""
        assert self._v is not None, "nothing cached yet"
        return self._v

    def extended(self, k: Tensor, v: Tensor) -> StaticKVCache:
        """The cache with `k` and `v` of new positions (B, h, T', d) written after the others."""
        buffers, spare = self._writable(), self.spare
        rows, new = k.shape[0], k.shape[2]
        if buffers is None or self.length + new > buffers.k.shape[2]:
            buffers, spare = self._grown(k, v, self.length + new), None  # an old-size spare is no use
        elif rows != self.rows:
            raise ValueError(f"{rows} new rows for a cache of {self.rows}: reorder it first")
        cache = StaticKVCache(self.capacity, buffers, spare, rows, self.length + new)
        cache.k.narrow(2, self.length, new).copy_(k)
        cache.v.narrow(2, self.length, new).copy_(v)
        buffers.writes += 1
        cache.seen = buffers.writes
        return cache

    def reordered(self, index: Tensor) -> StaticKVCache:
        """Keep rows `index` (indices into the current rows), in that order: one gather into the
        spare buffers, allocated only when they are missing or have too few rows (the first
        reordering, and beam search's first step, decoded once per sentence)."""
        buffers = self._writable()
        if buffers is None:
            return self
        spare, rows = self.spare, index.numel()
        if spare is None or spare.k.shape[0] < rows:
            spare = _Buffers.allocate(buffers.k, buffers.v, rows, buffers.k.shape[2])
        cache = StaticKVCache(self.capacity, spare, buffers, rows, self.length)
        torch.index_select(self.k, 0, index, out=cache.k)
        torch.index_select(self.v, 0, index, out=cache.v)
        spare.writes += 1
        cache.seen = spare.writes
        return cache

    def _writable(self) -> _Buffers | None:
        if self.buffers is not None and self.buffers.writes != self.seen:
            raise RuntimeError(
                "this cache was already extended or reordered, and its buffers written in place: "
                "go on from the cache that returned"
            )
        return self.buffers

    def _grown(self, k: Tensor, v: Tensor, end: int) -> _Buffers:
        """Buffers for rows like `k` and `end` positions or more, holding the cache so far: of
        `capacity` positions at the first step, twice the old ones when they are full."""
        if self.buffers is None:
            return _Buffers.allocate(k, v, k.shape[0], max(self.capacity, end))
        grown = _Buffers.allocate(k, v, k.shape[0], max(2 * self.buffers.k.shape[2], end))
        grown.k[: self.rows, :, : self.length] = self.k
        grown.v[: self.rows, :, : self.length] = self.v
        return grown


SelfCache = KVCache | StaticKVCache
"""Self-attention keys and values of the positions so far, as a decoder layer takes them."""
