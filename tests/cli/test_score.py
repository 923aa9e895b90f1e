"""`nmt score`: sacreBLEU metrics, signatures, --json, stdin, several references, the
paper-comparable compound-split BLEU, and one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from nmt_cli.cli.main import main
from nmt_cli.commands import score

REF = ["The cat sits on the mat.", "A rich-text editor opens.", "Zwei Männer spielen Fußball im Park."]


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def nmt(capsys, *args: object) -> tuple[int, str, str]:
    capsys.readouterr()
    try:
        main([str(a) for a in args])
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_identical_is_100_with_signature(capsys, tmp_path: Path) -> None:
    ref = write(tmp_path / "ref.de", REF)
    code, out, err = nmt(capsys, "score", "--ref", ref, "--hyp", ref, "--metrics", "bleu,chrf,ter")
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert len(lines) == 3
    assert lines[0].startswith("BLEU = 100.00 ") and "[sacreBLEU: nrefs:1|case:mixed|" in lines[0]
    assert lines[1].startswith("chrF2 = 100.00") and lines[2].startswith("TER = 0.00")


def test_json_parses(capsys, tmp_path: Path) -> None:
    ref = write(tmp_path / "ref.de", REF)
    hyp = write(tmp_path / "hyp.de", ["The cat sat on the mat.", *REF[1:]])
    code, out, _ = nmt(capsys, "score", "--ref", ref, "--hyp", hyp, "--metrics", "ter,bleu", "--json")
    result = json.loads(out)
    assert code == 0 and set(result) == {"ter", "bleu", "lines", "refs"} and result["lines"] == 3
    assert 0 < result["bleu"]["score"] < 100 and result["bleu"]["signature"].startswith("nrefs:1|")
    assert result["bleu"]["label"] == "sacreBLEU" and result["ter"]["score"] > 0


def test_several_references(capsys, tmp_path: Path) -> None:
    first = write(tmp_path / "a.de", REF)
    second = write(tmp_path / "b.de", ["The cat sat on the mat.", *REF[1:]])
    hyp = write(tmp_path / "hyp.de", ["The cat sat on the mat.", *REF[1:]])
    code, out, _ = nmt(capsys, "score", "--ref", first, "--ref", second, "--hyp", hyp, "--json")
    assert code == 0 and json.loads(out)["bleu"]["score"] == 100.0
    assert "nrefs:2" in json.loads(out)["bleu"]["signature"]


@pytest.mark.parametrize("named", [[], ["--hyp", "-"]], ids=["default", "dash"])
def test_stdin_hypotheses(tmp_path: Path, named: list[str]) -> None:
    ref = write(tmp_path / "ref.de", REF)
    result = subprocess.run(
        [sys.executable, "-m", "nmt_cli", "score", "--ref", str(ref), "--json", *named],
        input="\n".join(REF) + "\n",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["bleu"]["score"] == 100.0


def test_line_count_mismatch_is_one_line_exit_2(tmp_path: Path) -> None:
    ref = write(tmp_path / "ref.de", REF)
    result = subprocess.run(
        [sys.executable, "-m", "nmt_cli", "score", "--ref", str(ref)],
        input="only one line\n",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert "(stdin) have 1 line" in result.stderr and "ref.de has 3 lines" in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--metrics", "bleu,meteor"], "--metrics 'bleu,meteor'"),
        (["--tokenize", "moses"], "--tokenize 'moses'"),
        (["--ref", "missing.de"], "missing.de: no such file"),
    ],
)
def test_bad_input(capsys, tmp_path: Path, args: list[str], message: str) -> None:
    ref = write(tmp_path / "ref.de", REF)
    code, out, err = nmt(capsys, "score", "--ref", ref, "--hyp", ref, *args)
    assert code == 2 and out == "" and err.startswith("nmt: error: ") and err.count("\n") == 1
    assert message in err


class _TokenizerWithoutItsPackage(score.BLEU):
    def __init__(self, *args: object, **kwargs: object) -> None:
        # sacreBLEU's words when MeCab is missing (--tokenize ja-mecab), line breaks included
        raise RuntimeError(
            "\nJapanese tokenization requires extra dependencies, but you do not have them installed."
            "\nPlease install them like so.\n\n    pip install sacrebleu[ja]\n"
        )


def test_a_tokenizer_that_cannot_load_is_one_line(capsys, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(score, "BLEU", _TokenizerWithoutItsPackage)
    ref = write(tmp_path / "ref.de", REF)
    code, out, err = nmt(capsys, "score", "--ref", ref, "--hyp", ref, "--tokenize", "ja-mecab")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith("nmt: error: --tokenize: ") and "pip install sacrebleu[ja]" in err


def test_compound_split_is_labelled_and_splits_like_t2t(capsys, tmp_path: Path) -> None:
    split = score._compound_splitter("moses-de")
    assert split("Ein rich-text-Format, 3-4 Tage.") == (
        "Ein rich ##AT##-##AT## text ##AT##-##AT## Format , 3 ##AT##-##AT## 4 Tage ."
    )
    # perl's s///g and re.sub agree: matches never overlap, so "b" stays joined to "-c".
    assert score._compound_splitter("none")("a-b-c d-e") == "a ##AT##-##AT## b-c d ##AT##-##AT## e"
    ref = write(tmp_path / "ref.de", REF)
    hyp = write(tmp_path / "hyp.de", ["The cat sits on a mat.", "A rich text editor opens.", REF[2]])
    code, out, _ = nmt(
        capsys, "score", "--ref", ref, "--hyp", hyp, "--compound-split", "--metrics", "bleu,chrf"
    )
    paper, chrf = out.splitlines()
    assert code == 0
    assert "[tokenized BLEU, compound-split (comparable to the paper's Table 2): " in paper
    assert "tok:none|smooth:none" in paper and "pretok:moses-de+compound-split" in paper
    assert "[sacreBLEU: " in chrf
    _, plain, _ = nmt(capsys, "score", "--ref", ref, "--hyp", hyp)
    assert plain.split()[2] != paper.split()[2]  # splitting "rich-text" changes the n-grams


# Expected lines are the output of Moses' `tokenizer.perl -l de` (escaping on, no -a; the
# version from before its late-2018 final-period change) piped through get_ende_bleu.sh's
# `perl -ple 's{(\S)-(\S)}{$1 ##AT##-##AT## $2}g'`. sacreBLEU's 13a tokenizer gives something
# else for every case but "rich-text-format" (shown after "13a:").
@pytest.mark.parametrize(
    ("line", "expected"),
    [
        # 13a: "Das kostet z . B . 3 Mio . Euro ." (German abbreviations keep their dot)
        ("Das kostet z.B. 3 Mio. Euro.", "Das kostet z.B. 3 Mio. Euro ."),
        # 13a: "2014 - 2015", which the compound split never sees
        ("Im Zeitraum 2014-2015 stieg er.", "Im Zeitraum 2014 ##AT##-##AT## 2015 stieg er ."),
        # 13a: "Obama's" whole
        ("Obama's Rede war kurz.", "Obama &apos; s Rede war kurz ."),
        # 13a: no escaping
        ('Er sagte: "Kunst & Kultur".', "Er sagte : &quot; Kunst &amp; Kultur &quot; ."),
        (
            "Ein Dokument im rich-text-format.",
            "Ein Dokument im rich ##AT##-##AT## text ##AT##-##AT## format .",
        ),
        # perl splits UTF-8 bytes: a one-letter part that is not ASCII is split off, "b" is not
        (
            "Die Farben ä-ö-ü und a-b-c.",
            "Die Farben ä ##AT##-##AT## ö ##AT##-##AT## ü und a ##AT##-##AT## b-c .",
        ),
        # 13a: "Der 3 . Mai war gut . . . Ende"
        ("Der 3. Mai war gut... Ende", "Der 3. Mai war gut ... Ende"),
        # 13a: "10 ."; tokenizer.perl before its late-2018 change (the one the paper used) keeps
        # a final non-breaking prefix whole, and so does sacremoses
        ("Er trägt die Nummer 10.", "Er trägt die Nummer 10."),
    ],
)
def test_compound_split_tokenizes_like_moses_de(line: str, expected: str) -> None:
    assert score._compound_splitter("moses-de")(line) == expected


def test_compound_split_scores_like_get_ende_bleu(capsys, tmp_path: Path) -> None:
    ref = write(
        tmp_path / "ref.de",
        [
            "Die Kosten stiegen z.B. um 3 Mio. Euro im Zeitraum 2014-2015.",
            'Obama\'s Rede über "Kunst & Kultur" war im rich-text-format.',
            "Zwei Männer spielen Fußball im Park.",
        ],
    )
    hyp = write(
        tmp_path / "hyp.de",
        [
            "Die Kosten stiegen z.B. um 4 Mio. Euro im Jahr 2014-2015.",
            'Obamas Rede über "Kunst & Kultur" war im rich-text format.',
            "Zwei Männer spielen Fußball im Park.",
        ],
    )
    code, out, _ = nmt(capsys, "score", "--ref", ref, "--hyp", hyp, "--compound-split", "--json")
    bleu = json.loads(out)["bleu"]
    # tokenizer.perl -l de | the ##AT## split | multi-bleu.perl on these files prints
    # "BLEU = 68.71, 91.7/81.8/70.0/59.3 (BP=0.920, ratio=0.923, hyp_len=36, ref_len=39)";
    # with sacreBLEU's 13a tokenizer in place of Moses the figure would be 75.95.
    assert code == 0 and round(bleu["score"], 2) == 68.71
    assert "91.7/81.8/70.0/59.3" in bleu["text"] and "hyp_len = 36 ref_len = 39" in bleu["text"]


def test_compound_split_with_tokenize_none_takes_the_text_as_tokenized(capsys, tmp_path: Path) -> None:
    assert score._compound_splitter("none")("  Obama's z.B. 2014-2015.  ") == (
        "Obama's z.B. 2014 ##AT##-##AT## 2015."
    )
    ref = write(tmp_path / "ref.de", ["Obama's Rede , z.B. im rich-text-format ."])
    hyp = write(tmp_path / "hyp.de", ["Obama's Rede , z.B. im rich-text-format ."])
    code, out, _ = nmt(capsys, "score", "--ref", ref, "--hyp", hyp, "--compound-split", "--tokenize", "none")
    assert code == 0 and out.startswith("BLEU = 100.00 ") and "|pretok:none+compound-split]" in out


@pytest.mark.parametrize("tokenize", ["13a", "intl"])
def test_compound_split_refuses_other_tokenizers(capsys, tmp_path: Path, tokenize: str) -> None:
    ref = write(tmp_path / "ref.de", REF)
    code, out, err = nmt(
        capsys, "score", "--ref", ref, "--hyp", ref, "--compound-split", "--tokenize", tokenize
    )
    assert code == 2 and out == "" and err.startswith("nmt: error: ") and err.count("\n") == 1
    assert f"--tokenize {tokenize} does not go with --compound-split" in err and "--tokenize none" in err
