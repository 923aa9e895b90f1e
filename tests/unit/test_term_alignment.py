"""A glossary term's words aligned to its source term's words (decoding.term_alignment), so that
inline HTML elements around parts of a term land on the matching parts of its translation."""

from __future__ import annotations

from nmt_cli.decoding.alignment import Alignment
from nmt_cli.decoding.markup import translate_fragments
from nmt_cli.decoding.term_alignment import terms_aligned
from nmt_cli.decoding.terms import Constrained


class Pieces:
    """A stand-in target vocabulary: piece i is PIECES[i]."""

    PIECES = ["\u2581Wir", "\u2581lieben", "\u2581New", "\u2581York", "\u2581heute", "\u2581NY"]

    def id_to_piece(self, token: int) -> str:
        return self.PIECES[token]


def test_a_glossary_terms_words_are_aligned_to_its_source_terms_in_order() -> None:
    line = Constrained("We love new York today", ((2, 3),), (((8, 16),),))
    # Attention put both source words of the term on "heute" (4): an element around "new" or "York"
    # moved there.
    attention = ((0, 0), (1, 1), (2, 4), (3, 4), (4, 4))
    assert terms_aligned(line, [0, 1, 2, 3, 4], attention, Pieces()) == (
        (0, 0),
        (1, 1),
        (2, 2),
        (3, 3),
        (4, 4),
    )
    one_word = Constrained("We love new York today", ((5,),), (((8, 16),),))
    attention = ((0, 0), (1, 1), (2, 3), (3, 3), (4, 3))
    assert terms_aligned(one_word, [0, 1, 5, 4], attention, Pieces()) == (
        (0, 0),
        (1, 1),
        (2, 2),
        (3, 2),
        (4, 3),
    )
    # A line's own constraint (no source term) and a line without phrases keep their alignment.
    assert terms_aligned(Constrained("x", ((2,),)), [2], ((0, 0),), Pieces()) == ((0, 0),)
    assert terms_aligned("plain", [0], ((0, 0),), Pieces()) == ((0, 0),)


def test_inline_elements_inside_a_glossary_term_land_on_its_words() -> None:
    def translate(texts: list[str]) -> list[tuple[str, Alignment]]:
        line = Constrained(texts[0], ((2, 3),), (((8, 16),),))
        attention = ((0, 0), (1, 1), (2, 4), (3, 4), (4, 4))
        return [("Wir lieben New York heute", terms_aligned(line, [0, 1, 2, 3, 4], attention, Pieces()))]

    assert translate_fragments(["We love <b>new</b> <i>York</i> today"], translate) == [
        "Wir lieben <b>New</b> <i>York</i> heute"
    ]


def test_a_term_of_fewer_words_keeps_the_later_elements_empty_beside_the_first() -> None:
    def translate(texts: list[str]) -> list[tuple[str, Alignment]]:
        line = Constrained(texts[0], ((5,),), (((8, 16),),))
        attention = ((0, 0), (1, 1), (2, 3), (3, 3), (4, 3))
        return [("Wir lieben NY heute", terms_aligned(line, [0, 1, 5, 4], attention, Pieces()))]

    # The <i> of the second word had no word left and went to the start of the sentence.
    assert translate_fragments(["We love <b>new</b> <i>York</i> today"], translate) == [
        "Wir lieben <b>NY</b> <i></i>heute"
    ]
