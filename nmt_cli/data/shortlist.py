"""Vocabulary shortlists: for each source piece, the target pieces that translate it.

Learned from a parallel corpus by counting, for every source piece s and target piece t, the
sentence pairs that hold both. A source piece's candidates are the target pieces t with the
highest share of its sentences, c(s, t) / c(s) (the chance that a sentence holding s has t in its
translation), ties going to the more frequent t; the most frequent target pieces are candidates
of every sentence. Decoding a batch then scores only the union of its source pieces' candidates
(`Shortlist.vocabulary`) instead of the whole target vocabulary: the output projection, the
softmax and the top-k shrink with it. Marian learns its lexical shortlists from word alignments;
sentence co-occurrence needs no aligner and, with the frequent pieces, covers nearly as much
(`coverage` measures it on held-out pairs).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from nmt_cli.errors import InputError
from nmt_cli.special_ids import EOS_ID

SPECIALS = EOS_ID + 1
"""Ids 0..3 (pad, unk, bos, eos) lead every shortlist vocabulary, so that a search over it finds
them at their own ids."""
CHUNK_PAIRS = 1 << 24
"""(source, target) piece pairs counted at a time: bounds the memory of counting a large corpus."""


@dataclass(frozen=True)
class Shortlist:
    candidates: Tensor
    """(source vocabulary, K) int32: each source piece's K candidate target ids, best first; -1 pads
    the rows of pieces seen with fewer."""
    frequent: Tensor
    """(F,) int32: the target ids that every vocabulary holds, the most frequent first."""

    def vocabulary(self, src: Tensor) -> Tensor:
        """The target ids a batch of source ids (B, S) may produce: the special ids 0..3 first (at
        their own ids), then every other candidate in increasing order; int64, on src's device."""
        rows = self.candidates.index_select(0, src.flatten()).flatten()
        ids = torch.cat([rows, self.frequent]).long()
        ids = torch.unique(ids[ids >= SPECIALS])  # sorted
        return torch.cat([torch.arange(SPECIALS, device=src.device), ids])

    def to(self, device: torch.device) -> Shortlist:
        return Shortlist(self.candidates.to(device), self.frequent.to(device))

    def to_dict(self) -> dict[str, Tensor]:
        return {"candidates": self.candidates, "frequent": self.frequent}

    @classmethod
    def from_dict(cls, stored: dict[str, Tensor], src_vocab: int, tgt_vocab: int, where: str) -> Shortlist:
        """The shortlist a checkpoint stores, checked against the model's vocabularies."""
        candidates, frequent = stored["candidates"], stored["frequent"]
        fits = (
            candidates.dim() == 2
            and candidates.shape[0] == src_vocab
            and frequent.dim() == 1
            and not candidates.is_floating_point()
            and not frequent.is_floating_point()
            and all(
                t.numel() == 0 or (int(t.min()) >= -1 and int(t.max()) < tgt_vocab)
                for t in (candidates, frequent)
            )
        )
        if not fits:
            raise InputError(
                f"{where}: its shortlist does not fit the model's vocabularies ({src_vocab} source, "
                f"{tgt_vocab} target pieces); learn it again with `nmt shortlist`"
            )
        return cls(candidates, frequent)

    @property
    def sizes(self) -> tuple[int, int]:
        """(candidates per source piece, frequent pieces)."""
        return self.candidates.shape[1], self.frequent.shape[0]


def learn(
    pairs: Sequence[tuple[np.ndarray, np.ndarray]],
    src_vocab: int,
    tgt_vocab: int,
    candidates: int,
    frequent: int,
    iterations: int = 5,
    rounds: Callable[[range], Iterable[int]] = iter,
) -> Shortlist:
    """IBM Model 1 (Brown et al., 1993) over (source ids, target ids) pairs: `iterations` rounds of
    EM give t(target | source); each source piece keeps its `candidates` likeliest target pieces,
    and the `frequent` most frequent target pieces are added to every vocabulary. `rounds` wraps
    the range of EM rounds (a progress bar)."""
    tgt_count = np.zeros(tgt_vocab, np.int64)
    for _, tgt in pairs:
        np.add.at(tgt_count, tgt, 1)
    chunks = list(_chunks(pairs))
    seen = [np.unique(_pair_keys(chunk, tgt_vocab)[0]) for chunk in chunks]
    keys = np.unique(np.concatenate(seen)) if seen else np.empty(0, np.int64)
    prob = np.ones(keys.size)
    for _ in rounds(range(iterations)):
        expected = np.zeros(keys.size)
        for chunk in chunks:
            pair_keys, target_token = _pair_keys(chunk, tgt_vocab)
            at = np.searchsorted(keys, pair_keys)
            p = prob[at]
            # Each target token is explained by the source pieces of its sentence, in proportion.
            posterior = p / np.bincount(target_token, weights=p)[target_token]
            expected += np.bincount(at, weights=posterior, minlength=keys.size)
        per_source = np.bincount(keys // tgt_vocab, weights=expected, minlength=src_vocab)
        prob = expected / per_source[keys // tgt_vocab]
    return Shortlist(
        _best_targets(keys, prob, tgt_count, tgt_vocab, src_vocab, candidates),
        _most_frequent(tgt_count, frequent),
    )


def _chunks(
    pairs: Sequence[tuple[np.ndarray, np.ndarray]],
) -> Iterator[Sequence[tuple[np.ndarray, np.ndarray]]]:
    """Runs of consecutive pairs with at most CHUNK_PAIRS (source, target) token pairs each."""
    begin, held = 0, 0
    for i, (src, tgt) in enumerate(pairs):
        if held and held + len(src) * len(tgt) > CHUNK_PAIRS:
            yield pairs[begin:i]
            begin, held = i, 0
        held += len(src) * len(tgt)
    if begin < len(pairs):
        yield pairs[begin:]


def _pair_keys(
    pairs: Sequence[tuple[np.ndarray, np.ndarray]], tgt_vocab: int
) -> tuple[np.ndarray, np.ndarray]:
    """Every (source token, target token) of each sentence pair as source * tgt_vocab + target, and
    the index of its target token among the chunk's target tokens."""
    src_len = np.array([len(s) for s, _ in pairs], np.int64)
    tgt_len = np.array([len(t) for _, t in pairs], np.int64)
    src = np.concatenate([s for s, _ in pairs]).astype(np.int64)
    tgt = np.concatenate([t for _, t in pairs]).astype(np.int64)
    src_start = np.cumsum(src_len) - src_len
    tgt_start = np.cumsum(tgt_len) - tgt_len
    sizes = src_len * tgt_len
    sentence = np.repeat(np.arange(len(pairs)), sizes)
    local = np.arange(sizes.sum()) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    width = tgt_len[sentence]
    target_token = tgt_start[sentence] + local % width
    return src[src_start[sentence] + local // width] * tgt_vocab + tgt[target_token], target_token


def _best_targets(
    keys: np.ndarray, prob: np.ndarray, tgt_count: np.ndarray, tgt_vocab: int, src_vocab: int, k: int
) -> Tensor:
    src, tgt = keys // tgt_vocab, keys % tgt_vocab
    real = tgt >= SPECIALS  # the special pieces are in every vocabulary anyway
    src, tgt, prob = src[real], tgt[real], prob[real]
    # Per source piece, likeliest first, ties to the more frequent target, then the lower id.
    order = np.lexsort((tgt, -tgt_count[tgt], -prob, src))
    src, tgt = src[order], tgt[order]
    rank = np.arange(src.size) - np.searchsorted(src, src, side="left")  # within its source piece
    keep = rank < k
    table = np.full((src_vocab, k), -1, np.int32)
    table[src[keep], rank[keep]] = tgt[keep]
    return torch.from_numpy(table)


def _most_frequent(tgt_count: np.ndarray, f: int) -> Tensor:
    order = np.lexsort((np.arange(tgt_count.size), -tgt_count))
    order = order[order >= SPECIALS][:f]
    return torch.from_numpy(order.astype(np.int32))


def coverage(
    shortlist: Shortlist, pairs: Iterable[tuple[Sequence[int] | np.ndarray, Sequence[int] | np.ndarray]]
) -> tuple[float, float]:
    """On held-out pairs, the share of reference target pieces that each sentence's shortlist
    vocabulary holds, and the mean vocabulary size per sentence."""
    found = total = size = sentences = 0
    for src, tgt in pairs:
        vocab = shortlist.vocabulary(torch.as_tensor(np.asarray(src, np.int64)).view(1, -1))
        ref = torch.as_tensor(np.asarray(tgt, np.int64))
        found += int(torch.isin(ref, vocab).sum())
        total += ref.numel()
        size += vocab.numel()
        sentences += 1
    return found / max(total, 1), size / max(sentences, 1)
