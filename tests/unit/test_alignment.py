"""Word alignments: pieces grouped into words, links shifted across the sentences of a line, and
on the tiny copy model (which translates a line into itself) each word aligned to itself."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import NoReturn

import numpy as np
import pytest
import torch
from helpers import VARIANTS, TrainedRun, one_thread, sentences, tiny_model

from nmt_cli import Translator
from nmt_cli.config import DecodeConfig
from nmt_cli.decoding.alignment import attended_pieces, default_layer, pharaoh, word_alignment, word_of_pieces
from nmt_cli.decoding.batches import BatchSearch
from nmt_cli.decoding.ensemble import Ensemble
from nmt_cli.decoding.settings import DecodeSettings
from nmt_cli.decoding.text_plan import plan_texts
from nmt_cli.decoding.texts import Result
from nmt_cli.special_ids import EOS_ID, PAD_ID


@pytest.fixture(scope="module")
def translator(trained: TrainedRun) -> Iterator[Translator]:
    with one_thread():
        yield Translator.load(trained.checkpoint, device="cpu")


def test_a_word_starts_at_each_piece_after_whitespace() -> None:
    assert word_of_pieces(["▁A", "▁do", "g", "▁runs", "."]) == [0, 1, 1, 2, 2]
    assert word_of_pieces(["in", "side", "▁out"]) == [0, 0, 1]  # a first piece starts a word anyway


def test_piece_links_become_word_links_in_pharaoh_order() -> None:
    src = ["▁Ein", "▁Hund", "▁läuft", "."]
    tgt = ["▁A", "▁do", "g", "▁runs", "."]
    links = np.array([0, 1, 1, 2, 3])  # target piece j attends to source piece links[j]
    assert word_alignment(links, src, tgt) == ((0, 0), (1, 1), (2, 2))
    assert pharaoh(((0, 0), (2, 1), (1, 2))) == "0-0 2-1 1-2"


def test_the_copy_model_aligns_each_word_to_itself(translator: Translator) -> None:
    lines = sentences(20, seed=5, min_words=2)
    for line, (text, alignment) in zip(lines, translator.translate(lines, alignments=True), strict=True):
        assert text == line
        assert alignment == tuple((i, i) for i in range(len(line.split()))), line


def by_sentence(
    translate: Callable[[list[str], DecodeSettings], list[Result]], texts: list[str], settings: DecodeSettings
) -> list[Result]:
    """`texts` through the text pipeline, cut into English sentences, `translate` decoding them."""

    def no_phrases(*_: object) -> NoReturn:
        raise AssertionError("no constraints and no glossary: nothing to constrain")

    plan = plan_texts(texts, settings, no_phrases, "en")
    units = [unit for unit in plan.units if isinstance(unit, str)]
    assert len(units) == len(plan.units)  # sentences, none with phrases
    return plan.answers(translate(units, plan.settings))


def test_sentence_links_count_words_over_the_whole_line() -> None:
    def fake(sentences: list[str], settings: DecodeSettings) -> list[Result]:
        # Reverses each sentence's words, and says so in its alignment.
        out = []
        for s in sentences:
            words = s.split()
            n = len(words)
            out.append(Result([(" ".join(reversed(words)), -1.0)], tuple((i, n - 1 - i) for i in range(n))))
        return out

    settings = DecodeSettings(DecodeConfig(), alignments=True)
    (result,) = by_sentence(fake, ["  One two.  Three four five. "], settings)
    assert result.hyps == [("two. One  five. four Three", -1.0)]
    assert result.alignment == ((0, 1), (1, 0), (2, 4), (3, 3), (4, 2))


def test_a_word_that_straddles_two_sentences_is_one_word_of_the_line() -> None:
    # The segmenter cuts "One two.Three four five." with no gap: "two.Three" is one word of the
    # source, and the translations are joined the same way, so the line has 4 words, not 5.
    def copy(sentences: list[str], settings: DecodeSettings) -> list[Result]:
        return [Result([(s, -1.0)], tuple((i, i) for i in range(len(s.split())))) for s in sentences]

    settings = DecodeSettings(DecodeConfig(), alignments=True)
    (result,) = by_sentence(copy, ["One two.Three four five."], settings)
    assert result.hyps == [("One two.Three four five.", -1.0)]
    assert result.alignment == ((0, 0), (1, 1), (2, 2), (3, 3))


def test_every_link_names_a_word_of_the_line_however_its_sentences_are_joined(
    translator: Translator,
) -> None:
    lines = ["apple river.Stone cloud.", "green.Paper tiger. Silver window.Orange", "music!Garden?Yellow."]
    for line, (text, alignment) in zip(lines, translator.translate(lines, alignments=True), strict=True):
        assert alignment, line
        assert all(i < len(line.split()) and j < len(text.split()) for i, j in alignment), (line, text)


@pytest.mark.parametrize("beam", [1, 4])
@pytest.mark.parametrize("variant", ["post", "learned-pre-realformer-windowed"])
def test_links_recorded_during_search_are_the_teacher_forced_ones(beam: int, variant: str) -> None:
    # The search reads the attention while it decodes; a separate teacher-forced pass over its
    # output must find the same source piece for every target piece.
    model = tiny_model(30, 0, decoder_layers=3, **VARIANTS[variant])
    with torch.no_grad():
        model.tgt_embed.tokens.weight.mul_(8.0)
    src = torch.randint(4, 30, (5, 7), generator=torch.Generator().manual_seed(2))
    src[:, -1] = EOS_ID
    src[2, 4:] = PAD_ID
    src[2, 3] = EOS_ID
    cfg = DecodeConfig(beam=beam, max_len_a=1.0, max_len_b=5)
    found = BatchSearch(Ensemble([model]), DecodeSettings(cfg, nbest=beam, alignments=True)).translate(src)
    for row, hyps in enumerate(found):
        source = src[row][(src[row] != PAD_ID) & (src[row] != EOS_ID)].numpy()
        for hyp in hyps:  # the n-best too: links move with their hypotheses
            forced = attended_pieces(model, [source], [hyp.tokens], default_layer(model))[0]
            assert hyp.links == forced.tolist(), (row, hyp)
