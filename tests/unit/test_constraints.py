"""Lexically constrained beam search: every phrase met, in order where asked, with the batch's
other sentences searched as without constraints."""

from __future__ import annotations

import random

import pytest
import torch
from helpers import VARIANTS, tiny_model

from nmt_cli.config import DecodeConfig
from nmt_cli.decoding.batches import BatchSearch
from nmt_cli.decoding.constraints import ConstraintProgress, Constraints
from nmt_cli.decoding.ensemble import Ensemble
from nmt_cli.decoding.search import beam_search
from nmt_cli.decoding.settings import DecodeSettings
from nmt_cli.model import Transformer
from nmt_cli.special_ids import EOS_ID, PAD_ID

VOCAB = 30


def tiny(seed: int = 0, **variant: object) -> Transformer:
    model = tiny_model(VOCAB, seed, **variant)
    with torch.no_grad():  # sharp distributions, so that a constraint goes against the model
        model.tgt_embed.tokens.weight.mul_(8.0)
    return model


def sources(rows: int = 6, length: int = 7, padded: bool = True) -> torch.Tensor:
    """`rows` random sentences of `length` pieces, </s> last; where `padded`, the second ends at
    piece 3 and is padded after it."""
    g = torch.Generator().manual_seed(3)
    src = torch.randint(4, VOCAB, (rows, length), generator=g)
    src[:, -1] = EOS_ID
    if padded:
        src[1, 4:] = PAD_ID
        src[1, 3] = EOS_ID
    return src


def contains(tokens: list[int], phrase: list[int]) -> int:
    """Where `phrase` first starts in `tokens`, -1 if it does not occur."""
    for i in range(len(tokens) - len(phrase) + 1):
        if tokens[i : i + len(phrase)] == phrase:
            return i
    return -1


PHRASES = [[[7, 8]], [[12]], [[20, 21, 22], [5]], [], [[9], [9, 10]], [[25, 4], [6, 11]]]
"""One sentence's phrases a row of `sources()`: several pieces, one, two phrases, none, overlapping."""


def decode(beam: int = 4, early_stopping: bool = False) -> DecodeConfig:
    return DecodeConfig(beam=beam, lenpen=1.0, max_len_a=1.5, max_len_b=6, early_stopping=early_stopping)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("early_stopping", [False, True])
def test_every_phrase_is_met(variant: str, early_stopping: bool) -> None:
    model = tiny(**VARIANTS[variant])
    constraints = Constraints.of(PHRASES, False, torch.device("cpu"))
    cfg = decode(early_stopping=early_stopping)
    found = beam_search(Ensemble([model]), sources(), DecodeSettings(cfg, 2), None, constraints)
    for hyps, phrases in zip(found, PHRASES, strict=True):
        assert hyps, "each sentence gets hypotheses"
        for hyp in hyps:  # the n-best too
            for phrase in phrases:
                assert contains(hyp.tokens, phrase) >= 0, (hyp.tokens, phrase)


def test_the_model_would_not_produce_them_unasked() -> None:
    # Otherwise the test above would pass without any constraint.
    found = beam_search(Ensemble([tiny()]), sources(), DecodeSettings(decode()))
    missing = [
        phrase for hyps, phrases in zip(found, PHRASES, strict=True) for phrase in phrases
        if contains(hyps[0].tokens, phrase) < 0
    ]  # fmt: skip
    assert len(missing) >= 6


def test_ordered_phrases_come_in_the_order_given() -> None:
    phrases = [[[15], [7, 8]], [[21], [20]], [[6, 11], [25]], [[5], [9]], [[13], [14]], [[4], [4]]]
    constraints = Constraints.of(phrases, True, torch.device("cpu"))
    found = beam_search(Ensemble([tiny()]), sources(), DecodeSettings(decode()), None, constraints)
    for hyps, (first, second) in zip(found, phrases, strict=True):
        tokens = hyps[0].tokens
        start = contains(tokens, first)
        assert start >= 0
        assert contains(tokens[start + len(first) :], second) >= 0, (tokens, first, second)


def test_a_sentence_without_phrases_is_searched_as_without_constraints() -> None:
    model = tiny()
    plain = beam_search(Ensemble([model]), sources(), DecodeSettings(decode(), 3))
    constraints = Constraints.of(PHRASES, False, torch.device("cpu"))
    constrained = beam_search(Ensemble([model]), sources(), DecodeSettings(decode(), 3), None, constraints)
    assert [h.tokens for h in constrained[3]] == [h.tokens for h in plain[3]]
    assert [h.score for h in constrained[3]] == pytest.approx([h.score for h in plain[3]])


def test_an_ensemble_and_beam_one_meet_them_too() -> None:
    constraints = Constraints.of(PHRASES, False, torch.device("cpu"))
    ensemble = Ensemble([tiny(0), tiny(1)])
    found = BatchSearch(ensemble, DecodeSettings(decode(beam=1))).translate(sources(), constraints)
    for hyps, phrases in zip(found, PHRASES, strict=True):
        assert all(contains(hyps[0].tokens, p) >= 0 for p in phrases)


def test_a_shortlist_keeps_the_constraint_pieces() -> None:
    # A vocabulary of the special ids and 10..19 only: the phrases' pieces must be added to it.
    vocab = torch.cat([torch.arange(4), torch.arange(10, 20)])
    phrases = [[[7, 8]], [[25]], [], [[12]], [[5], [6]], [[29, 4]]]
    constraints = Constraints.of(phrases, False, torch.device("cpu"))
    found = beam_search(
        Ensemble([tiny()]), sources(), DecodeSettings(decode()), constraints.with_pieces(vocab), constraints
    )
    allowed = set(range(10, 20)) | {p for sentence in phrases for phrase in sentence for p in phrase}
    for hyps, sentence in zip(found, phrases, strict=True):
        assert set(hyps[0].tokens) <= allowed
        assert all(contains(hyps[0].tokens, p) >= 0 for p in sentence)


def test_progress_follows_a_phrase_and_starts_over_when_it_breaks() -> None:
    ids = torch.tensor([[[5, 6, 7], [9, PAD_ID, PAD_ID]]])
    lengths = torch.tensor([[3, 1]])
    progress = ConstraintProgress.start(1, 2, torch.device("cpu"))
    seen = []
    for token in [5, 6, 4, 5, 9, 6, 5, 6, 7]:
        progress = progress.advanced(torch.tensor([token]), ids, lengths, ordered=False)
        seen.append((progress.met[0].tolist(), progress.at[0].tolist(), bool(progress.ended[0])))
    assert seen == [
        ([False, False], [1, 0], False),
        ([False, False], [2, 0], False),
        ([False, False], [0, 0], False),  # broken off: starts over
        ([False, False], [1, 0], False),
        ([False, True], [0, 0], True),  # 9 breaks the first phrase and meets the second
        ([False, True], [0, 0], False),
        ([False, True], [1, 0], False),
        ([False, True], [2, 0], False),
        ([True, True], [0, 0], True),
    ]
    assert int(progress.pieces_met(lengths)[0]) == 4
    assert progress.next_pieces(ids, lengths, ordered=False)[0].tolist() == [PAD_ID, PAD_ID]


def test_phrases_that_begin_alike_are_followed_together() -> None:
    # "die Katze" and "die Maus": "die Maus" is met though "die Katze" comes first in the list.
    ids = torch.tensor([[[9, 10], [9, 11]]])
    lengths = torch.tensor([[2, 2]])
    progress = ConstraintProgress.start(1, 2, torch.device("cpu"))
    for token in [9, 11]:
        progress = progress.advanced(torch.tensor([token]), ids, lengths, ordered=False)
    assert progress.met[0].tolist() == [False, True]


def test_at_the_length_limit_a_hypothesis_that_met_its_phrases_comes_first() -> None:
    # Limits that leave little room: likelier hypotheses end there with the phrase unmet, and
    # wherever one that met it is found, it must rank first.
    ensemble, rng = Ensemble([tiny()]), random.Random(7)
    checked = 0
    for _ in range(300):
        src = torch.tensor([[rng.randint(4, VOCAB - 1) for _ in range(rng.randint(1, 5))] + [EOS_ID]])
        phrase = [rng.randint(4, VOCAB - 1) for _ in range(rng.randint(1, 2))]
        beam, room = rng.choice([2, 3, 4]), rng.randint(len(phrase), 4)
        for early_stopping in (False, True):
            cfg = DecodeConfig(
                beam=beam, lenpen=1.0, max_len_a=0.0, max_len_b=room, early_stopping=early_stopping
            )
            constraints = Constraints.of([[phrase]], False, torch.device("cpu"))
            found = beam_search(ensemble, src, DecodeSettings(cfg, beam), None, constraints)[0]
            met = [contains(h.tokens, phrase) >= 0 for h in found]
            if any(met):
                checked += 1
                assert met[0], (src.tolist(), phrase, beam, room, early_stopping, found)
    assert checked > 100


def test_beam_one_translates_a_sentence_without_phrases_as_greedy_search_whatever_its_batch() -> None:
    model = tiny()
    for early_stopping in (False, True):
        settings = DecodeSettings(
            DecodeConfig(beam=1, max_len_a=1.0, max_len_b=3, early_stopping=early_stopping)
        )
        search = BatchSearch(Ensemble([model]), settings)
        alone = search.translate(sources())
        mixed = search.translate(sources(), Constraints.of(PHRASES, False, torch.device("cpu")))
        for row, phrases in enumerate(PHRASES):
            if not phrases:
                assert mixed[row][0].tokens == alone[row][0].tokens


def test_ordered_progress_starts_only_the_first_unmet_phrase() -> None:
    ids = torch.tensor([[[5, PAD_ID], [9, PAD_ID]]])
    lengths = torch.tensor([[1, 1]])
    start = ConstraintProgress.start(1, 2, torch.device("cpu"))
    assert start.next_pieces(ids, lengths, ordered=True)[0].tolist() == [5, PAD_ID]
    assert start.advanced(torch.tensor([9]), ids, lengths, ordered=True).met[0].tolist() == [False, False]
    assert start.advanced(torch.tensor([9]), ids, lengths, ordered=False).met[0].tolist() == [False, True]


def test_after_a_phrase_comes_only_a_piece_that_may_follow_it() -> None:
    # As if pieces 4..14 started words and 15..29 continued them: "Haus" must not be met inside
    # "Hausboot", so a phrase's last piece is followed by a piece that starts a word, or the end.
    word_ends = torch.arange(VOCAB) < 15
    constraints = Constraints.of(PHRASES, False, torch.device("cpu"), word_ends)
    found = beam_search(Ensemble([tiny()]), sources(), DecodeSettings(decode(), 2), None, constraints)
    followers = []
    for hyps, phrases in zip(found, PHRASES, strict=True):
        for hyp in hyps:
            for phrase in phrases:
                at = contains(hyp.tokens, phrase)
                assert at >= 0
                after = at + len(phrase)
                if after < len(hyp.tokens):
                    followers.append(hyp.tokens[after])
    assert followers and all(token < 15 for token in followers)
    unrestricted = beam_search(
        Ensemble([tiny()]),
        sources(),
        DecodeSettings(decode(), 2),
        None,
        Constraints.of(PHRASES, False, torch.device("cpu")),
    )
    glued = [
        hyp.tokens[contains(hyp.tokens, p) + len(p)]
        for hyps, phrases in zip(unrestricted, PHRASES, strict=True) for hyp in hyps for p in phrases
        if contains(hyp.tokens, p) + len(p) < len(hyp.tokens)
    ]  # fmt: skip
    assert any(token >= 15 for token in glued)  # without the rule, some would go on inside the word
