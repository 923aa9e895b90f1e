"""Markup that comes back as it was where nothing forces a change (decoding.markup): punctuation at
a word's edge where the source had it, elements nested as they were (empty ones too), what stands
at an inline element's edge kept inside it, and raw-text elements written as they were read."""

from __future__ import annotations

import lxml.html
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_markup import reverse, upper

from nmt_cli.decoding.alignment import Alignment
from nmt_cli.decoding.markup import translate_fragments


@pytest.mark.parametrize(
    ("fragment", "expected"),
    [
        ("I like <b>fruit</b>.", "I LIKE <b>FRUIT</b>."),
        ("I like <b>fruit</b>!", "I LIKE <b>FRUIT</b>!"),
        ("Do you like <b>fruit</b>?", "DO YOU LIKE <b>FRUIT</b>?"),
        ("<b>fruit</b>, apples", "<b>FRUIT</b>, APPLES"),
        ('"<b>fruit</b>"', '"<b>FRUIT</b>"'),
        ("«<i>fruit</i>»", "«<i>FRUIT</i>»"),
        ("(<i><b>x</b></i>)", "(<i><b>X</b></i>)"),
        ("<b>Hi</b>...", "<b>HI</b>..."),
        # Punctuation the element held in the source stays inside it.
        ("<i><b>fruit</b>.</i>", "<i><b>FRUIT</b>.</i>"),
        ("<b>This is fruit.</b>", "<b>THIS IS FRUIT.</b>"),
        ('<b>"x"</b>', '<b>"X"</b>'),
    ],
)
def test_punctuation_at_a_words_edge_stays_where_the_source_had_it(fragment: str, expected: str) -> None:
    # The target word "FRUIT." was wrapped whole: <b>fruit</b>. came back as <b>FRUIT.</b>.
    assert translate_fragments([fragment], upper) == [expected]


def one_word(texts: list[str]) -> list[tuple[str, Alignment]]:
    """Every text translated as one word, aligned to all of its words."""
    return [("EINS", tuple((i, 0) for i in range(len(t.split())))) for t in texts]


def test_nested_elements_left_without_a_word_stay_nested() -> None:
    # The first <b> takes the only word; the second came back as <b></b><i></i>, its <i> outside.
    assert translate_fragments(["<b>one</b> <b><i>two</i></b>"], one_word) == ["<b>EINS</b><b><i></i></b>"]
    assert translate_fragments(["<b>one</b> <b><i>two <u>x</u></i></b>"], one_word) == [
        "<b>EINS</b><b><i><u></u></i></b>"
    ]


@pytest.mark.parametrize(
    "raw",
    [
        "<xmp>a <b>b</b> &amp; c</xmp>",
        "<noembed>a <b>x</b></noembed>",
        "<noframes>a b</noframes>",
        "<p>x <plaintext>a <b>b</b> c",
    ],
)
def test_raw_text_elements_are_kept_as_they_were_written(raw: str) -> None:
    # Their text was translated ("<xmp>A &lt;B&gt;B..."), and lxml escapes what it writes back, which
    # an element read as raw text shows as it stands.
    (out,) = translate_fragments([raw + " tail"], upper)
    kept = raw.removeprefix("<p>x ")
    assert kept in out and (raw.startswith("<p>") or out == kept + " TAIL")


@pytest.mark.parametrize(
    ("fragment", "expected"),
    [
        # An image at the edge of a link came out beside it: <img> <a>HOME</a>.
        ('<p><a href="/"><img src="x"> Home</a></p>', '<p><a href="/"><img src="x"> HOME</a></p>'),
        ('<p><a href="/">Home <img src="x"></a> now</p>', '<p><a href="/">HOME <img src="x"></a> NOW</p>'),
        ('x <a href="/"><img src="x">Home</a>', 'X <a href="/"><img src="x">HOME</a>'),
        ("<b>one <b>", "<b>ONE <b></b></b>"),  # an empty element inside, at the end
        ("<p><b> <i>x</i> </b> y</p>", "<p><b> <i>X</i> </b> Y</p>"),
    ],
)
def test_what_stands_at_an_inline_elements_edge_stays_inside_it(fragment: str, expected: str) -> None:
    assert translate_fragments([fragment], upper) == [expected]


def test_code_at_the_end_of_an_element_stays_in_it_when_the_words_move() -> None:
    (out,) = translate_fragments(["a <b>x <code>y</code> z</b> w"], reverse)
    assert out == "W <b>Z X <code>y</code></b> A"


def ancestry(fragment: str) -> list[tuple[tuple[str, ...], str, tuple[tuple[str, str], ...]]]:
    """Each element with the tags of its ancestors, and its attributes."""
    root = lxml.html.fragment_fromstring(fragment, create_parent="div")
    return sorted(
        (tuple(str(a.tag) for a in e.iterancestors())[::-1][1:], str(e.tag), tuple(sorted(e.attrib.items())))
        for e in root.iter()
        if e is not root
    )


PARTS = st.sampled_from(
    [
        "<b>",
        "</b>",
        "<i>",
        "</i>",
        "<a href=x>",
        "</a>",
        "<img src=y>",
        "<code>c</code>",
        "one ",
        "two. ",
        " ",
        "<p>",
        "</p>",
        "<br>",
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(PARTS, max_size=14))
def test_a_translation_in_the_same_order_keeps_every_element_where_it_was(parts: list[str]) -> None:
    fragment = "".join(parts)
    (out,) = translate_fragments([fragment], upper)
    if fragment.strip():
        assert ancestry(out) == ancestry(fragment)


def test_an_element_left_without_a_word_stays_beside_the_word_it_is_aligned_to() -> None:
    def translate(texts: list[str]) -> list[tuple[str, Alignment]]:
        return [("Wir lieben NY heute", ((0, 0), (1, 1), (2, 2), (3, 2), (4, 3)))]

    # <b> takes "NY"; the <i> aligned to it too went to the start of the sentence.
    assert translate_fragments(["We love <b>new</b> <i>York</i> today"], translate) == [
        "Wir lieben <b>NY</b> <i></i>heute"
    ]
