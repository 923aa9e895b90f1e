"""`nmt translate --constraints` and `--glossary`: phrases that every translation must contain,
read as fairseq-interactive reads them; glossary terms enforced where the line holds their source;
every phrase that cannot be met refused in one line naming its input line; and, on the shared
fairseq model, at least fairseq's own constrained decoding in satisfaction and BLEU."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import sacrebleu
from helpers import TrainedRun, nmt, refused

from nmt_cli import Translator
from nmt_cli.decoding.terms import ConstraintError
from nmt_cli.errors import SettingError

ROOT = Path(__file__).resolve().parents[2]
FAIRSEQ = ROOT / "tests" / "fixtures" / "fairseq-multi30k-tiny"
sys.path.insert(0, str(ROOT / "bench"))
from constraint_sets import contains_word  # noqa: E402


def translated(
    capsys: pytest.CaptureFixture[str], model: Path, text: str, tmp_path: Path, *args: object
) -> list[str]:
    src = tmp_path / "in.txt"
    src.write_text(text, encoding="utf-8")
    assert nmt("-q", "translate", "-m", model, "-i", src, "--device", "cpu", *args) == 0
    return capsys.readouterr().out.splitlines()


def test_each_phrase_after_a_tab_appears_in_its_lines_translation(
    trained: TrainedRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The copy model says only what it reads; the phrases make it say more.
    text = "apple river stone\tsilver\ngreen music\norange garden\tsummer\twinter\n"
    out = translated(capsys, trained.checkpoint, text, tmp_path, "--constraints", "--beam", "4")
    plain = translated(
        capsys, trained.checkpoint, "apple river stone\ngreen music\norange garden\n", tmp_path
    )
    assert "silver" not in plain[0] and "summer" not in plain[2]
    assert "silver" in out[0].split()
    assert out[1] == plain[1]  # a line without phrases is translated as without --constraints
    assert {"summer", "winter"} <= set(out[2].split())


def test_ordered_constraints_keep_the_order_given(
    trained: TrainedRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = "apple river stone\twinter\tsilver\n"
    out = translated(capsys, trained.checkpoint, text, tmp_path, "--constraints", "--ordered-constraints")
    words = out[0].split()
    assert words.index("winter") < words.index("silver")


def test_a_glossary_enforces_its_target_where_the_source_term_occurs(
    trained: TrainedRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    terms = tmp_path / "terms.tsv"
    terms.write_text("river\tsilver\ngreen music\tyellow\n", encoding="utf-8")
    out = translated(
        capsys, trained.checkpoint, "apple river\ngreen tiger\ngreen music\n", tmp_path, "--glossary", terms
    )
    assert "silver" in out[0].split()
    assert out[1] == "green tiger"  # "green" alone is not the term "green music"
    assert "yellow" in out[2].split()


@pytest.mark.parametrize("precision", ["bf16", "int8"])
def test_every_cpu_precision_meets_them(trained: TrainedRun, precision: str) -> None:
    translator = Translator.load(trained.checkpoint, device="cpu", precision=precision, threads=1)
    out = translator.translate(["apple river", "green music"], constraints=[["silver"], ["winter", "tiger"]])
    assert "silver" in out[0].split() and {"winter", "tiger"} <= set(out[1].split())


def test_the_api_takes_constraints_and_a_glossary(trained: TrainedRun) -> None:
    translator = Translator.load(trained.checkpoint, device="cpu", threads=1)
    out = translator.translate(["apple river", "stone cloud"], constraints=[["silver"], []])
    assert "silver" in out[0].split() and out[1] == "stone cloud"
    assert "silver" in translator.translate(["apple river"], glossary={"apple": "silver"})[0].split()
    nbest = translator.translate_nbest(["apple river"], 2, constraints=[["silver"]])[0]
    assert all("silver" in text.split() for text, _ in nbest)
    with pytest.raises(ConstraintError, match="an empty constraint"):
        translator.translate(["apple river"], constraints=[[""]])
    with pytest.raises(SettingError, match="constraints need a search"):
        translator.translate(["apple"], constraints=[["silver"]], sampling=__import__("nmt_cli").Sampling())


@pytest.mark.parametrize(
    ("text", "extra", "says"),
    [
        ("apple\tsilver\napple river\t\tsilver\n", [], "in.txt:2: an empty constraint"),
        ("apple\tsilver\napple\t\u6f22\u5b57\n", [], "in.txt:2: constraint '\u6f22\u5b57' has characters"),
        (
            "apple\t" + " ".join(["silver"] * 40) + "\n",
            ["--max-len-b", "5"],
            "in.txt:1: the constraints need",
        ),
        ("\tsilver\n", [], "in.txt:1: an empty line cannot contain 'silver'"),
    ],
)
def test_a_phrase_that_cannot_be_met_is_refused_naming_its_line(
    trained: TrainedRun,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    text: str,
    extra: list[str],
    says: str,
) -> None:
    src = tmp_path / "in.txt"
    src.write_text(text, encoding="utf-8")
    out = tmp_path / "out.txt"
    message = refused(
        capsys, "translate", "-m", trained.checkpoint, "-i", src, "-o", out, "--constraints", *extra
    )
    assert says in message
    assert not out.exists()


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--ordered-constraints"], "--ordered-constraints: goes with --constraints"),
        (["--constraints", "--format", "html"], "--format html: one translation a line"),
        (["--constraints", "--sampling", "topk"], "constraints need a search"),
    ],
)
def test_options_that_do_not_go_together_are_refused(
    trained: TrainedRun, tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], says: str
) -> None:
    src = tmp_path / "in.txt"
    src.write_text("apple\tsilver\n", encoding="utf-8")
    assert says in refused(capsys, "translate", "-m", trained.checkpoint, "-i", src, *args)


def test_a_glossary_line_without_a_tab_is_refused_naming_it(
    trained: TrainedRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    terms, src = tmp_path / "terms.tsv", tmp_path / "in.txt"
    for path, text in ((terms, "river\tsilver\ngreen music yellow\n"), (src, "apple\n")):
        path.write_text(text, encoding="utf-8")
    message = refused(capsys, "translate", "-m", trained.checkpoint, "-i", src, "--glossary", terms)
    assert f"{terms}:2: expected" in message


@pytest.fixture(scope="module")
def fairseq_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("fairseq") / "fairseq.pt"
    assert nmt("-q", "import", FAIRSEQ / "checkpoint.pt", "-o", out) == 0
    return out


@pytest.mark.parametrize(
    ("ordered", "theirs"), [(False, "fairseq.constrained.beam4.de"), (True, "fairseq.ordered.beam4.de")]
)
def test_on_fairseqs_model_at_least_fairseqs_constrained_decoding(
    fairseq_model: Path, capsys: pytest.CaptureFixture[str], ordered: bool, theirs: str
) -> None:
    # fairseq-interactive --constraints on the same model and constraint set (make_constrained.sh).
    args = ["--constraints", "--beam", "4", *(["--ordered-constraints"] if ordered else [])]
    assert (
        nmt(
            "-q", "translate", "-m", fairseq_model, "-i", FAIRSEQ / "constraints.en", "--device", "cpu", *args
        )
        == 0
    )
    ours = capsys.readouterr().out.splitlines()
    fairseqs = (FAIRSEQ / theirs).read_text(encoding="utf-8").splitlines()
    constraints = [
        line.split("\t")[1:] for line in (FAIRSEQ / "constraints.en").read_text(encoding="utf-8").splitlines()
    ]
    references = (FAIRSEQ / "reference.de").read_text(encoding="utf-8").splitlines()

    def met(outputs: list[str]) -> int:
        return sum(contains_word(out, c) for out, cs in zip(outputs, constraints, strict=True) for c in cs)

    assert sum(map(len, constraints)) == 361
    assert met(ours) >= met(fairseqs) >= 340  # fairseq meets 342 (341 ordered) as whole words
    bleu = [sacrebleu.corpus_bleu(out, [references]).score for out in (ours, fairseqs)]
    assert bleu[0] >= bleu[1] - 0.5, bleu


def test_a_stop_alone_is_refused_but_a_word_with_its_stop_or_digits_are_met(
    fairseq_model: Path,
) -> None:
    # The rule that refuses "." alone (tests/serve/test_decode_rules.py) refuses no more than that.
    translator = Translator.load(fairseq_model, device="cpu", threads=1)
    lines = ["A man is riding a bike in the park.", "Two dogs play in the snow."]
    out = translator.translate(lines, constraints=[["Park."], []], glossary={"Two": "2"})
    assert out[0].startswith("Ein Mann") and out[0].endswith("Park.")
    assert out[1].split()[:2] == ["2", "Hunde"]
    # A model that knows "." met it at once and stopped there: "Ein Mann fährt ."
    with pytest.raises(ConstraintError, match="constraint '.' has no letter or digit"):
        translator.translate(lines[:1], constraints=[["."]])
