"""Sentence splitting: boundaries by the source language's rules, and the text rebuilt exactly."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from nmt_cli.data.sentences import split_sentences


def test_a_paragraph_is_cut_at_its_sentence_ends_and_not_at_abbreviations() -> None:
    split = split_sentences("  Dr. Smith met a dog.  It ran away!\nWhy? ", "en")
    assert split.sentences == ("Dr. Smith met a dog.", "It ran away!", "Why?")
    assert split.lead == "  " and split.gaps == ("  ", "\n", " ")


def test_german_rules_keep_ordinals_and_abbreviations_inside_a_sentence() -> None:
    split = split_sentences("Am 3. Mai ist es z. B. warm. Gut!", "de")
    assert split.sentences == ("Am 3. Mai ist es z. B. warm.", "Gut!")


def test_one_sentence_and_blank_text() -> None:
    assert split_sentences("A dog runs", "en").sentences == ("A dog runs",)
    assert split_sentences("   ", "en").sentences == ()
    assert split_sentences("   ", "en").join([]) == "   "


def test_translations_take_the_places_of_the_sentences() -> None:
    split = split_sentences("One. Two.\n\nThree.", "en")
    assert split.join(["Eins.", "Zwei.", "Drei."]) == "Eins. Zwei.\n\nDrei."


@given(
    st.text(alphabet=st.sampled_from(list("ab .!?\n\t«»")), max_size=60), st.sampled_from(["en", "de", "xx"])
)
def test_the_sentences_and_gaps_give_the_text_back(text: str, language: str) -> None:
    split = split_sentences(text, language)
    assert split.join(list(split.sentences)) == text
    assert all(s and s == s.strip() for s in split.sentences)


def test_a_lone_surrogate_is_cut_around_and_kept() -> None:
    split = split_sentences("Bad \ud800 char. Next one.", "en")
    assert split.sentences == ("Bad \ud800 char.", "Next one.")
