"""Glossaries: which entries a line enforces (whole words, case as written, longest-leftmost), and
bad glossary files refused in one line that names the file and line."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from nmt_cli.data.glossary import Glossary
from nmt_cli.errors import InputError

FORMAT = "expected `source term<TAB>target term`"


def write(tmp_path: Path, content: str | bytes) -> Path:
    path = tmp_path / "terms.tsv"
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    return path


@pytest.mark.parametrize(
    ("line", "wanted"),
    [
        ("I live in Berlin.", ["Berlin"]),  # punctuation after the word
        ("(Berlin) is big", ["Berlin"]),
        ("Berlin's mayor", ["Berlin"]),
        ("a Berlin-based firm", ["Berlin"]),
        ("a Berliner eats", []),  # a longer word is another word
        ("West-Berlin", ["Berlin"]),
        ("in berlin", []),  # case as the glossary writes it
        ("in BERLIN", []),
    ],
)
def test_source_terms_match_whole_words_case_as_written(line: str, wanted: list[str]) -> None:
    assert Glossary.of({"Berlin": "Berlin"}).targets(line) == wanted


def test_a_glossary_that_wants_both_cases_lists_both() -> None:
    glossary = Glossary.of({"Bank": "Bank", "bank": "Ufer"})
    assert glossary.targets("the bank of the river") == ["Ufer"]
    assert glossary.targets("Bank holidays") == ["Bank"]


def test_multi_word_terms_match_consecutive_words_only() -> None:
    glossary = Glossary.of({"machine translation": "maschinelle Übersetzung"})
    assert glossary.targets("Machine translation and machine  translation.") == ["maschinelle Übersetzung"]
    assert glossary.targets("a machine for translation") == []
    assert glossary.targets("machine translations") == []
    assert glossary.targets("machine") == []  # a term's prefix is no match


def test_the_longest_term_at_the_leftmost_position_wins_and_matching_goes_on_after_it() -> None:
    glossary = Glossary.of(
        {"New York": "NY", "New York City": "NYC", "City Hall": "Rathaus", "York": "York", "Hall": "Halle"}
    )
    # "New York City" wins over "New York" (longest); "City Hall" then cannot start inside it.
    assert glossary.targets("New York City Hall") == ["NYC", "Halle"]
    assert glossary.targets("New York Hall") == ["NY", "Halle"]
    # No term starts at "Old"; "York" then matches on its own, as does "City Hall" after it.
    assert glossary.targets("Old York City Hall") == ["York", "Rathaus"]
    # A longer term that fails part-way gives the longest one that matched.
    assert glossary.targets("New York Cit") == ["NY"]


def test_targets_come_in_order_of_first_occurrence_each_once() -> None:
    glossary = Glossary.of([("dog", "Hund"), ("cat", "Katze"), ("hound", "Hund"), ("house", "Haus")])
    assert glossary.targets("the cat saw the dog, the hound and the cat again") == ["Katze", "Hund"]
    assert glossary.targets("") == []


def test_unicode_words_match_whole_and_in_either_composition() -> None:
    glossary = Glossary.of({"Köln": "Cologne", "Straße": "street", "東京": "Tokyo"})
    assert glossary.targets("Wir fahren nach Köln.") == ["Cologne"]
    assert glossary.targets("Ko\u0308ln, decomposed") == ["Cologne"]
    assert glossary.targets("Kölner Dom") == []
    assert glossary.targets("die Hauptstraße") == []
    assert Glossary.of({"Ko": "x"}).targets("Köln, Ko\u0308ln") == []  # ö is a letter of the word
    assert glossary.targets("Straße und 東京") == ["street", "Tokyo"]


def test_terms_with_punctuation_match_the_same_words_in_a_line() -> None:
    glossary = Glossary.of({"C++": "C++", "U.S.": "USA", "#": "Raute"})
    assert glossary.targets("code in C++, mostly") == ["C++"]
    assert glossary.targets("the U.S. economy") == ["USA"]
    assert glossary.targets("press # twice") == ["Raute"]
    assert glossary.targets("C is not C++'s ancestor?") == ["C++"]


def test_read_parses_a_tsv_file_stripping_terms_and_skipping_blank_lines(tmp_path: Path) -> None:
    path = write(tmp_path, "\ufeffBerlin\tBerlin\r\n\n   \n New York \t New York City \n#1\tNummer eins\n")
    glossary = Glossary.read(path)
    assert len(glossary) == 3
    assert Glossary.read(str(path)).targets("New York") == ["New York City"]  # as Python callers give paths
    assert glossary.targets("#1 in New York, not Berlin") == ["Nummer eins", "New York City", "Berlin"]


def test_a_large_glossary_builds_and_matches_the_right_entries() -> None:
    rng = random.Random(0)
    entries = {f"term{i}": f"Begriff{i}" for i in range(100_000)}
    entries.update({f"term{i} phrase{i}": f"Phrase{i}" for i in range(0, 100_000, 1000)})
    glossary = Glossary.of(entries)
    assert len(glossary) == 100_100
    for _ in range(1_000):
        picks = rng.sample(range(100_000), 3)
        line = f"see term{picks[0]}, term{picks[1]}x and term{picks[2]} phrase{picks[2]}."
        last = f"Phrase{picks[2]}" if picks[2] % 1000 == 0 else f"Begriff{picks[2]}"
        assert glossary.targets(line) == [f"Begriff{picks[0]}", last]


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("Berlin\tBerlin\nParis Paris\n", f"terms.tsv:2: {FORMAT}, found no tab"),
        ("Berlin\tBerlin\tBärlin\n", f"terms.tsv:1: {FORMAT}, found 2 tabs"),
        ("# a comment\n", f"terms.tsv:1: {FORMAT}, found no tab"),
        ("a\tb\n \tBerlin\n", "terms.tsv:2: empty source term"),
        ("a\tb\n\nBerlin\t  \n", "terms.tsv:3: empty target term"),
        ("\t\n", "terms.tsv:1: empty source term"),
        (
            "Berlin\tBerlin\nParis\tParis\nBerlin \tBärlin\n",
            "terms.tsv:3: source term 'Berlin' repeats line 1",
        ),
        ("New York\tNY\nNew  York\tNY\n", "terms.tsv:2: source term 'New  York' repeats line 1"),
        (b"a\tb\nK\xf6ln\tCologne\n", "terms.tsv:2: invalid UTF-8 (byte 0xf6 at byte 2)"),
        (b"B\x00e\tb\n", "terms.tsv:1: NUL byte"),
        ("", "terms.tsv: no entries"),
        ("\n  \n", "terms.tsv: no entries"),
    ],
)
def test_bad_glossary_files_are_refused_naming_the_line(
    tmp_path: Path, content: bytes | str, says: str
) -> None:
    with pytest.raises(InputError) as caught:
        Glossary.read(write(tmp_path, content))
    message = str(caught.value)
    assert says in message
    assert message.startswith(f"glossary {tmp_path}")
    assert "\n" not in message and caught.value.exit_code == 2


def test_each_refusal_says_what_to_do(tmp_path: Path) -> None:
    cases: dict[str | bytes, str] = {
        "a b\n": "put one tab between the terms",
        "\tb\n": "give both terms or remove the entry",
        "a\tb\na\tc\n": "keep one of the two entries",
        b"\xff\tb\n": "save the glossary as UTF-8",
        "": "write one entry a line, `source term<TAB>target term`",
    }
    for content, hint in cases.items():
        with pytest.raises(InputError, match=hint):
            Glossary.read(write(tmp_path, content))


def test_a_missing_file_or_a_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=f"^{re.escape(f'glossary {tmp_path}/none.tsv')}: no such file$"):
        Glossary.read(tmp_path / "none.tsv")
    with pytest.raises(InputError, match=f"^{re.escape(f'glossary {tmp_path}')}: is a directory"):
        Glossary.read(tmp_path)


@pytest.mark.parametrize(
    ("entries", "says"),
    [
        ({"Berlin": "Berlin", " ": "x"}, "terms entry 2: empty source term"),
        ([("a", "b"), ("Berlin", "")], "terms entry 2: empty target term"),
        (
            [("a", "b"), ("Berlin", "x"), ("Berlin", "y")],
            "terms entry 3: source term 'Berlin' repeats entry 2",
        ),
        ({"Berlin": "x", " Berlin ": "y"}, "terms entry 2: source term 'Berlin' repeats entry 1"),
        ({"Berlin": 3}, "terms entry 1: expected (source term, target term), got ('Berlin', 3)"),
        ([("a", "b", "c")], "terms entry 1: expected (source term, target term)"),
    ],
)
def test_bad_entries_given_in_code_are_refused_naming_the_entry(entries: object, says: str) -> None:
    with pytest.raises(InputError) as caught:
        Glossary.of(entries, where="terms")  # type: ignore[arg-type]
    assert str(caught.value).startswith(says)


def test_an_empty_mapping_is_an_empty_glossary() -> None:
    glossary = Glossary.of({})
    assert len(glossary) == 0
    assert glossary.targets("anything at all") == []
