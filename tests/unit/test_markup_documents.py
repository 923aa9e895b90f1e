"""Whole HTML documents translated with their structure (decoding.markup's document mode), how a
text or a line is told to be a page rather than a fragment (decoding.html_shape), and refusals made
before anything is translated."""

from __future__ import annotations

import lxml.html
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_markup import upper

from nmt_cli.decoding import html_shape, markup
from nmt_cli.decoding.markup import translate_fragments

PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <title>A dog</title>
  <link rel="stylesheet" href="site.css">
  <style>p { color: red }</style>
</head>
<!-- the body -->
<body class="page">
  <h1>Dogs</h1>
  <ul>
    <li>One dog.</li>
    <li>Two <em>big</em> dogs.</li>
  </ul>
  <p>A dog runs
  in the <b>park</b>.</p>
  <img alt="a dog" src="dog.png">
  <script>var x = "<p>";</script>
</body>
</html>
"""


def tree(document: str) -> list[tuple[str, int, tuple[tuple[str, str], ...]]]:
    """Each element (comments too) in document order: its tag, its depth and its attributes."""
    root = lxml.html.document_fromstring(document)
    return [
        (str(e.tag), len(list(e.iterancestors())), tuple(sorted(e.attrib.items())))
        for e in root.getroottree().iter()
    ]


def test_a_web_page_keeps_its_doctype_structure_and_head() -> None:
    # It lost its doctype, <html>, <head> and <body>, and the <head>'s content moved into the text.
    (out,) = translate_fragments([PAGE], upper)
    assert out.startswith('<!DOCTYPE html>\n<html lang="en">\n<head>\n  <meta charset="utf-8">')
    assert tree(out) == tree(PAGE)
    page = lxml.html.document_fromstring(out)
    assert page.find("head/title").text == "A DOG"  # the title is text a reader sees
    assert page.find("head/style").text == "p { color: red }"
    assert [li.text_content() for li in page.iter("li")] == ["ONE DOG.", "TWO BIG DOGS."]
    assert page.find("body/p").text_content() == "A DOG RUNS IN THE PARK."
    assert page.find("body/img").get("alt") == "a dog"  # attributes are never translated
    assert '<script>var x = "<p>";</script>' in out
    assert out.endswith("</html>\n")


def test_a_text_is_a_document_when_it_opens_as_one_or_the_caller_says_so() -> None:
    assert translate_fragments(["<!-- c --> <html><body><p>x</p></body></html>"], upper) == [
        "<!-- c -->\n<html><body><p>X</p></body></html>"
    ]
    assert translate_fragments(["<p>x</p>"], upper, documents=True) == ["<html><body><p>X</p></body></html>"]
    assert translate_fragments(["<p>x</p>"], upper) == ["<p>X</p>"]  # a fragment stays one


PARTS = st.sampled_from(["<p>", "</p>", "<b>", "</b>", "<head>", "<title>t</title>", "<li>", "one ", "<br>"])


@settings(max_examples=150, deadline=None)
@given(st.lists(PARTS, max_size=12), st.booleans())
def test_any_document_keeps_the_elements_the_parser_reads(parts: list[str], doctype: bool) -> None:
    document = ("<!DOCTYPE html>" if doctype else "") + "<html>" + "".join(parts)
    (out,) = translate_fragments([document], upper)
    assert tree(out) == tree(document)
    assert out.startswith("<!DOCTYPE html>\n<html>") == doctype


def test_a_name_that_cannot_be_written_back_is_refused_before_anything_is_translated() -> None:
    # The server decoded the text first and the rebuild raised, uncaught: a 500 with a traceback.
    for text in ("<p>A <b<>dog</b> runs.</p>", "<!DOCTYPE html><html><body><b<>x"):
        with pytest.raises(markup.MarkupError, match="cannot be written back"):
            markup.Parsed.of([text])


@pytest.mark.parametrize(
    ("text", "opens", "doctype"),
    [
        ("<!DOCTYPE html>\n<html>", True, "<!DOCTYPE html>"),
        ("\ufeff  <!-- a comment --> <!doctype html>", True, "<!doctype html>"),
        (" <html lang=en><p>x", True, ""),
        ("<p>x</p>", False, ""),
        ("x <html>", False, ""),
        ("", False, ""),
    ],
)
def test_a_text_opens_as_a_document_after_whitespace_and_comments(
    text: str, opens: bool, doctype: str
) -> None:
    assert html_shape.document_opening(text) == (opens, doctype)


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("<ul>", "<ul> is not closed on the line"),
        ("in the park.</p>", "</p> closes an element not opened on the line"),
        ("</head>", "</head> closes an element not opened on the line"),
        ("<body>", "<body> belongs to a whole document"),
        ("<div><b>x</div>", "<b> is not closed on the line"),
        ("<p>A dog runs", None),  # HTML lets </p> be left out
        ("<ul><li>one<li>two</ul>", None),
        ("Hi <b>there <i>you</b> x</i>", None),  # misnested, but closed on the line
        ("<p>a<br><img src=x></p><script>if (a<b) </p></script>", None),
        ("<xmp></p></xmp>", None),
    ],
)
def test_a_line_that_is_only_part_of_a_page_is_told_from_a_fragment(line: str, problem: str | None) -> None:
    assert html_shape.unbalanced(line) == problem


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("</ul>", False),
        ("<p></p>", False),
        ("<p", False),
        ("<script>var a</script>", False),
        ("<b>x</b>", True),
    ],
)
def test_words_outside_the_tags(text: str, words: bool) -> None:
    assert html_shape.has_words(text) is words
