"""Lexically constrained beam search: target phrases that must appear in each translation, met by
dynamic beam allocation (Post & Vilar, 2018), vectorised over the batch (Hu et al., 2019).

Each hypothesis carries its progress through its sentence's constraints: which are met, and which
one it is in the middle of and how far. At every step the candidates are the usual best
continuations, the best continuation of each hypothesis, and each hypothesis's next constraint
pieces (the next piece of the phrase it is in, or the first piece of each phrase it may start).
Candidates are then grouped in banks by how many constraint pieces they have produced, and the
beam is filled bank by bank: the best of each bank, then the second best of each, and so on, so
that hypotheses that have met fewer constraints are not crowded out by likelier ones that met
none, nor the other way round. A hypothesis may end only once every constraint is met (at the
length limit it ends regardless, the constraints then unmet).

Constraints are unordered by default: each may start wherever the search finds it best. With
`ordered`, only the first unmet one may start (fairseq's `--constraints ordered`). A phrase broken
off half-way (a piece other than its next one) starts over. A glossary term starts only where the
model's attention is on its source term, in place of the model's own word (`decoding.placement`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
from torch import Tensor

from nmt_cli.decoding.placement import Anchors, Placement, anchor_mask, placement
from nmt_cli.decoding.ranking import top_k
from nmt_cli.special_ids import EOS_ID, PAD_ID

Phrases = list[list[int]]
"""One sentence's constraints: each a target phrase as piece ids."""


@dataclass(frozen=True)
class Constraints:
    """The constraints of a batch of N sentences: `ids` (N, C, L) padded with PAD, `lengths` (N, C),
    0 where a sentence has fewer than C phrases."""

    ids: Tensor
    lengths: Tensor
    ordered: bool = False
    word_ends: Tensor | None = None
    """(V,) True at the pieces that may follow a phrase (`restrict`); None: any."""
    anchors: Tensor | None = None
    """(N, C, S + 1) True at the source positions whose attention lets a phrase start, the last
    column standing for every position from S on; None: every phrase may start anywhere."""
    word_starts: Tensor | None = None
    """(V,) True at the pieces that start a word of letters or digits: those a placed phrase
    displaces for good (`ConstraintProgress.displaced`); None: none."""

    @classmethod
    def of(
        cls,
        phrases: list[Phrases],
        ordered: bool,
        device: torch.device,
        word_ends: Tensor | None = None,
        anchors: list[Anchors] | None = None,
        word_starts: Tensor | None = None,
    ) -> Constraints:
        """`anchors`: for each sentence, each phrase's source positions (none: anywhere)."""
        c = max([len(p) for p in phrases] + [1])
        length = max([len(x) for p in phrases for x in p] + [1])
        ids = torch.full((len(phrases), c, length), PAD_ID, dtype=torch.long)
        lengths = torch.zeros((len(phrases), c), dtype=torch.long)
        for i, sentence in enumerate(phrases):
            for j, phrase in enumerate(sentence):
                ids[i, j, : len(phrase)] = torch.tensor(phrase, dtype=torch.long)
                lengths[i, j] = len(phrase)
        ends = word_ends.to(device) if word_ends is not None else None
        starts = word_starts.to(device) if word_starts is not None else None
        where = anchor_mask(anchors, c).to(device) if anchors is not None and any(map(any, anchors)) else None
        return cls(ids.to(device), lengths.to(device), ordered, ends, where, starts)

    def in_vocabulary(self, vocab: Tensor | None) -> Constraints:
        """The phrases as columns of a batch vocabulary (`vocab` sorted after its special ids, as
        `Shortlist.vocabulary` makes it and `with_pieces` keeps it); as they are for None."""
        if vocab is None:
            return self
        columns = torch.searchsorted(vocab, self.ids).clamp_(max=vocab.numel() - 1)
        ids = torch.where(self.lengths.unsqueeze(-1) > 0, columns, PAD_ID)
        ends = self.word_ends[vocab] if self.word_ends is not None else None
        starts = self.word_starts[vocab] if self.word_starts is not None else None
        return dataclasses.replace(self, ids=ids, word_ends=ends, word_starts=starts)

    def select(self, sentences: Tensor) -> Constraints:
        anchors = self.anchors[sentences] if self.anchors is not None else None
        return dataclasses.replace(
            self, ids=self.ids[sentences], lengths=self.lengths[sentences], anchors=anchors
        )

    def anywhere(self) -> Constraints:
        """The same phrases, each free to start anywhere."""
        return dataclasses.replace(self, anchors=None, word_starts=None)

    def with_pieces(self, vocab: Tensor) -> Tensor:
        """`vocab` (special ids first, then sorted) with every constraint piece added: a shortlist
        must not leave out a piece that a translation is forced to produce."""
        specials = int((vocab < 4).sum())
        pieces = self.ids[self.ids >= specials]
        return torch.cat([vocab[:specials], torch.unique(torch.cat([vocab[specials:], pieces]))])

    def met_by(self, sentence: int, tokens: list[int]) -> bool:
        """Whether `tokens` contain every phrase of `sentence`."""
        for phrase, length in zip(self.ids[sentence].tolist(), self.lengths[sentence].tolist(), strict=True):
            starts = range(len(tokens) - length + 1)
            if length and not any(tokens[i : i + length] == phrase[:length] for i in starts):
                return False
        return True


@dataclass(frozen=True)
class ConstraintProgress:
    """Where each of B hypotheses stands: `met` (B, C); `at` (B, C), how many pieces of each
    phrase its last pieces match (every phrase is followed at once, so that phrases that begin
    alike do not block one another); whether its last piece ended a phrase (`ended`); and
    `displaced` (B, C), the piece each phrase displaced where it began (`decoding.placement`;
    PAD: none), which `restrict` bans from then on."""

    met: Tensor
    at: Tensor
    ended: Tensor
    displaced: Tensor

    @classmethod
    def start(cls, rows: int, c: int, device: torch.device) -> ConstraintProgress:
        met = torch.zeros((rows, c), dtype=torch.bool, device=device)
        at = torch.zeros((rows, c), dtype=torch.long, device=device)
        ended = torch.zeros(rows, dtype=torch.bool, device=device)
        return cls(met, at, ended, torch.full((rows, c), PAD_ID, dtype=torch.long, device=device))

    def select(self, rows: Tensor) -> ConstraintProgress:
        return ConstraintProgress(self.met[rows], self.at[rows], self.ended[rows], self.displaced[rows])

    def pieces_met(self, lengths: Tensor) -> Tensor:
        """(B,) constraint pieces produced so far, of the phrases met and of the one furthest
        along: the bank."""
        return (self.met * lengths).sum(dim=1) + self.at.amax(dim=1)

    def all_met(self, lengths: Tensor) -> Tensor:
        return (self.met | (lengths == 0)).all(dim=1)

    def open(self, lengths: Tensor, ordered: bool, may_start: Tensor | None = None) -> Tensor:
        """(B, C): the phrases each hypothesis may work on now; with `may_start` (B, C), a phrase
        not begun only where it allows."""
        open_ = ~self.met & (lengths > 0)
        if ordered:  # only the first unmet phrase
            first = open_.long().argmax(dim=1, keepdim=True)
            open_ = open_ & (torch.arange(open_.shape[1], device=open_.device) == first)
        return open_ if may_start is None else open_ & ((self.at > 0) | may_start)

    def next_pieces(
        self, ids: Tensor, lengths: Tensor, ordered: bool, may_start: Tensor | None = None
    ) -> Tensor:
        """(B, C): the piece that would advance each open phrase, PAD for the others."""
        following = ids.gather(2, self.at.clamp(max=ids.shape[2] - 1).unsqueeze(-1))[..., 0]
        return torch.where(self.open(lengths, ordered, may_start), following, PAD_ID)

    def advanced(
        self, tokens: Tensor, ids: Tensor, lengths: Tensor, ordered: bool, placed: Placement | None = None
    ) -> ConstraintProgress:
        """The progress after each hypothesis produces `tokens` (B,); `ids` (B, C, L) and `lengths`
        (B, C) are its sentence's phrases. A piece that breaks a phrase off starts it over, from
        that piece where the phrase begins with it. `placed`: where phrases may begin now, and what
        beginning them displaces (None: anywhere, nothing)."""
        open_ = self.open(lengths, ordered)
        may_start = placed.may_start if placed is not None else None
        piece = tokens.unsqueeze(1)
        going_on = self.open(lengths, ordered, may_start) & (piece == self.next_pieces(ids, lengths, ordered))
        starting = open_ & ~going_on & (piece == ids[:, :, 0])
        if may_start is not None:
            starting &= may_start
        at = torch.where(going_on, self.at + 1, starting.long())
        finished = open_ & (at == lengths)
        displaced = self.displaced
        if placed is not None:
            begun = (going_on & (self.at == 0)) | starting
            displaced = torch.where(begun & (displaced == PAD_ID), placed.displacing, displaced)
        return ConstraintProgress(
            self.met | finished, torch.where(finished, 0, at), finished.any(dim=1), displaced
        )


@dataclass(frozen=True)
class Chosen:
    """A step's candidates of each of A sentences in the order the beam takes them (M = 2K + R +
    R * C wide): scores, the hypothesis (0..R-1) each continues, its piece, and the progress each
    would have (A * M rows)."""

    scores: Tensor
    beams: Tensor
    tokens: Tensor
    progress: ConstraintProgress
    all_met: Tensor  # (A, M)


def restrict(
    log_probs: Tensor,
    progress: ConstraintProgress,
    lengths: Tensor,
    at_limit: Tensor,
    word_ends: Tensor | None,
) -> None:
    """No EOS for a hypothesis with an unmet phrase, unless it is at its length limit; after a
    phrase, only a piece that `word_ends` allows (one that starts a word, punctuation, EOS), so
    that "Haus" is not met inside "Hausboot"; never a piece a phrase displaced (the model's own
    word beside the glossary's: "Velo" placed, "Fahrrad" no more)."""
    log_probs[:, EOS_ID].masked_fill_(~progress.all_met(lengths) & ~at_limit, float("-inf"))
    log_probs.scatter_(1, progress.displaced, float("-inf"))  # PAD where none: already -inf
    rows = progress.ended.nonzero()[:, 0] if word_ends is not None else None
    if rows is not None and word_ends is not None and rows.numel():  # by row: most rows ended nothing
        log_probs[rows] = log_probs[rows].masked_fill(~word_ends, float("-inf"))


def candidates(
    cand: Tensor,
    log_probs: Tensor,
    progress: ConstraintProgress,
    cons: Constraints,
    k: int,
    width: int,
    attended: Tensor | None = None,
) -> Chosen:
    """The candidates of a constrained step, in bank order. `cand` (A, R * V): each continuation's
    score; `log_probs` (A * R, V), the same scores row by row; `progress` (A * R rows) and `cons`
    (A sentences) the hypotheses' progress and their sentences' phrases; `attended` (A * R,): the
    source position each hypothesis attends to most now, which places phrases with anchors
    (`decoding.placement`)."""
    a, r = cand.shape[0], progress.ended.shape[0] // cand.shape[0]
    device = cand.device
    top_idx = top_k(cand, min(2 * k, cand.shape[1]))[1]
    best_tok = top_k(log_probs, 1)[1].view(a, r)
    own = torch.arange(r, device=device).expand(a, r)
    ids, lengths = cons.ids.repeat_interleave(r, dim=0), cons.lengths.repeat_interleave(r, dim=0)
    placed = (
        placement(cons.anchors, cons.word_starts, attended, log_probs, ids[:, :, 0])
        if cons.anchors is not None and attended is not None
        else None
    )
    may_start = placed.may_start if placed is not None else None
    forced = progress.next_pieces(ids, lengths, cons.ordered, may_start).view(a, r * ids.shape[1])
    forced_beam = own.repeat_interleave(ids.shape[1], dim=1)
    beams = torch.cat([top_idx // width, own, forced_beam], dim=1)
    tokens = torch.cat([top_idx % width, best_tok, forced.clamp(min=0)], dim=1)
    valid = torch.cat([torch.ones_like(top_idx, dtype=torch.bool), torch.ones_like(own, dtype=torch.bool)], 1)
    valid = torch.cat([valid, forced != PAD_ID], dim=1)
    scores = cand.gather(1, beams * width + tokens).masked_fill(~valid, float("-inf"))
    scores = _without_repeats(scores, beams * width + tokens)
    rows = (torch.arange(a, device=device).unsqueeze(1) * r + beams).flatten()
    m = beams.shape[1]
    sentence_rows = torch.arange(a, device=device).repeat_interleave(m)
    after = progress.select(rows).advanced(
        tokens.flatten(),
        cons.ids[sentence_rows],
        cons.lengths[sentence_rows],
        cons.ordered,
        placed.select(rows) if placed is not None else None,
    )
    lengths_rows = cons.lengths[sentence_rows]
    bank = after.pieces_met(lengths_rows).view(a, m)
    # More banks than any sentence fills, known from the shapes alone: no read from the device.
    order = _bank_order(scores, bank, cons.ids.shape[1] * cons.ids.shape[2] + 1)
    flat = (torch.arange(a, device=device).unsqueeze(1) * m + order).flatten()
    return Chosen(
        scores.gather(1, order),
        beams.gather(1, order),
        tokens.gather(1, order),
        after.select(flat),
        after.all_met(lengths_rows).view(a, m).gather(1, order),
    )


def _without_repeats(scores: Tensor, keys: Tensor) -> Tensor:
    """`scores` with -inf for every repeat of a (hypothesis, piece) candidate after its first:
    one continuation must not fill two places of the beam."""
    sorted_keys, at = keys.sort(dim=1, stable=True)
    repeat = torch.zeros_like(sorted_keys, dtype=torch.bool)
    repeat[:, 1:] = sorted_keys[:, 1:] == sorted_keys[:, :-1]
    return scores.masked_fill(repeat.new_zeros(repeat.shape).scatter(1, at, repeat), float("-inf"))


def _bank_order(scores: Tensor, bank: Tensor, banks: int) -> Tensor:
    """(A, M) candidate columns in the order the beam takes them: the best of each bank (the bank
    with more constraint pieces first), then the second best of each, ...; impossible ones last."""
    same = bank.unsqueeze(2) == bank.unsqueeze(1)
    m = scores.shape[1]
    earlier = torch.arange(m, device=scores.device)
    ahead = (scores.unsqueeze(1) > scores.unsqueeze(2)) | (
        (scores.unsqueeze(1) == scores.unsqueeze(2)) & (earlier.view(1, 1, m) < earlier.view(1, m, 1))
    )
    rank = (same & ahead).sum(dim=2)  # how many of its bank go before it
    key = rank * banks + (banks - 1 - bank)
    key = key.masked_fill(~scores.isfinite(), m * banks + banks)
    return key.argsort(dim=1, stable=True)
