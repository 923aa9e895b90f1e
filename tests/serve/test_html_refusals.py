"""One table of HTML that cannot be translated with its markup, each refused the same way, before
anything is decoded, by every front end: `nmt translate --format html` exits 2 with one line naming
the file and line (and writes nothing), the Python API raises a MarkupError (an InputError) naming
the text, nmt's route answers 422 naming `text[i]` and LibreTranslate's 400 naming `q[i]`, both in
JSON and without a traceback in the server's log. A text that opens as a whole document keeps its
structure on both routes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import TrainedRun, nmt, one_line_error, one_thread
from serve_helpers import Server, serving_in_process

from nmt_cli.decoding.translator import Translator
from nmt_cli.errors import InputError

pytest.importorskip("lxml")

WRITTEN_BACK = "HTML with a name that cannot be written back"
CUT = "HTML that the parser stops reading part way"
# (HTML, what the refusal says). A browser reads "<b<>" as an element named "b<", which lxml
# parses but will not write: the server decoded the text first and the rebuild raised, a 500.
BAD_HTML = [
    ("<p>A <b<>dog</b> runs.</p>", WRITTEN_BACK),
    ('<p><a<b href="/">home</a<b></p>', WRITTEN_BACK),
    ("<!DOCTYPE html><html><body><p>A <b<>dog</b></p></body></html>", WRITTEN_BACK),
    ("<b>" * 300 + "A dog.", CUT),
]
IDS = ["tag-name", "link-name", "in-a-document", "nested-300-deep"]
GOOD = "<p>apple river</p>"


@pytest.mark.parametrize(("html", "says"), BAD_HTML, ids=IDS)
def test_the_command_line_exits_2_naming_the_line_and_writes_nothing(
    trained: TrainedRun, tmp_path: Path, capsys: pytest.CaptureFixture[str], html: str, says: str
) -> None:
    src, out = tmp_path / "in.html", tmp_path / "out.html"
    document = html.startswith("<!DOCTYPE")
    src.write_text(f"{html}\n" if document else f"{GOOD}\n{html}\n", encoding="utf-8")
    capsys.readouterr()
    args = ("-q", "translate", "-m", trained.checkpoint, "--device", "cpu", "--threads", 1)
    assert nmt(*args, "-i", src, "-o", out, "--format", "html") == 2
    where = f"{src}:1: " if document else f"{src}:2: "
    assert one_line_error(capsys).startswith(f"nmt: error: {where}{says}")
    assert not out.exists() and not (tmp_path / "out.html.partial").exists()


@pytest.fixture(scope="module")
def translator(trained: TrainedRun) -> Translator:
    with one_thread():
        return Translator.load(trained.checkpoint, device="cpu", precision="fp32")


@pytest.mark.parametrize(("html", "says"), BAD_HTML, ids=IDS)
def test_the_api_raises_an_input_error_naming_the_text(translator: Translator, html: str, says: str) -> None:
    with pytest.raises(InputError) as raised, one_thread():
        translator.translate_html([GOOD, html])
    assert str(raised.value).startswith(says) and "\n" not in str(raised.value)
    assert getattr(raised.value, "index", None) == 1


@pytest.fixture(scope="module")
def server(trained: TrainedRun) -> Iterator[Server]:
    with serving_in_process(trained.checkpoint) as running:
        yield running


@pytest.mark.parametrize(("html", "says"), BAD_HTML, ids=IDS)
def test_both_routes_refuse_it_before_decoding_naming_the_field(server: Server, html: str, says: str) -> None:
    own = server.post({"text": [GOOD, html], "format": "html"})
    assert own.status_code == 422, own.text
    assert own.json()["error"].startswith(f"text[1]: {says}")
    libre = server.post({"q": [GOOD, html], "source": "auto", "target": "tgt", "format": "html"})
    assert libre.status_code == 400, libre.text
    assert libre.json()["error"].startswith(f"Invalid request: q[1]: {says}")
    assert "Traceback" not in server.text()


PAGE = (
    '<!DOCTYPE html>\n<html lang="en">\n<head><title>apple</title></head>\n'
    "<body><p>apple river</p></body>\n</html>\n"
)


def test_both_routes_keep_a_documents_structure(server: Server) -> None:
    # A text that opens as a document lost its doctype, <html>, <head> and <body>.
    lxml_html = pytest.importorskip("lxml.html")
    own = server.post({"text": [PAGE], "format": "html"}).json()["translations"][0]
    libre = server.post({"q": PAGE, "source": "auto", "target": "tgt", "format": "html"}).json()
    for page in (own, libre["translatedText"]):
        assert page.startswith('<!DOCTYPE html>\n<html lang="en">\n<head><title>')
        tree = lxml_html.document_fromstring(page)
        assert [e.tag for e in tree.iter()] == ["html", "head", "title", "body", "p"]
