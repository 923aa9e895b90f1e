"""Language identification among the served source languages (serving.detect, py3langid)."""

from __future__ import annotations

from nmt_cli.serving.detect import Detector


def test_the_language_of_a_text_comes_first_among_the_served_ones() -> None:
    detector = Detector(["en", "de", "fr"])
    assert detector.rank("A man rides a bike down the street.")[0][0] == "en"
    assert detector.rank("Ein Mann fährt mit dem Fahrrad die Straße entlang.")[0][0] == "de"
    ranked = detector.rank("Un homme fait du vélo dans la rue.")
    assert ranked[0][0] == "fr" and ranked[0][1] > 90 and sorted(c for c, _ in ranked) == ["de", "en", "fr"]


def test_a_language_the_identifier_does_not_know_is_never_chosen() -> None:
    ranked = Detector(["de", "qq"]).rank("Ein Hund läuft.")
    assert ranked == [("de", 100.0), ("qq", 0.0)]


def test_no_letters_or_one_language_gives_equal_odds() -> None:
    assert Detector(["de", "en"]).rank("123 !!") == [("de", 50.0), ("en", 50.0)]
    assert Detector(["en"]).rank("Hallo") == [("en", 100.0)]
