"""What a translation must contain: a line's own phrases and its glossary terms, as piece ids, with
every phrase that cannot be met refused in one line that names it."""

from __future__ import annotations

import pickle

import pytest

from nmt_cli.data.glossary import Glossary
from nmt_cli.decoding.terms import Constrained, ConstraintError, Vocabulary, constrained_lines
from nmt_cli.errors import InputError

UNK = 1
PIECES = {"Haus": [10], "rotes Haus": [11, 10], "Hund": [12], "Straße": [13, UNK]}


def vocabulary(room: int = 10) -> Vocabulary:
    return Vocabulary(lambda text: PIECES[text], UNK, lambda line: room)


def test_phrases_become_pieces_and_lines_without_any_stay_strings() -> None:
    lines = constrained_lines(
        ["a house", "a dog", "nothing"], [["Haus"], ["rotes Haus", "Hund"], []], None, vocabulary()
    )
    assert lines == [
        Constrained("a house", ((10,),)),
        Constrained("a dog", ((11, 10), (12,))),
        "nothing",
    ]
    assert len(lines[0]) == len("a house")  # decoding workers share lines out by length


def test_glossary_terms_follow_the_lines_own_phrases_each_once() -> None:
    glossary = Glossary.of({"house": "Haus", "dog": "Hund"})
    lines = constrained_lines(["the dog and the house", "a cat"], [["Hund"], []], glossary, vocabulary())
    # The own phrase goes anywhere; the glossary term where "house" stands (characters 16:21).
    assert lines == [Constrained("the dog and the house", ((12,), (10,)), ((), ((16, 21),))), "a cat"]


@pytest.mark.parametrize(
    ("line", "phrase", "room", "says"),
    [
        ("a road", "Straße", 10, "'Straße' has characters the model's vocabulary lacks"),
        ("a house", "  ", 10, "an empty constraint"),
        ("", "Haus", 10, "an empty line cannot contain 'Haus'"),
        ("a red house", "rotes Haus", 1, "need 2 pieces, more than the 1"),
    ],
)
def test_a_phrase_that_cannot_be_met_is_refused_naming_it(
    line: str, phrase: str, room: int, says: str
) -> None:
    with pytest.raises(ConstraintError) as caught:
        constrained_lines(["fine", line], [[], [phrase]], None, vocabulary(room))
    assert caught.value.line == 1
    assert says in str(caught.value)
    assert isinstance(caught.value, InputError) and caught.value.exit_code == 2
    # Raised in a decoding worker, it must cross the process boundary whole.
    again = pickle.loads(pickle.dumps(caught.value))
    assert (again.line, again.problem, str(again)) == (1, caught.value.problem, str(caught.value))


def test_constraints_are_lists_of_strings_one_a_line() -> None:
    with pytest.raises(InputError, match=r"2 lists for 1 lines"):
        constrained_lines(["a"], [["Haus"], ["Hund"]], None, vocabulary())
    with pytest.raises(InputError, match=r"constraints\[0\]: a list of phrases for the line, not str; write"):
        constrained_lines(["a"], ["Haus"], None, vocabulary())
    with pytest.raises(InputError, match=r"constraints\[0\]: a list of phrases for the line, not NoneType"):
        constrained_lines(["a"], [None], None, vocabulary())  # type: ignore[list-item]
    with pytest.raises(ConstraintError, match="a constraint is a string, not int"):
        constrained_lines(["a"], [[3]], None, vocabulary())  # type: ignore[list-item]


def test_a_nul_in_a_phrase_reads_as_a_space_as_in_the_lines() -> None:
    # nmt translate reads NUL as a space in the whole TSV line, phrases included.
    lines = constrained_lines(["a red house"], [["rotes\x00Haus", "Hund\x00"]], None, vocabulary())
    assert lines == [Constrained("a red house", ((11, 10), (12,)))]
