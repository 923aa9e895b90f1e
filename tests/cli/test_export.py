"""`nmt export --format ctranslate2`: CTranslate2 decodes the exported model as nmt does.

Round trips compare token for token at beam 1 in float32: the trained copy model through the
command and its sentencepiece model, and randomly perturbed models of every variant the spec
can express (post/pre-norm, sinusoidal/learned positions, tied/separate embeddings) through the
library, so that every weight, bias and norm lands in its place. Variants CTranslate2 cannot
represent are refused in one line.
"""

from __future__ import annotations

import builtins
import json
import os
from pathlib import Path

import ctranslate2
import numpy as np
import pytest
import sentencepiece
import torch
from helpers import TrainedRun, nmt, refused, sentences, tiny_model

from nmt_cli import Translator, checkpoint
from nmt_cli.commands.export import QUANTIZATIONS, write_model
from nmt_cli.config import DecodeConfig
from nmt_cli.data.batching import collate
from nmt_cli.decoding.ensemble import Ensemble
from nmt_cli.decoding.search import greedy_search
from nmt_cli.decoding.settings import DecodeSettings
from nmt_cli.errors import Terminated
from nmt_cli.exporting.ctranslate2 import SPECIAL_PIECES, transformer_spec


def ct2_translate(model_dir: Path, lines: list[str], compute_type: str = "float32") -> list[str]:
    processor = sentencepiece.SentencePieceProcessor(model_file=str(model_dir / "spm.model"))
    translator = ctranslate2.Translator(str(model_dir), device="cpu", compute_type=compute_type)
    results = translator.translate_batch(
        [processor.encode(line, out_type=str) for line in lines], beam_size=1, max_decoding_length=64
    )
    return [processor.decode(r.hypotheses[0]) for r in results]


def test_exported_model_translates_like_nmt(trained: TrainedRun, tmp_path: Path) -> None:
    out = tmp_path / "ct2"
    assert nmt("-q", "export", "-m", trained.checkpoint, "-o", out) == 0
    assert {"model.bin", "config.json", "spm.model"} <= {p.name for p in out.iterdir()}
    assert json.loads((out / "config.json").read_text())["add_source_eos"] is True
    lines = sentences(60, seed=11)
    ours = Translator.load(trained.checkpoint, device="cpu").translate(lines, beam=1)
    assert ct2_translate(out, lines) == ours
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging left


def test_int8_export_loads_and_mostly_agrees(trained: TrainedRun, tmp_path: Path) -> None:
    out = tmp_path / "ct2-int8"
    assert nmt("-q", "export", "-m", trained.checkpoint, "-o", out, "--quantization", "int8") == 0
    lines = sentences(60, seed=12)
    ours = Translator.load(trained.checkpoint, device="cpu").translate(lines, beam=1)
    theirs = ct2_translate(out, lines, compute_type="int8")
    assert sum(a == b for a, b in zip(ours, theirs, strict=True)) >= 0.8 * len(lines)


@pytest.mark.parametrize(
    "variant",
    [
        {},
        {"norm": "pre"},
        {"positions": "learned"},
        {"share_embeddings": False, "joint_vocab": False},
        {"norm": "pre", "positions": "learned", "share_embeddings": False},
    ],
    ids=["paper", "pre-norm", "learned-positions", "separate-embeddings", "all"],
)
def test_every_weight_lands_in_its_place(variant: dict, tmp_path: Path) -> None:
    model = tiny_model(vocab=48, seed=3, **variant)
    with torch.no_grad():  # no zero biases or unit norms that a misplaced weight could hide behind
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.2)
    pieces = [*SPECIAL_PIECES, *(f"w{i}" for i in range(44))]
    write_model(transformer_spec(model, (pieces, pieces)), tmp_path / "m", "none")

    rng = np.random.default_rng(0)
    sources = [rng.integers(4, 48, size=int(rng.integers(1, 12))) for _ in range(24)]
    cfg = DecodeConfig(beam=1, max_len_a=0.0, max_len_b=20, min_len=0)
    ours = [
        h[0].tokens for h in greedy_search(Ensemble([model]), collate(sources)["src"], DecodeSettings(cfg))
    ]
    translator = ctranslate2.Translator(str(tmp_path / "m"), device="cpu", compute_type="float32")
    # nmt never emits <pad> or <s>; CTranslate2 is told the same (a random model may prefer them).
    results = translator.translate_batch(
        [[pieces[i] for i in s] for s in sources],
        beam_size=1,
        max_decoding_length=20,
        suppress_sequences=[["<pad>"], ["<s>"]],
    )
    theirs = [[pieces.index(p) for p in r.hypotheses[0]] for r in results]
    assert theirs == ours


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [
        ("residual_attention", True, "model.residual_attention"),
        ("attention_window", 3, "model.attention_window"),
    ],
)
def test_variants_ctranslate2_cannot_express_are_refused(
    trained: TrainedRun,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    key: str,
    value: object,
    words: str,
) -> None:
    ckpt = checkpoint.load(trained.checkpoint)
    ckpt.config["model"][key] = value  # neither setting changes the weights
    changed = tmp_path / "changed.pt"
    checkpoint.save(ckpt, changed)
    capsys.readouterr()
    assert nmt("-q", "export", "-m", changed, "-o", tmp_path / "out") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and words in err and "CTranslate2" in err
    assert not (tmp_path / "out").exists()


def test_force_replaces_an_earlier_export_and_nothing_else(
    trained: TrainedRun, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "ct2"
    assert nmt("-q", "export", "-m", trained.checkpoint, "-o", out) == 0
    assert nmt("-q", "export", "-m", trained.checkpoint, "-o", out) == 2  # exists: --force needed
    (out / "model.bin").write_bytes(b"old")
    assert nmt("-q", "export", "-m", trained.checkpoint, "-o", out, "--force") == 0
    assert (out / "model.bin").stat().st_size > 3  # replaced by the new export
    # Not exports: a directory of one's own, the working directory's parent, the checkpoint itself.
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    (mine / "model.bin").write_text("keep")
    work = tmp_path / "a" / "b"
    work.mkdir(parents=True)
    model = tmp_path / "a" / "model.pt"
    model.write_bytes(trained.checkpoint.read_bytes())
    monkeypatch.chdir(work)
    before = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    for target in (mine, Path(".."), Path("../model.pt"), Path(".")):
        assert nmt("-q", "export", "-m", "../model.pt", "-o", target, "--force") == 2, target
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == before
    assert (
        mine / "notes.txt"
    ).read_text() == "keep" and model.read_bytes() == trained.checkpoint.read_bytes()


def test_force_never_deletes_a_directory_named_like_an_export_file(
    trained: TrainedRun, tmp_path: Path
) -> None:
    out = tmp_path / "ct2"
    assert nmt("-q", "export", "-m", trained.checkpoint, "-o", out) == 0
    (out / "vmap.txt").mkdir()
    (out / "vmap.txt" / "thesis.tex").write_text("years of work")
    assert nmt("-q", "export", "-m", trained.checkpoint, "-o", out, "--force") == 2
    assert (out / "vmap.txt" / "thesis.tex").read_text() == "years of work"


def test_library_refuses_unequal_head_widths(tmp_path: Path) -> None:
    model = tiny_model(d_k=8, d_v=4)
    with pytest.raises(ValueError, match="model.d_k"):
        transformer_spec(model, (list(SPECIAL_PIECES),) * 2)


def test_the_exported_limits_let_ctranslate2_take_a_source_longer_than_the_model(
    trained: TrainedRun, tmp_path: Path
) -> None:
    # The tiny model holds 64 positions; CTranslate2 fails a whole batch on a longer source
    # unless it is told the limits, which the export writes beside the model.
    out = tmp_path / "ct2"
    assert nmt("-q", "export", "-m", trained.checkpoint, "-o", out) == 0
    limits = json.loads((out / "nmt.json").read_text())["translate_batch"]
    # 63 pieces and EOS fill the 64 positions; max_decoding_length counts the pieces.
    assert limits == {"max_input_length": 64, "max_decoding_length": 63, "min_decoding_length": 1}
    processor = sentencepiece.SentencePieceProcessor(model_file=str(out / "spm.model"))
    translator = ctranslate2.Translator(str(out), device="cpu", compute_type="float32")
    sources = [processor.encode(text, out_type=str) for text in ("apple river", " ".join(["stone"] * 100))]
    results = translator.translate_batch(sources, beam_size=2, **limits)
    assert processor.decode(results[0].hypotheses[0]) == "apple river"
    assert 0 < len(results[1].hypotheses[0]) <= 64


FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.fixture(scope="module")
def fairseq_import(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fairseq fixture imported: nmt stops its translations at 200 pieces, fairseq's limit."""
    out = tmp_path_factory.mktemp("export") / "fairseq.pt"
    assert nmt("-q", "import", FIXTURES / "fairseq-multi30k-tiny" / "checkpoint.pt", "-o", out) == 0
    return out


def test_with_the_exported_limits_ctranslate2_stops_where_nmt_stops(
    fairseq_import: Path, tmp_path: Path
) -> None:
    out = tmp_path / "ct2"
    assert nmt("-q", "export", "-m", fairseq_import, "-o", out) == 0
    limits = json.loads((out / "nmt.json").read_text())["translate_batch"]
    processor = sentencepiece.SentencePieceProcessor(model_file=str(out / "spm.model"))
    translator = ctranslate2.Translator(str(out), device="cpu", compute_type="float32")
    lines = ["the " * 300, "A dog runs on the grass.", "a dog a dog a dog " * 40]
    results = translator.translate_batch(
        [processor.encode(x, out_type=str) for x in lines], beam_size=1, **limits
    )
    ours = Translator.load(fairseq_import, device="cpu", precision="fp32", threads=1).translate(lines, beam=1)
    assert len(results[0].hypotheses[0]) == 200  # the first line runs to nmt's limit
    assert [processor.decode(r.hypotheses[0]) for r in results] == ours


def test_a_moses_bpe_export_is_replaced_with_force(tmp_path: Path) -> None:
    imported = tmp_path / "moses.pt"
    assert nmt("-q", "import", FIXTURES / "fairseq-moses-tiny" / "checkpoint.pt", "-o", imported) == 0
    out = tmp_path / "ct2"
    assert nmt("-q", "export", "-m", imported, "-o", out) == 0
    (out / "model.bin").write_bytes(b"old")
    assert nmt("-q", "export", "-m", imported, "-o", out, "--force") == 0
    assert (out / "model.bin").stat().st_size > 3 and (out / "bpecodes").is_file()


def test_a_model_that_is_not_a_regular_file_is_named_as_such(
    trained: TrainedRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fifo = tmp_path / "fifo.pt"
    os.mkfifo(fifo)
    for model in (Path("/dev/null"), fifo):  # neither is a directory, and the FIFO is never opened
        line = refused(capsys, "export", "-m", model, "-o", tmp_path / "out")
        assert "not a regular file" in line and "directory" not in line, line


def test_an_output_that_cannot_be_a_directory_is_named_as_such_with_or_without_force(
    trained: TrainedRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    regular = tmp_path / "notes.txt"
    regular.write_text("keep")
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    cases = [(regular, "is a file, not a directory"), (Path("/dev/stdout"), "not a directory"),
             (Path("/dev/null"), "not a directory"), (loop, "a loop")]  # fmt: skip
    for output, words in cases:
        for force in ([], ["--force"]):
            line = refused(capsys, "export", "-m", trained.checkpoint, "-o", output, *force)
            assert words in line and "--force" not in line, line
    assert regular.read_text() == "keep" and loop.is_symlink()


def test_an_output_the_system_refuses_is_one_line_naming_it(
    trained: TrainedRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    long = tmp_path / ("a" * 256)  # one name longer than any file system takes
    for output in (long, long / "ct2"):
        line = refused(capsys, "export", "-m", trained.checkpoint, "-o", output)
        assert line.startswith(f"nmt: error: --output {output}:") and "too long" in line, line
    notes = tmp_path / "notes.txt"
    notes.write_text("keep")
    line = refused(capsys, "export", "-m", trained.checkpoint, "-o", notes / "ct2")
    assert f"{notes} is a file, not a directory" in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


@pytest.mark.parametrize(("stop", "code"), [(KeyboardInterrupt, 130), (Terminated, 143)])
def test_a_stop_while_ctranslate2_loads_is_a_stop_not_a_missing_package(
    trained: TrainedRun,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    stop: type[BaseException],
    code: int,
) -> None:
    # A compiled extension's module init turns the signal's exception into ImportError (pybind11:
    # "initialization failed"), as Ctrl-C at the wrong moment did here.
    real_import = builtins.__import__

    def interrupted(name: str, *args: object, **kwargs: object) -> object:
        if name == "ctranslate2":
            try:
                raise stop
            except BaseException as err:  # noqa: BLE001 - the wrapping under test
                raise ImportError("initialization failed") from err
        return real_import(name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(builtins, "__import__", interrupted)
    capsys.readouterr()
    assert nmt("export", "-m", trained.checkpoint, "-o", tmp_path / "ct2") == code
    err = capsys.readouterr().err
    assert "pip install" not in err and len(err.strip().splitlines()) == 1, err
    assert not list(tmp_path.iterdir())


def test_every_quantization_offered_is_listed_and_loads_in_ctranslate2(
    trained: TrainedRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    assert nmt("export", "--help") == 0
    shown = " ".join(capsys.readouterr().out.split())
    for quantization in QUANTIZATIONS:
        assert quantization in shown, quantization
        out = tmp_path / quantization
        assert nmt("-q", "export", "-m", trained.checkpoint, "-o", out, "--quantization", quantization) == 0
        # Whatever the weights, CTranslate2 on a CPU loads them (converted to a type it computes in).
        translation = ct2_translate(out, ["apple river"], compute_type="auto")
        assert translation == ["apple river"], (quantization, translation)


@pytest.mark.parametrize(("quantization", "said"), [("none", "float32"), ("int8", "int8")])
def test_the_closing_line_names_the_weights_written(
    trained: TrainedRun, tmp_path: Path, capsys: pytest.CaptureFixture[str], quantization: str, said: str
) -> None:
    capsys.readouterr()
    out = tmp_path / "ct2"
    assert nmt("export", "-m", trained.checkpoint, "-o", out, "--quantization", quantization) == 0
    assert f"(CTranslate2, weights {said})" in capsys.readouterr().err
