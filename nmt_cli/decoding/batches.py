"""Which search decodes a batch (`BatchSearch`: sampling, greedy or beam search, constrained or
not, over a shortlist or the whole vocabulary), and sentences decoded in length-sorted batches
(`translate_sentences`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from nmt_cli.data.batching import collate, make_batches
from nmt_cli.data.shortlist import Shortlist
from nmt_cli.decoding.constraints import Constraints, Phrases
from nmt_cli.decoding.ensemble import Ensemble
from nmt_cli.decoding.placement import Anchors
from nmt_cli.decoding.search import Hypothesis, beam_search, greedy_search
from nmt_cli.decoding.settings import DecodeSettings


@dataclass(frozen=True)
class BatchSearch:
    """How one call's batches are searched: the models, the call's settings and, where the call
    asks for it, the shortlist (`translate` then takes each batch and its constraints)."""

    ensemble: Ensemble
    settings: DecodeSettings
    shortlist: Shortlist | None = None

    def translate(self, src: Tensor, constraints: Constraints | None = None) -> list[list[Hypothesis]]:
        """Sampling when asked, greedy search for beam 1 (the fast path), beam search otherwise
        (with `constraints`, always); over the batch's shortlist vocabulary when there is a
        shortlist, with the constraints' pieces added. Without `settings.scores` the caller reads
        no score, which greedy search may then leave out (NaN); with `settings.alignments`,
        hypotheses carry links."""
        cfg, sampling = self.settings.search, self.settings.sampling
        greedy = sampling is not None or (cfg.beam == 1 and self.settings.nbest == 1)
        free = constraints.lengths.sum(dim=1) == 0 if constraints is not None else None
        if greedy and free is not None and constraints is not None and bool(free.any()):
            # Beam 1 keeps greedy search for the sentences without phrases: a sentence's
            # translation must not depend on whether its batch holds phrases.
            return self._apart(src, constraints, free)
        vocab = self.shortlist.vocabulary(src) if self.shortlist is not None else None
        if constraints is not None and vocab is not None:
            vocab = constraints.with_pieces(vocab)
        if constraints is None and greedy:
            return greedy_search(self.ensemble, src, self.settings, vocab)
        hypotheses = beam_search(self.ensemble, src, self.settings, vocab, constraints)
        if constraints is not None and constraints.anchors is not None:
            # A sentence whose hypotheses found no place for a term (`decoding.placement`) ends
            # without it: it is searched again, its phrases free to go anywhere as a line's own are.
            missed = [
                i
                for i, hyps in enumerate(hypotheses)
                if not hyps or not constraints.met_by(i, hyps[0].tokens)
            ]
            rows = torch.tensor(missed, dtype=torch.long, device=src.device)
            anywhere = constraints.select(rows).anywhere()
            again = beam_search(self.ensemble, src[rows], self.settings, vocab, anywhere) if missed else []
            for i, sentence in zip(missed, again, strict=True):
                hypotheses[i] = sentence
        return hypotheses

    def _apart(self, src: Tensor, constraints: Constraints, free: Tensor) -> list[list[Hypothesis]]:
        """The sentences without phrases (`free`) and those with them, each searched on their own
        and put back in the batch's order."""
        parts = [free.nonzero()[:, 0], (~free).nonzero()[:, 0]]
        found = [
            self.translate(src[rows], given)
            for rows, given in zip(parts, (None, constraints.select(parts[1])), strict=True)
            if rows.numel()
        ]
        merged: list[list[Hypothesis]] = [[] for _ in range(src.shape[0])]
        for rows, hyps in zip([p for p in parts if p.numel()], found, strict=True):
            for i, h in zip(rows.tolist(), hyps, strict=True):
                merged[i] = h
        return merged


def translate_sentences(
    ensemble: Ensemble,
    sentences: list[np.ndarray],
    settings: DecodeSettings,
    device: torch.device,
    shortlist: Shortlist | None = None,
    constraints: list[Phrases] | None = None,
    word_ends: Tensor | None = None,
    anchors: list[Anchors] | None = None,
    word_starts: Tensor | None = None,
) -> list[list[Hypothesis]]:
    """Translate source id sequences (without EOS) in length-sorted batches of
    `settings.batch_tokens`; results in input order (`BatchSearch`). `constraints`: each
    sentence's target phrases, met in the given order with `settings.ordered_constraints`, each
    followed by a piece `word_ends` allows (`constraints.restrict`); `anchors`: where each phrase
    may start (`decoding.placement`), the model's own word there displaced for good where it
    starts a word (`word_starts`)."""
    if not sentences:
        return []
    lengths = np.array([len(s) for s in sentences], dtype=np.int64)
    results: list[list[Hypothesis]] = [[] for _ in sentences]
    # Beam search holds beam x rows, so the source budget shrinks with the beam.
    rows_per_source = 1 if settings.sampling is not None else max(settings.search.beam, 1)
    budget = max(settings.batch_tokens // rows_per_source, int(lengths.max()) + 1)
    search = BatchSearch(ensemble, settings, shortlist)
    for idx in make_batches(lengths, lengths, budget, seed=0, epoch=0, shuffle=False):
        src = collate([sentences[i] for i in idx])["src"].to(device)
        phrases = [constraints[i] for i in idx] if constraints is not None else []
        where = [anchors[i] for i in idx] if anchors is not None else None
        ordered = settings.ordered_constraints
        batch_constraints = (
            Constraints.of(phrases, ordered, device, word_ends, where, word_starts) if any(phrases) else None
        )
        hyps = search.translate(src, batch_constraints)
        for i, h in zip(idx.tolist(), hyps, strict=True):
            results[i] = h
    return results
