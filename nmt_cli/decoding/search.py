"""Greedy and batched beam search over the incremental decoder (§6.1).

Bookkeeping is vectorised over sentences and beams: one top-k per step (`top_k`), finished
hypotheses written with tensor indexing, the decoder state reordered by one
`index_select`, and finished sentences leaving the active batch. A sentence's hypotheses
share its encoder memory (no copy per beam), and its first step is decoded once. An ensemble
averages the models' log-probabilities. Sampling (top-k, top-p; `sampling`) goes through the
greedy path. With a vocabulary shortlist, a batch is scored over its own vocabulary (`Batch`),
whose first ids are the special ones, so the search itself does not change.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
from torch import Tensor

from nmt_cli.decoding.constraints import Constraints
from nmt_cli.decoding.ensemble import LINK, Batch, Ensemble
from nmt_cli.decoding.finished import Candidates, Finished
from nmt_cli.decoding.ranking import top_k
from nmt_cli.decoding.sampling import draw, row_keys, uniforms
from nmt_cli.decoding.settings import DecodeSettings
from nmt_cli.decoding.strategies import BeamStrategy, beam_strategy
from nmt_cli.special_ids import EOS_ID, PAD_ID


@dataclass
class Hypothesis:
    tokens: list[int]
    """Generated ids without the final EOS."""
    score: float
    """Sum of log-probabilities divided by the length penalty."""
    links: list[int] | None = None
    """Where the search was asked to align: for each token, the source position (EOS left out) the
    first model's watched decoder layer attended to most while predicting it."""


def _hypotheses(stored: Tensor, scores: Tensor, batch: Batch) -> list[list[Hypothesis]]:
    """(N, H, T) stored tokens and (N, H) scores as each sentence's hypotheses, -inf ones left out;
    target ids, and links where the search aligned."""
    aligned = batch.alignable is not None
    tokens = batch.target_ids(stored % LINK if aligned else stored).tolist()
    links = (stored // LINK).tolist() if aligned else None
    found: list[list[Hypothesis]] = []
    for n, (rows, row_scores) in enumerate(zip(tokens, scores.tolist(), strict=True)):
        found.append([])
        for h, (row, score) in enumerate(zip(rows, row_scores, strict=True)):
            if score != float("-inf"):
                kept = _strip(row)
                found[n].append(Hypothesis(kept, score, links[n][h][: len(kept)] if links else None))
    return found


def length_penalty(length: int, alpha: float, style: str) -> float:
    """GNMT ((5 + |Y|) / 6)^alpha (Wu et al., 2016, the paper's choice) or fairseq's |Y|^alpha.

    |Y| counts the generated tokens including the final EOS. A Python float (float64): with
    alpha at most 10 (`ranges.SETTINGS`) it stays below 1e100 for any length a model can have.
    """
    base = (5.0 + length) / 6.0 if style == "gnmt" else float(length)
    return base**alpha


def max_lengths(src: Tensor, a: float, b: int, limit: int) -> Tensor:
    """Per-sentence output limit (EOS included): a * source length + b, capped by the model's positions."""
    src_len = (src != PAD_ID).sum(dim=1)  # includes the source EOS
    # In float64 and capped before the conversion: a large a * length must not wrap around.
    return (a * (src_len - 1).double() + b + 1).clamp(min=1, max=limit).long()


PRUNE_EVERY_ON_DEVICE = 8
"""Steps between two prunings of finished sentences on an accelerator. Pruning reads back which
sentences are done, and the host then waits for the device; between two prunings nothing is read
back, and finished sentences stay in the batch, their results frozen, at the cost of decoding
their rows until the next pruning (also when every sentence is done)."""


def prune_interval(device: torch.device) -> int:
    """Steps between prunings: every step on a CPU, where the work saved pays at once, and
    `PRUNE_EVERY_ON_DEVICE` on an accelerator."""
    return 1 if device.type == "cpu" else PRUNE_EVERY_ON_DEVICE


def _constrain_length(
    log_probs: Tensor, t: int, limit: Tensor, min_len: int, force_eos: bool = True, on_device: bool = False
) -> None:
    """At step t (0-based): rows at their maximum length may only end (EOS; unless not
    `force_eos`: then their last piece is any, as transformers' generate stops at max_length);
    below min_len, rows may not end yet. `limit` holds each row's maximum length, EOS included.
    `on_device`: by a mask over every row, without reading back which rows are at their limit."""
    forced = t + 1 >= limit
    if force_eos and on_device:
        others = torch.arange(log_probs.shape[1], device=log_probs.device) != EOS_ID
        log_probs.masked_fill_(forced.unsqueeze(1) & others, float("-inf"))
    elif force_eos:  # by row index: a boolean-mask write would pass over every row's vocabulary
        rows = forced.nonzero()[:, 0]
        log_probs[rows, :EOS_ID] = float("-inf")
        log_probs[rows, EOS_ID + 1 :] = float("-inf")
    if t < min_len:
        log_probs[:, EOS_ID].masked_fill_(~forced, float("-inf"))


@torch.inference_mode()
def greedy_search(
    ensemble: Ensemble, src: Tensor, settings: DecodeSettings, vocab: Tensor | None = None
) -> list[list[Hypothesis]]:
    """Beam 1 without beam bookkeeping: at each step the likeliest piece, or one drawn by
    `settings.sampling`; finished rows leave the batch every `settings.prune_every` steps (by
    default `prune_interval` of the device). Of the search settings, only the length limits apply.
    `vocab`: the target ids to choose from (a shortlist), None for all. Without `settings.scores`
    the hypotheses' scores are not wanted (NaN), so that the search takes the largest logit and
    skips the softmax, as CTranslate2 does. With `settings.alignments`, each hypothesis has its
    links (`Hypothesis.links`)."""
    cfg, sampling = settings.search, settings.sampling
    normalize = settings.scores or sampling is not None
    n, device = src.shape[0], src.device
    every = settings.prune_every or prune_interval(device)
    limit = max_lengths(src, cfg.max_len_a, cfg.max_len_b, ensemble.max_positions)
    keys = row_keys(src, sampling.seed) if sampling is not None else None
    max_steps = int(limit.max())
    batch = ensemble.start(src, vocab=vocab, align=settings.alignments, steps=max_steps)
    out = torch.full((n, max_steps), PAD_ID, dtype=torch.long, device=device)
    totals = torch.zeros(n, device=device) if normalize else torch.full((n,), float("nan"), device=device)
    active = torch.arange(n, device=device)
    ended = torch.zeros(n, dtype=torch.bool, device=device)  # rows that have ended, until pruned
    tokens = torch.full((n, 1), ensemble.start_id, dtype=torch.long, device=device)
    for t in range(max_steps):
        log_probs = ensemble.step(tokens, batch, normalize)  # (A, V); logits when not normalize
        _constrain_length(log_probs, t, limit[active], cfg.min_len, on_device=every > 1)
        if sampling is None:
            best, tokens = top_k(log_probs, 1)  # (A, 1)
        else:
            assert keys is not None
            tokens = draw(log_probs, sampling, uniforms(keys[active], t))
            best = log_probs.gather(1, tokens)
        out[active, t] = batch.stored(tokens[:, 0])  # past a row's EOS, cut off by `_strip`
        if normalize:
            totals[active] += best[:, 0].masked_fill(ended, 0.0)
        ended |= tokens[:, 0] == EOS_ID
        if (t + 1) % every == 0:
            keep = (~ended).nonzero()[:, 0]
            if keep.numel() == 0:
                break
            if keep.numel() < active.numel():
                active, tokens, ended = active[keep], tokens[keep], ended[keep]
                batch.reorder(keep, keep)
    return _hypotheses(out.unsqueeze(1), totals.unsqueeze(1), batch)


def _strip(row: list[int]) -> list[int]:
    return row[: row.index(EOS_ID)] if EOS_ID in row else [t for t in row if t != PAD_ID]


@torch.inference_mode()
def beam_search(
    ensemble: Ensemble,
    src: Tensor,
    settings: DecodeSettings,
    vocab: Tensor | None = None,
    constraints: Constraints | None = None,
) -> list[list[Hypothesis]]:
    """Batched beam search with `settings.search`; returns the `settings.nbest` best hypotheses
    per sentence, best first, with their links (`Hypothesis.links`) where `settings.alignments`
    (sampling goes through `greedy_search`, not here); `vocab`: the target ids to search over (a
    shortlist), None for all; `constraints`: phrases each translation must contain
    (`decoding.constraints`, whose pieces `vocab` must hold), searched by a `ConstrainedBeam`,
    a batch without them by a `PlainBeam` (`decoding.strategies`).

    Each step takes the strategy's candidates (plain: the 2K best continuations); an EOS among
    the first K finishes a hypothesis (scored with the length penalty), the first K others
    continue. A sentence is done when K have finished (without `early_stopping`: once its best
    running one cannot beat its worst finished one) or at its maximum length; done sentences
    leave the batch every `settings.prune_every` steps (`prune_interval`; with constraints, every
    step)."""
    cfg = settings.search
    n, k, device = src.shape[0], cfg.beam, src.device
    search = beam_strategy(constraints, vocab, n, device)
    every = 1 if search.prunes_every_step else settings.prune_every or prune_interval(device)
    limit = max_lengths(src, cfg.max_len_a, cfg.max_len_b, ensemble.max_positions)
    max_steps = int(limit.max())
    align = settings.alignments or search.reads_attention
    batch = ensemble.start(src, vocab=vocab, align=align, steps=max_steps)
    per_sentence = 1  # hypothesis rows per sentence in the decoder state: K after the first step
    fin = Finished.empty(n, k, max_steps, device)
    active = torch.arange(n, device=device)  # sentence ids in the batch
    done = torch.zeros(n, dtype=torch.bool, device=device)  # of the active sentences, until pruned
    scores = torch.zeros((n, 1), device=device)
    history = torch.empty((n, 1, 0), dtype=torch.long, device=device)
    tokens = torch.full((n, 1), ensemble.start_id, dtype=torch.long, device=device)
    for t in range(max_steps):
        log_probs = ensemble.step(tokens, batch)  # (A*R, V), R rows per sentence
        a, r, width = active.numel(), per_sentence, log_probs.shape[-1]  # width: the batch's vocabulary
        row_limit = limit[active].repeat_interleave(r)
        _constrain_length(log_probs, t, row_limit, cfg.min_len, cfg.early_stopping, on_device=every > 1)
        search.restrict(log_probs, active, t + 1 >= row_limit, batch.attended)
        # In place: a new vocabulary-wide tensor each step costs more than the addition.
        cand = log_probs.view(a, r, width).add_(scores.unsqueeze(-1)).view(a, r * width)
        candidates = _candidates(*search.candidates(cand, log_probs, active, k, width), k, done)
        stored = batch.stored(candidates.tokens, candidates.beams)
        at_end = t + 1 >= limit[active]
        penalty = length_penalty(t + 1, cfg.lenpen, cfg.lenpen_style)
        _finish(fin, cfg.early_stopping, candidates, stored, history, active, at_end & ~done, penalty, search)
        beams, scores, tokens, history = _continuing(candidates, stored, history, k, search)
        done |= _done(fin, cfg.early_stopping, scores, active, penalty, search) | at_end
        if (t + 1) % every:  # no pruning at this step: every sentence stays, done or not
            batch.reorder((torch.arange(a, device=device).unsqueeze(1) * r + beams).flatten(), beam=k)
        else:
            keep = (~done).nonzero()[:, 0]
            if keep.numel() == 0:
                break
            _leave_done(batch, keep, beams, r, search)
            active, done, scores, history = active[keep], done[keep], scores[keep], history[keep]
            tokens = tokens.view(a, k)[keep].reshape(-1, 1)
        per_sentence = k
    return _hypotheses(*fin.best(settings.nbest), batch)


def _done(
    fin: Finished,
    early_stopping: bool,
    scores: Tensor,
    active: Tensor,
    penalty: float,
    search: BeamStrategy,
) -> Tensor:
    """Which active sentences are done: K hypotheses finished with early stopping; otherwise, once
    the best running score (`scores`, (A, K)) at its length cannot beat the worst finished one;
    either way, a sentence with no hypothesis left (a constrained search's) and one the strategy
    has settled (`BeamStrategy.settled`)."""
    settled = search.settled(active, fin.count[active])
    if early_stopping:
        return (fin.count[active] >= fin.scores.shape[1]) | scores.isneginf().all(dim=1) | settled
    worst = fin.scores[active].min(dim=1).values  # -inf while a slot is free
    return (scores.amax(dim=1).double() / penalty <= worst) | settled


def _extended(history: Tensor, beams: Tensor, new: Tensor) -> Tensor:
    """(A, X, t + 1): the history (A, R, t) of hypotheses `beams` (A, X), each followed by `new`."""
    return torch.cat(
        [history.gather(1, beams.unsqueeze(-1).expand(-1, -1, history.shape[2])), new[..., None]], 2
    )


def _finish(
    fin: Finished,
    early_stopping: bool,
    c: Candidates,
    stored: Tensor,
    history: Tensor,
    active: Tensor,
    at_end: Tensor,
    penalty: float,
    search: BeamStrategy,
) -> None:
    """The step's ending candidates into `fin`: first come with early stopping; otherwise the K best,
    where at the length limit (`at_end`, (A,)) every candidate of the first K ends, whatever its
    last piece. `stored`: the candidates' tokens as the history keeps them."""
    k = fin.scores.shape[1]
    first = c.scores.isfinite() & (torch.arange(c.scores.shape[1], device=c.scores.device) < k)
    ends = c.ending if early_stopping else c.ending | (at_end.unsqueeze(1) & first)
    ends = search.may_end(ends, fin.scores[active])
    if early_stopping:
        fin.take_free_slots(dataclasses.replace(c, ending=ends), history, active, history.shape[2], penalty)
        return
    normalised = (c.scores.double() / penalty).masked_fill(~ends, float("-inf"))
    fin.keep_best(normalised, _extended(history, c.beams, stored), active)


def _candidates(scores: Tensor, beams: Tensor, tokens: Tensor, k: int, done: Tensor) -> Candidates:
    """A step's best continuations (A, M), best first, as `Candidates`: those that end are the EOS
    among the first K with a finite score, in a sentence not yet `done` ((A,))."""
    first = torch.arange(scores.shape[1], device=scores.device).unsqueeze(0) < k  # (1, M)
    return Candidates(
        scores, beams, tokens, (tokens == EOS_ID) & scores.isfinite() & first & ~done.unsqueeze(1)
    )


def _continuing(
    c: Candidates, stored: Tensor, history: Tensor, k: int, search: BeamStrategy
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The hypotheses that continue: the K best candidates without EOS (there are always at least
    K), as the hypotheses (A, K) they continue, their scores (A, K), their last pieces (A * K, 1)
    and their histories (A, K, t + 1); `stored`: the candidates' pieces as the history keeps them."""
    rank = torch.arange(c.scores.shape[1], device=c.scores.device).unsqueeze(0)  # (1, M)
    order = torch.where(c.tokens == EOS_ID, rank + rank.shape[1], rank)
    keep_cols = order.topk(k, dim=1, largest=False).indices  # (A, K)
    beams = c.beams.gather(1, keep_cols)
    search.keep(keep_cols)
    scores, tokens = c.scores.gather(1, keep_cols), c.tokens.gather(1, keep_cols).reshape(-1, 1)
    return beams, scores, tokens, _extended(history, beams, stored.gather(1, keep_cols))


def _leave_done(batch: Batch, keep: Tensor, beams: Tensor, r: int, search: BeamStrategy) -> None:
    """Leave the done sentences out of the decoder state and of the strategy's (`BeamStrategy.prune`):
    `keep` holds the active sentences not done; each of their hypothesis rows is taken from the one
    of R that it continues (`beams`, (A, K))."""
    a, k = beams.shape
    search.prune(keep, k)
    leaving = keep.numel() < a  # memory rows move only when sentences leave
    batch.reorder((keep.unsqueeze(1) * r + beams[keep]).flatten(), keep if leaving else None, beam=k)
