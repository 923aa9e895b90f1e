"""The fast searches against a textbook beam search written out here.

The reference keeps a plain list of hypotheses per sentence and recomputes the whole decoder
for every hypothesis at every step: no cache, no shared encoder memory, no first step decoded
once, no finished sentence leaving a batch, no block-wise top-k. Whatever the fast path does to
save work, its hypotheses must be the reference's (fp32), for every beam from 1 to 8, n-best
lists, length limits and ensembles, whether finished sentences leave the batch at every step (as
on a CPU) or every few steps (as on a GPU).
"""

import pytest
import torch
from test_search import tiny

from nmt_cli.config import DecodeConfig
from nmt_cli.decoding.ensemble import Ensemble
from nmt_cli.decoding.search import beam_search, greedy_search, length_penalty
from nmt_cli.decoding.settings import DecodeSettings
from nmt_cli.model import Transformer
from nmt_cli.special_ids import BOS_ID, EOS_ID, PAD_ID

VOCAB = 30


def models(count: int, **variant) -> list[Transformer]:
    return [tiny(VOCAB, seed, **variant) for seed in range(count)]


def sources() -> torch.Tensor:
    g = torch.Generator().manual_seed(7)
    src = torch.randint(4, VOCAB, (6, 7), generator=g)
    src[:, -1] = EOS_ID
    for row, length in ((1, 3), (3, 5), (5, 1)):  # shorter sentences, padded
        src[row, length:] = PAD_ID
        src[row, length - 1] = EOS_ID
    return src


def next_log_probs(ensemble: list[Transformer], src: torch.Tensor, prefix: list[int]) -> torch.Tensor:
    """The averaged log-probabilities of the piece after `prefix`, from a full forward pass."""
    tgt = torch.tensor([[BOS_ID, *prefix]])
    per_model = [model(src, tgt)[0, -1].float().log_softmax(-1) for model in ensemble]
    log_probs = torch.stack(per_model).mean(dim=0)
    log_probs[PAD_ID] = log_probs[BOS_ID] = float("-inf")
    return log_probs


def reference_beam(
    ensemble: list[Transformer], src: torch.Tensor, cfg: DecodeConfig, nbest: int
) -> list[tuple[list[int], float]]:
    """One sentence (1, S): at each step the 2K best continuations of the live hypotheses; an EOS
    ranked within the first K finishes one (scored with the length penalty) while fewer than K
    have; the first K others live on. Done with K finished or at the length limit (EOS included)."""
    k = cfg.beam
    length = int((src != PAD_ID).sum())  # with the source's EOS
    limit = max(1, min(int(cfg.max_len_a * (length - 1) + cfg.max_len_b + 1), ensemble[0].cfg.max_positions))
    live: list[tuple[list[int], torch.Tensor]] = [([], torch.tensor(0.0))]
    finished: list[tuple[list[int], float]] = []
    for t in range(limit):
        candidates = []
        for prefix, score in live:
            log_probs = next_log_probs(ensemble, src, prefix)
            if t + 1 >= limit:  # only EOS is left
                log_probs[torch.arange(VOCAB) != EOS_ID] = float("-inf")
            elif t < cfg.min_len:
                log_probs[EOS_ID] = float("-inf")
            candidates += [(score + log_probs[w], prefix, w) for w in range(VOCAB)]
        ranked = sorted(candidates, key=lambda c: float(c[0]), reverse=True)[: 2 * k]
        for rank, (score, prefix, w) in enumerate(ranked):
            if rank < k and w == EOS_ID and torch.isfinite(score) and len(finished) < k:
                penalty = length_penalty(t + 1, cfg.lenpen, cfg.lenpen_style)
                finished.append((prefix, float(score.double() / penalty)))
        live = [(prefix + [w], score) for score, prefix, w in ranked if w != EOS_ID][:k]
        if len(finished) >= k:
            break
    best = sorted(finished, key=lambda f: f[1], reverse=True)[:nbest]
    return [(tokens, score) for tokens, score in best if score != float("-inf")]


LIMITS = [  # (max_len_a, max_len_b, min_len)
    (1.0, 4, 1),
    (0.0, 3, 2),  # min_len close to the limit
    (1.5, 2, 0),  # an empty translation allowed
]


# The reference search's cost grows fast with the beam: beams 6 to 8 take 13 of the grid's 18 s.
BEAMS = [*range(1, 6), *(pytest.param(beam, marks=pytest.mark.slow) for beam in range(6, 9))]


@pytest.mark.parametrize("prune_every", [1, 3])
@pytest.mark.parametrize("count", [1, 2])
@pytest.mark.parametrize("beam", BEAMS)
def test_beam_search_is_the_textbook_search(beam: int, count: int, prune_every: int) -> None:
    ensemble, src = models(count), sources()
    for (a, b, min_len), style in zip(LIMITS, ("gnmt", "fairseq", "gnmt"), strict=True):
        cfg = DecodeConfig(
            beam=beam, lenpen=0.8, lenpen_style=style, max_len_a=a, max_len_b=b, min_len=min_len
        )
        with torch.inference_mode():
            fast = beam_search(
                Ensemble(ensemble), src, DecodeSettings(cfg, nbest=beam, prune_every=prune_every)
            )
            slow = [reference_beam(ensemble, src[i : i + 1], cfg, beam) for i in range(src.shape[0])]
        assert [[h.tokens for h in hyps] for hyps in fast] == [[t for t, _ in hyps] for hyps in slow]
        for hyps, want in zip(fast, slow, strict=True):
            assert [h.score for h in hyps] == pytest.approx([s for _, s in want], abs=1e-4)


@pytest.mark.parametrize("prune_every", [1, 3])
@pytest.mark.parametrize("count", [1, 2])
@pytest.mark.parametrize(
    "variant", [{}, {"norm": "pre"}, {"residual_attention": True, "attention_window": 2}]
)
def test_greedy_search_is_the_textbook_search_of_beam_one(
    count: int, variant: dict, prune_every: int
) -> None:
    """Greedy search's pieces are the reference's at beam 1, and its score is their summed
    log-probability (greedy search applies no length penalty: one hypothesis has nothing to
    be compared with)."""
    ensemble, src = models(count, **variant), sources()
    for a, b, min_len in LIMITS:
        cfg = DecodeConfig(
            beam=1, lenpen=0.8, lenpen_style="fairseq", max_len_a=a, max_len_b=b, min_len=min_len
        )
        with torch.inference_mode():
            fast = greedy_search(Ensemble(ensemble), src, DecodeSettings(cfg, prune_every=prune_every))
            slow = [reference_beam(ensemble, src[i : i + 1], cfg, 1) for i in range(src.shape[0])]
        assert [h[0].tokens for h in fast] == [hyps[0][0] for hyps in slow]
        for hyps, want in zip(fast, slow, strict=True):
            tokens, score = want[0]
            penalty = length_penalty(len(tokens) + 1, 0.8, "fairseq")
            assert hyps[0].score == pytest.approx(score * penalty, abs=1e-4)
