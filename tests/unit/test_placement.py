"""Glossary terms in the model's own word's place: a term may start only where the search's
attention points at its source term, the word the model would have put there is not written
beside it, and a sentence whose attention never gets there is searched again as before."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from helpers import TrainedRun, nmt
from test_constraints import VOCAB, tiny
from test_constraints import sources as constraint_sources

from nmt_cli import Translator
from nmt_cli.config import DecodeConfig
from nmt_cli.data.glossary import Glossary
from nmt_cli.decoding.batches import BatchSearch
from nmt_cli.decoding.constraints import ConstraintProgress, Constraints, restrict
from nmt_cli.decoding.ensemble import Batch, Ensemble
from nmt_cli.decoding.placement import Anchors, Placement, gave_up, own_word_again, placement
from nmt_cli.decoding.search import beam_search
from nmt_cli.decoding.settings import DecodeSettings
from nmt_cli.decoding.strategies import ConstrainedBeam
from nmt_cli.decoding.terms import Constrained, Vocabulary, anchors_of, constrained_lines
from nmt_cli.special_ids import EOS_ID, PAD_ID

CPU = torch.device("cpu")


def sources() -> torch.Tensor:
    """Four sentences of seven pieces, none padded."""
    return constraint_sources(rows=4, padded=False)


def starts(tokens: list[int], phrase: list[int]) -> list[int]:
    return [i for i in range(len(tokens) - len(phrase) + 1) if tokens[i : i + len(phrase)] == phrase]


def attention_at(monkeypatch: pytest.MonkeyPatch, position: int, step: int | None) -> None:
    """Every hypothesis attends to source `position` at search step `step` (0-based) alone, and to
    position 0 at every other step (`step` None: always 0)."""

    def attended(batch: Batch) -> torch.Tensor | None:
        state = batch.states[0]
        if state.attended is None:  # a search that neither aligns nor places terms
            return None
        rows = state.attended.shape[0]
        at = position if step is not None and state.step == step + 1 else 0
        return torch.full((rows,), at, dtype=torch.long)

    monkeypatch.setattr(Batch, "attended", attended)


PHRASES = [[[17]], [[24]], [[27]], [[29]]]
"""Pieces that the model never ranks among its likeliest here (`placement.LIKELY`): only the
attention can place them."""
CFG = DecodeConfig(beam=4, lenpen=1.0, max_len_a=1.5, max_len_b=6)


def test_a_term_starts_only_where_the_attention_points_at_its_source(monkeypatch: pytest.MonkeyPatch) -> None:
    attention_at(monkeypatch, 2, step=3)
    anchored = Constraints.of(PHRASES, False, CPU, anchors=[[(2,)]] * len(PHRASES))
    found = beam_search(Ensemble([tiny()]), sources(), DecodeSettings(CFG, 2), None, anchored)
    for hyps, [phrase] in zip(found, PHRASES, strict=True):
        for hyp in hyps:
            assert starts(hyp.tokens, phrase)[0] == 3, (hyp.tokens, phrase)
    # The same phrases free to go anywhere land elsewhere: the rule above is what placed them.
    free = beam_search(
        Ensemble([tiny()]), sources(), DecodeSettings(CFG), None, Constraints.of(PHRASES, False, CPU)
    )
    assert any(starts(hyps[0].tokens, phrase)[0] != 3 for hyps, [phrase] in zip(free, PHRASES, strict=True))


def test_a_phrase_without_anchors_in_a_guided_batch_still_goes_anywhere(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    attention_at(monkeypatch, 2, step=None)  # never at position 2
    anchors: list[Anchors] = [[(2,)], [()], [(2,)], [()]]
    found = beam_search(
        Ensemble([tiny()]),
        sources(),
        DecodeSettings(CFG),
        None,
        Constraints.of(PHRASES, False, CPU, None, anchors),
    )
    met = [
        bool(hyps) and bool(starts(hyps[0].tokens, phrase))
        for hyps, [phrase] in zip(found, PHRASES, strict=True)
    ]
    assert met == [False, True, False, True]  # the anchored ones found no place: no hypothesis


def test_a_sentence_whose_attention_never_meets_the_source_term_is_searched_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    attention_at(monkeypatch, 2, step=None)
    anchored = Constraints.of(PHRASES, False, CPU, anchors=[[(2,)]] * len(PHRASES))
    search = BatchSearch(Ensemble([tiny()]), DecodeSettings(CFG))
    found = search.translate(sources(), anchored)
    free = search.translate(sources(), Constraints.of(PHRASES, False, CPU))
    assert [h[0].tokens for h in found] == [h[0].tokens for h in free]  # today's placement, met


def test_the_piece_a_term_displaced_is_not_written_after_it() -> None:
    ids, lengths = torch.tensor([[[9, PAD_ID]]]), torch.tensor([[1]])
    progress = ConstraintProgress.start(1, 1, CPU)
    # The model liked 15 best where the term's 9 began: 15 is displaced for good.
    kept = progress.advanced(
        torch.tensor([9]), ids, lengths, False, Placement(torch.tensor([[True]]), torch.tensor([[15]]))
    )
    assert kept.met.tolist() == [[True]] and kept.displaced.tolist() == [[15]]
    log_probs = torch.zeros(1, VOCAB)
    log_probs[:, PAD_ID] = float("-inf")
    restrict(log_probs, kept, lengths, torch.tensor([False]), None)
    assert log_probs[0, 15] == float("-inf") and log_probs[0, 16] == 0.0
    # Where placement does not allow it, 9 does not begin the phrase, and nothing is displaced.
    elsewhere = Placement(torch.tensor([[False]]), torch.tensor([[15]]))
    refused = progress.advanced(torch.tensor([9]), ids, lengths, False, elsewhere)
    assert refused.met.tolist() == [[False]] and refused.displaced.tolist() == [[PAD_ID]]


def scores(best: int, second: int = 5, third: int = 6) -> torch.Tensor:
    log_probs = torch.full((1, VOCAB), -10.0)
    log_probs[0, best], log_probs[0, second], log_probs[0, third] = -0.1, -1.0, -2.0
    return log_probs


ANCHORS = torch.tensor([[[False, False, True, False]]])
"""One sentence, one phrase anchored at source position 2 (of 3)."""
WORDS = torch.arange(VOCAB) > EOS_ID
"""Every piece but the special ones starts a word."""


def test_a_term_begins_on_its_source_or_where_the_model_ranks_it_among_its_likeliest() -> None:
    first = torch.tensor([[9]])
    on_source = placement(ANCHORS, WORDS, torch.tensor([2]), scores(15), first)
    assert on_source.may_start.tolist() == [[True]] and on_source.displacing.tolist() == [[15]]
    elsewhere = placement(ANCHORS, WORDS, torch.tensor([1]), scores(15), first)
    assert elsewhere.may_start.tolist() == [[False]]
    # The model's own third choice: it may begin there, displacing nothing (the model chose it).
    likely = placement(ANCHORS, WORDS, torch.tensor([1]), scores(15, third=9), first)
    assert likely.may_start.tolist() == [[True]] and likely.displacing.tolist() == [[PAD_ID]]


def test_a_hypothesis_that_would_end_with_its_term_unplaced_gives_up() -> None:
    lengths, unmet, met = torch.tensor([[1]]), torch.tensor([[False]]), torch.tensor([[True]])
    assert gave_up(ANCHORS, unmet, lengths, torch.tensor([EOS_ID])).tolist() == [True]
    assert gave_up(ANCHORS, unmet, lengths, torch.tensor([15])).tolist() == [False]
    assert gave_up(ANCHORS, met, lengths, torch.tensor([EOS_ID])).tolist() == [False]
    free = torch.ones(1, 1, 4, dtype=torch.bool)  # a phrase that may go anywhere: as before
    assert gave_up(free, unmet, lengths, torch.tensor([EOS_ID])).tolist() == [False]


def test_the_models_own_word_is_not_written_where_it_attends_a_placed_terms_source_again() -> None:
    met = torch.tensor([[True]])
    assert own_word_again(ANCHORS, met, torch.tensor([2]), torch.tensor([15]), WORDS).tolist() == [15]
    assert own_word_again(ANCHORS, met, torch.tensor([1]), torch.tensor([15]), WORDS).tolist() == [PAD_ID]
    assert own_word_again(ANCHORS, met, torch.tensor([2]), torch.tensor([EOS_ID]), WORDS).tolist() == [PAD_ID]
    assert own_word_again(ANCHORS, ~met, torch.tensor([2]), torch.tensor([15]), WORDS).tolist() == [PAD_ID]


def test_a_sentence_with_a_translation_and_no_hypothesis_holding_its_term_is_settled() -> None:
    # Those left could only put the term out of its place, after wandering on to find it one.
    anchored = Constraints.of([[[9]], [[9]], [[9]]], False, CPU, anchors=[[(2,)], [(2,)], [()]])
    beam = ConstrainedBeam(anchored, 6, CPU)  # two hypotheses a sentence
    beam.progress = dataclasses.replace(
        beam.progress, met=torch.tensor([[False], [False], [True], [False], [False], [False]])
    )
    settled = beam.settled(torch.arange(3), torch.tensor([1, 1, 1]))
    assert isinstance(settled, torch.Tensor)
    # The first has none holding it; the second has one; the third's phrase may go anywhere.
    assert settled.tolist() == [True, False, False]
    assert beam.settled(torch.arange(3), torch.tensor([0, 0, 0])).tolist() == [False, False, False]


def test_a_glossary_term_carries_its_source_pieces_and_a_lines_own_phrase_none() -> None:
    vocabulary = Vocabulary(lambda text: {"Fahrrad": [10], "Haus": [11]}[text], 1, lambda line: 20)
    glossary = Glossary.of({"bike": "Fahrrad"})
    [line] = constrained_lines(["A man rides a bike."], [["Haus"]], glossary, vocabulary)
    assert isinstance(line, Constrained)
    assert line.spans == ((), ((14, 18),))  # "bike"

    def words_in(text: str) -> list[str]:  # one piece a word, the stop its own
        return text.replace(".", " .").split()

    assert anchors_of(line, words_in, 6) == [(), (4,)]
    assert anchors_of(line, words_in, 4) == [(), ()]  # the source cut before the term: anywhere
    assert anchors_of("no phrases", words_in, 2) == []


def test_the_term_replaces_the_models_word_in_its_place(trained: TrainedRun) -> None:
    # The copy task's model writes each word again: the term must take the word's place, not come
    # beside it ("apple tiger river" or "tiger apple river stone" were what the search found).
    translator = Translator.load(trained.checkpoint, device="cpu", threads=1)
    lines = ["apple river stone cloud", "green music paper", "silver window orange garden yellow"]
    glossary = {"river": "tiger", "paper": "winter", "orange": "friend"}
    assert translator.translate(lines) == lines
    out = translator.translate(lines, glossary=glossary, beam=4)
    assert out == ["apple tiger stone cloud", "green music winter", "silver window friend garden yellow"]


def test_nmt_translate_glossary_puts_the_terms_in_place(
    trained: TrainedRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source, terms = tmp_path / "in.txt", tmp_path / "terms.tsv"
    source.write_text("green music paper\nsilver window orange garden yellow\n", encoding="utf-8")
    terms.write_text("paper\twinter\norange\tfriend\n", encoding="utf-8")
    assert (
        nmt("-q", "translate", "-m", trained.checkpoint, "-i", source, "--glossary", terms, "--beam", 4) == 0
    )
    assert capsys.readouterr().out.splitlines() == [
        "green music winter",
        "silver window friend garden yellow",
    ]


def test_without_a_glossary_or_with_one_that_matches_nothing_translations_are_unchanged(
    trained: TrainedRun,
) -> None:
    translator = Translator.load(trained.checkpoint, device="cpu", threads=1)
    lines = ["apple river stone", "summer winter friend green"]
    plain = translator.translate(lines, beam=4)
    assert translator.translate(lines, beam=4, glossary={"tiger": "cloud"}) == plain
    assert translator.translate(lines, beam=4, constraints=[["music"], []])[1] == plain[1]
