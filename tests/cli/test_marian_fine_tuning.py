"""Fine-tuning an imported multilingual Marian model (source lines led by `>>yy<<`): prepare,
train, average and shortlist keep reading text as MarianTokenizer reads it, the code one piece."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import nmt, refused, sentences, sets
from test_import_marian import marian_dir

from nmt_cli import Translator, checkpoint
from nmt_cli.data import corpus, spm

transformers = pytest.importorskip("transformers")

CODES = (">>yy<<", ">>zz<<")
TWO_UPDATES = sets(
    "train.max_updates=2",
    "train.max_minutes=0",
    "train.precision=fp32",
    "train.save_every_updates=1",
    "train.valid_every_updates=1",
    "train.valid_bleu=false",
)


@dataclass(frozen=True)
class FineTuned:
    folder: Path
    """The Hugging Face model."""
    imported: Path
    text: Path
    """PREFIX of the corpus: PREFIX.xx (led by language codes) and PREFIX.yy."""
    data: Path
    """The corpus prepared with --spm-from the imported model."""
    run: Path
    """Two updates of `nmt train --init-from` the imported model on `data`."""


@pytest.fixture(scope="module")
def fine_tuned(tmp_path_factory: pytest.TempPathFactory) -> FineTuned:
    root = tmp_path_factory.mktemp("marian-fine-tuning")
    folder = marian_dir(root, "swish", False, seed=3, codes=CODES)
    imported = root / "imported.pt"
    assert nmt("-q", "import", folder, "-o", imported) == 0
    text = root / "text" / "train"
    text.parent.mkdir()
    source = [f"{CODES[i % 2]} {line}" for i, line in enumerate(sentences(60, seed=1))]
    target = [line.upper() for line in sentences(60, seed=2)]
    for lang, rows in (("xx", source), ("yy", target)):
        Path(f"{text}.{lang}").write_text("\n".join(rows) + "\n", encoding="utf-8")
    data, run = root / "data", root / "run"
    assert nmt(*_prepare(text, data), "--spm-from", imported) == 0
    train = ["-q", "train", "--data", data, "--out", run, "--init-from", imported, "--device", "cpu"]
    assert nmt(*train, "--threads", "1", *TWO_UPDATES) == 0
    return FineTuned(folder, imported, text, data, run)


def _prepare(text: Path, out: Path) -> list[object]:
    return ["-q", "prepare", "--train", text, "--valid", text, "--src", "xx", "--tgt", "yy", "--out", out]


def _marian_pieces(folder: Path, line: str) -> list[str]:
    """MarianTokenizer's source pieces of `line`, without its </s>."""
    tokenizer = transformers.MarianTokenizer.from_pretrained(folder)
    return list(tokenizer.convert_ids_to_tokens(tokenizer(line)["input_ids"])[:-1])


def _prepared_pieces(data: Path) -> list[list[str]]:
    """The source pieces of each sentence of a prepared corpus's valid split (train's are filtered)."""
    meta = corpus.load_meta(data)
    processor = spm.load_processor(spm.read_models(data, meta)[0])
    valid = corpus.load_split(data, "valid")
    return [[processor.id_to_piece(int(i)) for i in valid.src[k]] for k in range(len(valid))]


def test_a_corpus_prepared_with_a_multilingual_models_vocabulary_reads_its_codes_as_marian(
    fine_tuned: FineTuned, tmp_path: Path
) -> None:
    lines = Path(f"{fine_tuned.text}.xx").read_text(encoding="utf-8").splitlines()
    theirs = [_marian_pieces(fine_tuned.folder, line) for line in lines]
    assert _prepared_pieces(fine_tuned.data) == theirs
    # A corpus prepared with --spm-from that corpus reads them so too, in encoding processes too.
    again = tmp_path / "again"
    assert nmt(*_prepare(fine_tuned.text, again), "--spm-from", fine_tuned.data, "--workers", "2") == 0
    assert _prepared_pieces(again) == theirs


def test_a_fine_tuned_averaged_and_shortlisted_model_reads_codes_as_marian(
    fine_tuned: FineTuned, tmp_path: Path
) -> None:
    checkpoints = fine_tuned.run / "checkpoints"
    imported = checkpoint.load(fine_tuned.imported).tokenizers
    assert imported is not None
    for name in ("checkpoint_1.pt", "checkpoint_2.pt", "checkpoint_last.pt", "checkpoint_best.pt"):
        assert checkpoint.load(checkpoints / name).tokenizers == imported, name
    averaged, listed = tmp_path / "average.pt", tmp_path / "listed.pt"
    assert (
        nmt("-q", "average", checkpoints / "checkpoint_1.pt", checkpoints / "checkpoint_2.pt", "-o", averaged)
        == 0
    )
    shortlist = ["-q", "shortlist", "-m", averaged, "--train", fine_tuned.text, "-o", listed]
    assert nmt(*shortlist, "--candidates", "5", "--frequent", "5") == 0
    line = ">>zz<< apple"
    for model in (averaged, listed):
        translator = Translator.load(model, device="cpu", precision="fp32", threads=1)
        ours = [translator.src_spm.id_to_piece(i) for i in translator.src_spm.encode(line)]
        assert ours == _marian_pieces(fine_tuned.folder, line), model


def test_checkpoints_that_read_text_differently_are_not_averaged(
    fine_tuned: FineTuned, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    older = checkpoint.load(fine_tuned.imported)  # as written before checkpoints recorded tokenizers
    older.tokenizers = None
    checkpoint.save(older, tmp_path / "older.pt")
    line = refused(capsys, "average", fine_tuned.imported, tmp_path / "older.pt", "-o", tmp_path / "avg.pt")
    assert "read text differently" in line, line
    assert not (tmp_path / "avg.pt").exists()


def _without_tokenizers(data: Path, copy: Path) -> Path:
    """`data` as `nmt prepare --spm-from` wrote it before corpora recorded their tokenizers."""
    shutil.copytree(data, copy)
    meta = json.loads((copy / corpus.META).read_text(encoding="utf-8"))
    meta["options"].pop("tokenizers", None)
    (copy / corpus.META).write_text(json.dumps(meta), encoding="utf-8")
    return copy


def test_data_that_reads_codes_otherwise_is_refused_for_the_model(
    fine_tuned: FineTuned, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    older = _without_tokenizers(fine_tuned.data, tmp_path / "older")
    start = ["train", "--data", older, "--out", tmp_path / "new", "--init-from", fine_tuned.imported]
    line = refused(capsys, *start, "--device", "cpu", *TWO_UPDATES)
    assert "--init-from" in line and f"nmt prepare --spm-from {fine_tuned.imported}" in line, line
    assert not (tmp_path / "new").exists()
    run = tmp_path / "run"
    shutil.copytree(fine_tuned.run, run)
    line = refused(capsys, "train", "--data", older, "--out", run, "--device", "cpu", *TWO_UPDATES)
    assert "cannot resume" in line and "language codes" in line, line
