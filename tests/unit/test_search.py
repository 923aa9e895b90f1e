"""Greedy and beam search: agreement with each other, with exhaustive search and with full recomputation."""

import copy
import dataclasses
import itertools

import pytest
import torch
from helpers import tiny_model

from nmt_cli.config import DecodeConfig
from nmt_cli.decoding import ensemble
from nmt_cli.decoding.ensemble import Batch, Ensemble
from nmt_cli.decoding.search import Hypothesis, beam_search, greedy_search, length_penalty, top_k
from nmt_cli.decoding.settings import DecodeSettings, Sampling
from nmt_cli.model import Transformer
from nmt_cli.special_ids import BOS_ID, EOS_ID, PAD_ID


def tiny(vocab: int, seed: int = 0, **variant) -> Transformer:
    model = tiny_model(vocab, seed, **variant)
    with torch.no_grad():  # sharper distributions than the initialisation gives, so search matters
        model.tgt_embed.tokens.weight.mul_(8.0)
    return model


def decoding(beam: int, lenpen: float, style: str, a: float, b: int, min_len: int = 1) -> DecodeConfig:
    return DecodeConfig(
        beam=beam, lenpen=lenpen, lenpen_style=style, max_len_a=a, max_len_b=b, min_len=min_len
    )


def sources(vocab: int, rows: int = 5) -> torch.Tensor:
    g = torch.Generator().manual_seed(1)
    src = torch.randint(4, vocab, (rows, 6), generator=g)
    src[:, -1] = EOS_ID
    src[1, 3:] = PAD_ID  # a shorter sentence
    src[1, 2] = EOS_ID
    return src


def test_beam_one_equals_greedy():
    model = tiny(30)
    src = sources(30)
    greedy = greedy_search(Ensemble([model]), src, DecodeSettings(decoding(1, 0.6, "gnmt", 1.0, 5)))
    beam = beam_search(Ensemble([model]), src, DecodeSettings(decoding(1, 0.6, "gnmt", 1.0, 5)))
    assert [h[0].tokens for h in beam] == [h[0].tokens for h in greedy]


def exhaustive_best(
    model: Transformer, src: torch.Tensor, limit: int, alpha: float, style: str, min_len: int
) -> list[int]:
    """Score every output of min_len .. limit - 1 tokens (then EOS) and return the best."""
    allowed = [t for t in range(model.cfg.tgt_vocab_size) if t not in (PAD_ID, BOS_ID, EOS_ID)]
    best, best_score = None, float("-inf")
    for length in range(min_len, limit):
        for body in itertools.product(allowed, repeat=length):
            tgt = torch.tensor([[BOS_ID, *body]])
            with torch.no_grad():
                log_probs = model(src, tgt).log_softmax(-1)[0]
            path = [*body, EOS_ID]
            total = sum(float(log_probs[i, tok]) for i, tok in enumerate(path))
            score = total / length_penalty(len(path), alpha, style)
            if score > best_score:
                best, best_score = list(body), score
    return best


@pytest.mark.parametrize(
    "limit, beam, style, min_len",
    [(2, 6, "gnmt", 0), (3, 12, "gnmt", 0), (3, 12, "fairseq", 1), (4, 20, "gnmt", 2)],
)
def test_a_wide_beam_finds_the_exhaustive_best(limit, beam, style, min_len):
    vocab = 6  # pad, unk, bos, eos and two words
    greedy_missed = 0
    for seed in range(6):
        model = tiny(vocab, seed)
        src = torch.tensor([[4, 5, 4, EOS_ID]])
        best = exhaustive_best(model, src, limit, 1.0, style, min_len)
        found = beam_search(
            Ensemble([model]),
            src,
            DecodeSettings(decoding(beam, 1.0, style, 0.0, limit - 1, min_len=min_len)),
        )
        assert found[0][0].tokens == best
        greedy = beam_search(
            Ensemble([model]), src, DecodeSettings(decoding(1, 1.0, style, 0.0, limit - 1, min_len=min_len))
        )
        greedy_missed += greedy[0][0].tokens != best
    assert greedy_missed > 0  # the cases are hard enough that a narrow search gets some wrong


class FullState:
    """A decoder 'state' that keeps only the prefix: every step re-runs the whole decoder."""

    def __init__(self, src: torch.Tensor, prefix: torch.Tensor):
        self.src, self.prefix = src, prefix

    def reorder(self, rows: torch.Tensor, sentences=None, beam=None) -> "FullState":
        return FullState(self.src.index_select(0, rows), self.prefix.index_select(0, rows))


class Recompute(Ensemble):
    def start(self, src, *, vocab=None, align=False, steps=None):
        return Batch([FullState(src, torch.empty(src.shape[0], 0, dtype=torch.long))])

    def step(self, tokens, batch, normalize=True):
        state = batch.states[0]
        prefix = torch.cat([state.prefix, tokens], dim=1)
        log_probs = self.models[0](state.src, prefix)[:, -1].float().log_softmax(-1)
        log_probs[:, PAD_ID] = float("-inf")
        log_probs[:, BOS_ID] = float("-inf")
        batch.states = [FullState(state.src, prefix)]
        return log_probs


@pytest.mark.parametrize("variant", [{}, {"residual_attention": True, "attention_window": 2}])
def test_incremental_and_full_recompute_decoding_agree(variant):
    model = tiny(30, **variant)
    src = sources(30)
    with torch.inference_mode():
        fast = beam_search(Ensemble([model]), src, DecodeSettings(decoding(4, 0.6, "gnmt", 1.0, 6), nbest=4))
        slow = beam_search(Recompute([model]), src, DecodeSettings(decoding(4, 0.6, "gnmt", 1.0, 6), nbest=4))
        assert [[h.tokens for h in hs] for hs in fast] == [[h.tokens for h in hs] for hs in slow]
        for hs, gs in zip(fast, slow, strict=True):
            assert [h.score for h in hs] == pytest.approx([g.score for g in gs], abs=1e-4)
        greedy_fast = greedy_search(Ensemble([model]), src, DecodeSettings(decoding(1, 0.6, "gnmt", 1.0, 6)))
        greedy_slow = greedy_search(Recompute([model]), src, DecodeSettings(decoding(1, 0.6, "gnmt", 1.0, 6)))
    assert [h[0].tokens for h in greedy_fast] == [h[0].tokens for h in greedy_slow]


@pytest.mark.parametrize("models", [1, 2])
def test_greedy_search_without_scores_takes_the_same_pieces(models):
    """Without scores, greedy search takes the largest logit instead of the largest
    log-probability: the same pieces, over the whole vocabulary and over a shortlist, alone and
    in an ensemble (which averages log-probabilities all the same)."""
    ensemble = Ensemble([tiny(30, seed) for seed in range(models)])
    src = sources(30, rows=8)
    cfg = decoding(1, 0.6, "gnmt", 1.0, 6)
    for vocab in (None, torch.tensor([0, 1, 2, 3, 5, 8, 9, 13, 21, 22, 29])):
        scored = greedy_search(ensemble, src, DecodeSettings(cfg), vocab=vocab)
        plain = greedy_search(ensemble, src, DecodeSettings(cfg, scores=False), vocab=vocab)
        assert [h[0].tokens for h in plain] == [h[0].tokens for h in scored]
        assert all(h[0].score == h[0].score for h in scored)  # real numbers
        assert all(h[0].score != h[0].score for h in plain)  # NaN: not computed


def test_nbest_is_sorted_and_distinct():
    model = tiny(30)
    hyps = beam_search(
        Ensemble([model]), sources(30), DecodeSettings(decoding(5, 0.6, "gnmt", 1.0, 5), nbest=5)
    )
    for sentence in hyps:
        scores = [h.score for h in sentence]
        assert scores == sorted(scores, reverse=True)
        assert len({tuple(h.tokens) for h in sentence}) == len(sentence)


def test_an_ensemble_of_identical_models_decodes_like_one():
    model = tiny(30)
    src = sources(30)
    one = beam_search(Ensemble([model]), src, DecodeSettings(decoding(3, 0.6, "gnmt", 1.0, 5)))
    two = beam_search(Ensemble([model, model]), src, DecodeSettings(decoding(3, 0.6, "gnmt", 1.0, 5)))
    assert [h[0].tokens for h in one] == [h[0].tokens for h in two]


def test_outputs_respect_the_maximum_length():
    model = tiny(30)
    src = sources(30)
    for hyps in (
        beam_search(Ensemble([model]), src, DecodeSettings(decoding(4, 0.6, "gnmt", 0.0, 3))),
        greedy_search(Ensemble([model]), src, DecodeSettings(decoding(1, 0.6, "gnmt", 0.0, 3))),
    ):
        assert all(len(h[0].tokens) <= 3 for h in hyps)


@pytest.mark.parametrize("beam", [1, 4])
def test_encoding_a_batch_in_parts_decodes_as_in_one(monkeypatch, beam):
    """CPU decoding encodes a large batch in parts of about ENCODE_TOKENS source tokens: one
    sentence a part here (6 tokens each) gives the same hypotheses and scores as one part."""
    model, src = tiny(30), sources(30)
    cfg = decoding(beam, 0.6, "gnmt", 1.0, 5)
    whole = beam_search(Ensemble([model]), src, DecodeSettings(cfg, nbest=beam))
    monkeypatch.setattr(ensemble, "ENCODE_TOKENS", src.shape[1])
    parted = beam_search(Ensemble([model]), src, DecodeSettings(cfg, nbest=beam))
    assert [[h.tokens for h in s] for s in parted] == [[h.tokens for h in s] for s in whole]
    for got, want in zip(parted, whole, strict=True):
        assert [h.score for h in got] == pytest.approx([h.score for h in want], abs=1e-5)


class EndsAtOnce(Ensemble):
    """A model that would rather stop than say anything: EOS outweighs every word at every step."""

    def step(self, tokens, batch, normalize=True):
        log_probs = super().step(tokens, batch, normalize)
        log_probs[:, EOS_ID] += 30.0
        return log_probs.log_softmax(dim=-1)


@pytest.mark.parametrize("beam", [1, 4])
def test_a_non_empty_source_gets_a_non_empty_translation(beam):
    model, src = tiny(30), sources(30)
    nbest = beam  # every hypothesis of the n-best list, not only the best
    hyps = beam_search(
        EndsAtOnce([model]), src, DecodeSettings(decoding(beam, 0.6, "gnmt", 1.0, 5), nbest=nbest)
    )
    assert all(len(h.tokens) >= 1 for sentence in hyps for h in sentence)
    assert all(len(sentence) == nbest for sentence in hyps)
    greedy = greedy_search(EndsAtOnce([model]), src, DecodeSettings(decoding(1, 0.6, "gnmt", 1.0, 5)))
    assert all(len(h[0].tokens) >= 1 for h in greedy)


def test_min_len_zero_allows_an_empty_translation_and_max_len_wins_over_min_len():
    model, src = tiny(30), sources(30)
    assert all(
        h[0].tokens == []
        for h in greedy_search(
            EndsAtOnce([model]), src, DecodeSettings(decoding(1, 0.6, "gnmt", 1.0, 5, min_len=0))
        )
    )
    assert all(
        h[0].tokens == []
        for h in beam_search(
            EndsAtOnce([model]), src, DecodeSettings(decoding(4, 0.6, "gnmt", 1.0, 5, min_len=0))
        )
    )
    longer = greedy_search(
        EndsAtOnce([model]), src, DecodeSettings(decoding(1, 0.6, "gnmt", 1.0, 5, min_len=3))
    )
    assert all(len(h[0].tokens) == 3 for h in longer)
    # max_len_a 0, max_len_b 2: at most two tokens before EOS, whatever min_len asks.
    capped = beam_search(
        EndsAtOnce([model]), src, DecodeSettings(decoding(4, 0.6, "gnmt", 0.0, 2, min_len=10))
    )
    assert all(len(h[0].tokens) == 2 for h in capped)


def searched(ensemble: Ensemble, src: torch.Tensor, cfg: DecodeConfig, vocab: torch.Tensor | None = None):
    """Greedy search at beam 1; beam search and its whole n-best otherwise."""
    if cfg.beam == 1:
        return greedy_search(ensemble, src, DecodeSettings(cfg), vocab)
    return beam_search(ensemble, src, DecodeSettings(cfg, cfg.beam), vocab)


def test_a_shortlist_of_the_whole_vocabulary_decodes_as_without_one():
    model, src = tiny(30), sources(30)
    everything = torch.arange(30)
    for beam in (1, 4):
        cfg = decoding(beam, 0.6, "gnmt", 1.0, 5)
        plain = searched(Ensemble([model]), src, cfg)
        listed = searched(Ensemble([model]), src, cfg, everything)
        assert [[(h.tokens, h.score) for h in s] for s in listed] == [
            [(h.tokens, h.score) for h in s] for s in plain
        ]


@pytest.mark.parametrize("beam", [1, 5])
def test_a_shortlist_searches_as_if_the_other_pieces_were_impossible(beam):
    """Over a shortlist, the search is the full search of a model that gives every other piece
    probability 0, with the output bias kept (an imported Marian model has one)."""
    model, src = tiny(30, output_bias=True), sources(30)
    with torch.no_grad():
        model.output_bias.copy_(torch.linspace(-1, 1, 30))
    vocab = torch.tensor([0, 1, 2, 3, 5, 8, 9, 13, 21, 22, 29])
    masked = copy.deepcopy(model)
    with torch.no_grad():
        outside = torch.ones(30, dtype=torch.bool)
        outside[vocab] = False
        masked.output_bias[outside] = float("-inf")
    cfg = decoding(beam, 0.6, "gnmt", 1.0, 6)
    listed = searched(Ensemble([model]), src, cfg, vocab)
    full = searched(Ensemble([masked]), src, cfg)
    assert [[h.tokens for h in s] for s in listed] == [[h.tokens for h in s] for s in full]
    for got, want in zip(listed, full, strict=True):
        assert [h.score for h in got] == pytest.approx([h.score for h in want], abs=1e-4)
    used = {t for s in listed for h in s for t in h.tokens}
    assert used <= set(vocab.tolist()) and len(used) > 3  # the search did choose among them


@pytest.mark.parametrize("width", [7, 64, 640, 1000, 8000, 32011])
@pytest.mark.parametrize("k", [1, 2, 8])
def test_top_k_is_torch_topk(width, k):
    """The block-wise top-k that beam search and greedy search use gives torch.topk's values and
    indices, with a ragged last block, one block's worth of best values, and impossible rows."""
    if width < k:
        return
    g = torch.Generator().manual_seed(width * 10 + k)
    x = torch.randn(12, width, generator=g)
    x[1, :] = float("-inf")
    x[1, width // 2] = 0.0  # one possible value
    x[2, : min(width, 64)] += 50.0  # every best value in the first block
    x[3, -1] = 99.0  # the best value in the ragged tail
    got, want = top_k(x, k), x.topk(k, dim=1)
    finite = want.values.isfinite()
    assert torch.equal(got[0], want.values)
    assert torch.equal(got[1][finite], want.indices[finite])


def ends_early(seed: int = 0) -> Transformer:
    """A tiny model whose EOS is likely enough that its sentences end at scattered steps, not all
    at their length limit."""
    model = tiny(12, seed)
    with torch.no_grad():
        model.tgt_embed.tokens.weight[EOS_ID] *= 3.0
    return model


def scattered_sources() -> torch.Tensor:
    """Twelve sentences of 1 to 7 pieces (EOS included)."""
    src = torch.randint(4, 12, (12, 9), generator=torch.Generator().manual_seed(2))
    for row in range(12):
        src[row, 2 + row % 7 :] = PAD_ID
        src[row, 1 + row % 7] = EOS_ID
    return src


class Counted(Ensemble):
    """Records how many rows each step decodes: rows leave as sentences are pruned."""

    def __init__(self, models: list[Transformer]):
        super().__init__(models)
        self.rows: list[int] = []

    def step(self, tokens, batch, normalize=True):
        self.rows.append(tokens.shape[0])
        return super().step(tokens, batch, normalize)


class NeverEndsTwice(Ensemble):
    """A model that never says EOS right after EOS: rows that ended but were not pruned yet must
    stay ended whatever the model says next."""

    def step(self, tokens, batch, normalize=True):
        log_probs = super().step(tokens, batch, normalize)
        log_probs[:, EOS_ID].masked_fill_(tokens[:, -1] == EOS_ID, float("-inf"))
        return log_probs


def found(hyps: list[list[Hypothesis]]) -> list[list[tuple[list[int], list[int] | None]]]:
    return [[(h.tokens, h.links) for h in sentence] for sentence in hyps]


@pytest.mark.parametrize("early_stopping", [True, False])
@pytest.mark.parametrize("align", [False, True])
def test_beam_search_pruning_every_few_steps_finds_what_pruning_every_step_finds(early_stopping, align):
    """On a GPU finished sentences leave the batch every few steps: in between they stay with
    their results frozen. Every hypothesis, score and link must be those of a search that prunes
    them at once, with sentences ending at many different steps."""
    pair = [ends_early(0), ends_early(1)]
    src = scattered_sources()
    cfg = dataclasses.replace(decoding(4, 1.0, "gnmt", 1.5, 3), early_stopping=early_stopping)
    vocab = torch.tensor([0, 1, 2, 3, 4, 5, 7, 8, 10, 11])
    for models, listed in ((pair[:1], None), (pair, vocab)):
        counted = Counted(models)
        at_once = beam_search(counted, src, DecodeSettings(cfg, 3, alignments=align, prune_every=1), listed)
        assert len(set(counted.rows[1:])) >= 3  # sentences were done at several different steps
        for every in (2, 5):
            settings = DecodeSettings(cfg, 3, alignments=align, prune_every=every)
            later = beam_search(Ensemble(models), src, settings, listed)
            assert found(later) == found(at_once)
            for got, want in zip(later, at_once, strict=True):
                assert [h.score for h in got] == pytest.approx([h.score for h in want], abs=1e-5)


class SureAfter(Ensemble):
    """After `after` steps the model is all but certain of one word: a running hypothesis then
    hardly loses score while its length penalty grows, so that a sentence done at one step would
    look worth searching again at the next."""

    def __init__(self, models: list[Transformer], after: int):
        super().__init__(models)
        self.after, self.steps = after, 0

    def step(self, tokens, batch, normalize=True):
        log_probs = super().step(tokens, batch, normalize)
        self.steps += 1
        if self.steps > self.after:
            log_probs[:, 4:] -= 20.0
            log_probs[:, 5] += 20.0
        return log_probs.log_softmax(dim=-1)


@pytest.mark.parametrize("style", ["gnmt", "fairseq"])
def test_a_sentence_done_stays_done_until_it_is_pruned(style):
    cfg = dataclasses.replace(decoding(4, 1.0, style, 1.5, 3), early_stopping=False)
    src = scattered_sources()
    at_once = beam_search(SureAfter([ends_early(0)], 2), src, DecodeSettings(cfg, 3, prune_every=1))
    later = beam_search(SureAfter([ends_early(0)], 2), src, DecodeSettings(cfg, 3, prune_every=5))
    assert found(later) == found(at_once)


@pytest.mark.parametrize(
    "settings",
    [
        {"scores": True},
        {"scores": False, "alignments": True},
        {"sampling": Sampling("topk", topk=5, seed=3)},
    ],
)
def test_greedy_search_pruning_every_few_steps_finds_what_pruning_every_step_finds(settings):
    model, src = ends_early(0), scattered_sources()
    call = DecodeSettings(decoding(1, 1.0, "gnmt", 1.5, 3), **settings)
    counted = Counted([model])
    at_once = greedy_search(counted, src, dataclasses.replace(call, prune_every=1))
    assert len(set(counted.rows)) >= 4  # sentences ended at several different steps
    later = greedy_search(NeverEndsTwice([model]), src, dataclasses.replace(call, prune_every=4))
    assert found(later) == found(at_once)
    assert [s[0].score for s in later] == pytest.approx([s[0].score for s in at_once], abs=1e-5, nan_ok=True)
