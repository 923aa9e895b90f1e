"""HTML translated with its markup (decoding.markup), with stand-in translators whose alignment is
known: the words come out upper-cased in order, or reversed. What a status from Mastodon holds
(mentions, hashtags, links, entities, <br>) survives byte for byte, inline elements land on the
aligned words, and any input, malformed too, gives HTML with the same elements and attributes."""

from __future__ import annotations

from typing import Any

import lxml.html
import pytest
from helpers import MASTODON_HASHTAG, MASTODON_LINK, MASTODON_MENTION
from hypothesis import given, settings
from hypothesis import strategies as st

from nmt_cli.decoding import markup, markup_projection, markup_spans, markup_units, markup_writing
from nmt_cli.decoding.alignment import Alignment
from nmt_cli.decoding.markup import translate_fragments

MENTION, HASHTAG, LINK = MASTODON_MENTION, MASTODON_HASHTAG, MASTODON_LINK


def upper(texts: list[str]) -> list[tuple[str, Alignment]]:
    """A stand-in translator: each text upper-cased, word i aligned to word i."""
    return [(t.upper(), tuple((i, i) for i in range(len(t.split())))) for t in texts]


def reverse(texts: list[str]) -> list[tuple[str, Alignment]]:
    """A stand-in translator: the words upper-cased in reverse order, each aligned to where it was."""
    out = []
    for text in texts:
        words = text.split()
        n = len(words)
        out.append((" ".join(reversed(words)).upper(), tuple((i, n - 1 - i) for i in range(n))))
    return out


def elements(fragment: str) -> list[tuple[str, tuple[tuple[str, str], ...]]]:
    root = lxml.html.fragment_fromstring(fragment, create_parent="div")
    return sorted((e.tag, tuple(sorted(e.attrib.items()))) for e in root.iter() if e is not root)


def test_a_mastodon_status_keeps_mentions_hashtags_links_and_breaks() -> None:
    status = f"<p>{MENTION} Hello &amp; <strong>good</strong> day!<br>See {LINK} now {HASHTAG}</p>"
    (out,) = translate_fragments([status], upper)
    assert out == f"<p>{MENTION} HELLO &amp; <strong>GOOD</strong> DAY!<br>SEE {LINK} NOW {HASHTAG}</p>"


def test_inline_elements_follow_their_words_and_atoms_the_word_before_them() -> None:
    (out,) = translate_fragments([f"<p>one <em>two</em> three {HASHTAG} four</p>"], reverse)
    # four three two one: <em> stays on TWO; the hashtag follows THREE, the word before it
    assert out == f"<p>FOUR THREE {HASHTAG} <em>TWO</em> ONE</p>"


def test_nested_inline_elements_stay_nested() -> None:
    (out,) = translate_fragments(["a <b>bold <i>it</i></b> x"], reverse)
    assert out == "X <b><i>IT</i> BOLD</b> A"


def test_blocks_are_translated_apart_and_code_is_not_translated() -> None:
    (out,) = translate_fragments(
        ["<ul><li>one two</li><li><em>three</em></li></ul><pre>keep me</pre>x <code>a = b</code> y"], upper
    )
    assert out == "<ul><li>ONE TWO</li><li><em>THREE</em></li></ul><pre>keep me</pre>X <code>a = b</code> Y"


def test_script_and_markup_in_text_come_out_as_text_or_untouched() -> None:
    (out,) = translate_fragments(["<p>x &lt;script&gt; y</p><script>alert(1)</script>"], upper)
    assert out == "<p>X &lt;SCRIPT&gt; Y</p><script>alert(1)</script>"


def test_malformed_html_is_repaired_as_the_parser_repairs_it() -> None:
    (out,) = translate_fragments(["Hi <b>there <i>you</b> x</i> & < 3 <p>unclosed"], upper)
    assert out == "HI <b>THERE <i>YOU</i></b> X &amp; &lt; 3 <p>UNCLOSED</p>"


def test_a_tag_left_unfinished_at_the_end_is_dropped_as_a_browser_drops_it() -> None:
    # lxml's fragment parser read "<p" as an element named "p<" with an attribute "body".
    fragments = ["<p", 'one <b class="x', "<p>one</p><b", "one <!-- note", "one <"]
    assert translate_fragments(fragments, upper) == ["", "ONE ", "<p>ONE</p>", "ONE <!-- note-->", "ONE &lt;"]


def test_escaped_markup_before_the_first_element_stays_escaped() -> None:
    fragments = ["x &lt;b&gt;bold&lt;/b&gt; y", "a &amp; b", "a &lt; b <i>c</i>"]
    assert translate_fragments(fragments, upper) == [
        "X &lt;B&gt;BOLD&lt;/B&gt; Y",
        "A &amp; B",
        "A &lt; B <i>C</i>",
    ]


def test_plain_blank_and_whitespace_fragments() -> None:
    assert translate_fragments(["plain text", "", "  ", "<p> </p>"], upper) == [
        "PLAIN TEXT",
        "",
        "  ",
        "<p> </p>",
    ]


def test_control_characters_read_as_spaces_and_lone_surrogates_as_question_marks() -> None:
    # lxml's parser lets these through, but its tree refuses the controls and drops the text
    # after a lone surrogate.
    fragments = [
        "<p>\x0bHello</p>",
        "<p>Hi.</p><p>\x0c</p>",
        '<p title="a\x01b">x\x00y</p>',
        "<p>\ud800Hello</p>",
    ]
    assert translate_fragments(fragments, upper) == [
        "<p> HELLO</p>",
        "<p>HI.</p><p> </p>",
        '<p title="a b">X Y</p>',
        "<p>?HELLO</p>",
    ]


TAGS = st.sampled_from(["b", "i", "em", "strong", "span", "a", "p", "li", "br", "code", "div"])
WORDS = st.sampled_from(["one", "two", "three", "&amp;", " ", "<", "x.", "Ünï"])


@st.composite
def fragments(draw: st.DrawFn) -> str:
    parts = []
    for _ in range(draw(st.integers(0, 12))):
        kind = draw(st.integers(0, 2))
        tag = draw(TAGS)
        if kind == 0:
            parts.append(draw(WORDS) + " ")
        elif kind == 1:
            parts.append(f'<{tag} class="c{draw(st.integers(0, 3))}">')
        else:
            parts.append(f"</{tag}>")
    return "".join(parts)


@settings(max_examples=200, deadline=None)
@given(fragments(), st.sampled_from([upper, reverse]))
def test_any_fragment_gives_html_with_the_same_elements_and_attributes(
    fragment: str, translate: object
) -> None:
    (out,) = translate_fragments([fragment], translate)  # type: ignore[arg-type]
    if fragment.strip():
        assert elements(out) == elements(fragment)


def test_a_code_block_or_rule_between_texts_ends_a_unit_as_a_block_does() -> None:
    # <pre>, <hr> and <option> are blocks: the words on either side were read as one word
    # ("this:and"), with the code block put inside the translation, and a second <option> left
    # empty outside its <select>.
    fragments = [
        "<div>Run this:<pre>make  all</pre>and then wait</div>",
        "Above<hr>Below",
        "<select><option>one</option><option>two</option></select>",
    ]
    assert translate_fragments(fragments, reverse) == [
        "<div>THIS: RUN<pre>make  all</pre>WAIT THEN AND</div>",
        "ABOVE<hr>BELOW",
        "<select><option>ONE</option><option>TWO</option></select>",
    ]


def test_nested_elements_are_read_in_time_polynomial_in_their_depth(monkeypatch: pytest.MonkeyPatch) -> None:
    # Each element's own text was read twice for each ancestor: 2^depth readings, so that 25 nested
    # <b> (a request of 175 characters) held a server's event loop for minutes.
    own_text, calls = markup_units.own_text, []

    def counted(element: object) -> str:
        calls.append(element)
        return own_text(element)  # type: ignore[arg-type]

    monkeypatch.setattr(markup_units, "own_text", counted)
    for tag in ("b", "div"):
        calls.clear()
        (out,) = translate_fragments([f"<{tag}>" * 16 + "x" + f"</{tag}>" * 16 + " y"], upper)
        assert out == f"<{tag}>" * 16 + "X" + f"</{tag}>" * 16 + " Y"
        assert len(calls) < 1_000


@pytest.mark.parametrize(
    "fragment",
    [
        "<div>" * 300 + "A dog." + "</div>" * 300 + "<p>A cat.</p>",
        "<pre>" + "x" * 11_000_000 + "</pre><p>A cat.</p>",
        '<p title="' + "x" * 11_000_000 + '">A cat.</p>',
    ],
    ids=["nested 300 deep", "a 11 MB text", "a 11 MB attribute"],
)
def test_html_the_parser_stops_reading_part_way_is_refused_not_cut(fragment: str) -> None:
    # lxml's parser stops at its limits and returns what it read so far: "A cat." (and with 300
    # nested <div>, "A dog." too) came back as nothing at all, without an error.
    with pytest.raises(markup.MarkupError, match="stops reading part way") as raised:
        translate_fragments([fragment], upper)
    assert "\n" not in str(raised.value)


def test_nesting_up_to_the_limit_the_message_names_keeps_every_element() -> None:
    fragment = "<span>" * 254 + "a dog." + "</span>" * 254 + "<p>a cat.</p>"
    assert translate_fragments([fragment], upper) == [
        "<span>" * 254 + "A DOG." + "</span>" * 254 + "<p>A CAT.</p>"
    ]
    with pytest.raises(markup.MarkupError, match=r"Excessive depth in document: 256\), .* at most 254 deep"):
        translate_fragments(["<span>" * 255 + "a dog."], upper)


def test_a_long_block_is_written_into_the_tree_once_a_run_not_word_by_word(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Each word was appended to the lxml text or tail before it, which copies the whole run each
    # time: a block of 2,000 sentences (125k characters) took 9 s to write back.
    writes: list[str] = []

    def counted(attribute: Any) -> property:
        """lxml's `text` or `tail`, each write to it counted."""

        def write(element: lxml.html.HtmlElement, value: str | None) -> None:
            writes.append(value or "")
            attribute.__set__(element, value)

        return property(attribute.__get__, write)

    class Counted(lxml.html.HtmlElement):
        text = counted(lxml.etree.ElementBase.text)
        tail = counted(lxml.etree.ElementBase.tail)

    parser = lxml.html.HTMLParser()
    parser.set_element_class_lookup(lxml.etree.ElementDefaultClassLookup(element=Counted))
    monkeypatch.setattr(markup_writing.html, "Element", parser.makeelement)
    words = [f"w{i}" for i in range(300)]
    fragment = f"<p>{' '.join(words)} <b>x</b> {' '.join(words)}</p>"
    (out,) = translate_fragments([fragment], upper)
    upper_words = " ".join(words).upper()
    assert out == f"<p>{upper_words} <b>X</b> {upper_words}</p>"
    assert len(writes) < 10


def test_inline_elements_are_placed_without_scanning_every_word_for_each() -> None:
    # Each element looked through the owners of every source word of its block: a block of 4,000
    # sentences with a <b> in each spent seconds on elements x words membership tests.
    checks: list[int] = []

    class Counted(set):
        def __contains__(self, item: object) -> bool:
            checks.append(1)
            return super().__contains__(item)

    n = 300
    unit = markup_units.Unit()
    for k in range(n):
        unit.texts.append((f"w{k} ", (k,)))
        unit.elements[k] = lxml.html.Element("b")
    word_owners: list[set[int]] = [Counted({k}) for k in range(n)]
    spans = markup_spans.spans_of(unit, word_owners, {k: [k] for k in range(n)}, lambda i: i, n)
    assert [(span.start, span.end) for span in spans.values()] == [(k, k) for k in range(n)]
    assert len(checks) <= n


def test_atoms_are_placed_without_counting_the_words_before_each(monkeypatch: pytest.MonkeyPatch) -> None:
    # Each atom counted the source words before it one by one: 4,000 <img> in a block of 47,000
    # words took 18 s.
    reads: list[int] = []

    class Counted(tuple):
        def __iter__(self):  # type: ignore[no-untyped-def]
            reads.append(1)
            return super().__iter__()

    words = markup_projection.words
    monkeypatch.setattr(markup_projection, "words", lambda text: (Counted(word) for word in words(text)))
    n = 200
    (out,) = translate_fragments(["<p>" + " ".join(f"w{k} <img>" for k in range(n)) + " end</p>"], upper)
    assert out == "<p>" + " ".join(f"W{k} <img>" for k in range(n)) + " END</p>"
    assert len(reads) <= 3 * n


def test_a_name_lxml_cannot_write_back_is_refused_not_a_crash() -> None:
    # The parser reads "<b<>" as an element "b<", as a browser does; rebuilding it raised lxml's
    # ValueError, a 500 from the server.
    with pytest.raises(markup.MarkupError, match="cannot be written back"):
        translate_fragments(["<b<>hello world"], upper)


def test_the_parsers_message_loses_libxml2s_advice_in_either_wording() -> None:
    from nmt_cli.decoding.html_parsing import HUGE

    for said in (
        "Excessive depth in document: 256, use XML_PARSE_HUGE option",
        "Excessive depth in document: 256 use XML_PARSE_HUGE option",
        "Resource limit exceeded: Buffer size limit exceeded, try XML_PARSE_HUGE",
    ):
        assert "XML_PARSE_HUGE" not in HUGE.split(said)[0]
