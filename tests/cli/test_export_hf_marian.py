"""`nmt export --format hf-marian`: a directory transformers' own MarianMTModel and MarianTokenizer
load and decode as nmt does, which `nmt import` reads back into the same weights."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from helpers import Corpus, TrainedRun, nmt, prepare_args, refused, sentences, train_args, write_split
from test_import_marian import marian_dir

from nmt_cli import Translator, checkpoint
from nmt_cli.commands import export
from nmt_cli.data import spm

transformers = pytest.importorskip("transformers")
safetensors_torch = pytest.importorskip("safetensors.torch")


def export_hf(model: Path, out: Path) -> None:
    """The export, through the function the CLI calls."""
    export.run(model, "hf-marian", out, quantization="none", force=False, quiet=True)


def generate(folder: Path, lines: list[str], **settings: object) -> list[str]:
    """transformers' own translations of `lines`, one at a time (no padding), with the search of
    generation_config.json unless `settings` say otherwise."""
    tokenizer = transformers.MarianTokenizer.from_pretrained(folder)
    model = transformers.MarianMTModel.from_pretrained(folder).eval()
    out = []
    for line in lines:
        with torch.inference_mode():
            ids = model.generate(**tokenizer([line], return_tensors="pt"), **settings)
        out.append(tokenizer.decode(ids[0], skip_special_tokens=True))
    return out


def identical(ours: list[str], theirs: list[str]) -> int:
    return sum(a == b for a, b in zip(ours, theirs, strict=True))


def into_capitals(corpus: Corpus, root: Path) -> Path:
    """The copy task into capitals, prepared with a vocabulary per side (under `root`)."""
    raw, data = root / "raw", root / "data"
    raw.mkdir()
    for name in ("train", "valid"):
        lines = (corpus.raw / f"{name}.src").read_text(encoding="utf-8").splitlines()
        write_split(raw / name, lines, [line.upper() for line in lines])
    assert nmt(*prepare_args(data, raw / "train", valid=raw / "valid"), "--no-joint") == 0
    return data


@pytest.fixture(scope="module")
def separate(corpus: Corpus, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The copy task into capitals, with a vocabulary per side, trained with fairseq's length
    penalty (the one transformers has) as its recipe's: generate then searches with the model's own
    settings."""
    root = tmp_path_factory.mktemp("separate")
    data, run = into_capitals(corpus, root), root / "run"
    overrides = ("model.dropout=0.0", "train.max_updates=1200", "decode.beam=4")
    assert nmt(*train_args(data, run, *overrides, 'decode.lenpen_style="fairseq"', "decode.lenpen=1.0")) == 0
    return run / "checkpoints" / "checkpoint_last.pt"


@pytest.mark.slow  # two exports decoded by transformers, 100 lines greedy and beam 4 each: about 40 s
@pytest.mark.parametrize("vocabulary", ["joint", "separate"])
def test_transformers_translates_the_export_as_nmt_does(
    vocabulary: str, trained: TrainedRun, separate: Path, corpus: Corpus, tmp_path: Path
) -> None:
    model = trained.checkpoint if vocabulary == "joint" else separate
    out = tmp_path / "hf"
    export_hf(model, out)
    assert (out / "target_vocab.json").exists() == (vocabulary == "separate")
    lines = corpus.test_src  # 100 lines
    translator = Translator.load(model, device="cpu", precision="fp32", threads=1)
    # The joint model's recipe has GNMT's length penalty, which generate cannot express: nmt is
    # asked for the |Y|^alpha that the export writes. The separate one's recipe has it already.
    style = {"lenpen_style": "fairseq"} if vocabulary == "joint" else {}
    greedy = identical(translator.translate(lines, beam=1), generate(out, lines, num_beams=1))
    beam = identical(translator.translate(lines, **style), generate(out, lines))
    print(f"{vocabulary}: greedy {greedy}/100, beam 4 {beam}/100 identical")
    assert greedy >= 98 and beam == 100


def test_the_export_holds_the_models_settings(trained: TrainedRun, tmp_path: Path) -> None:
    out = tmp_path / "hf"
    export_hf(trained.checkpoint, out)
    config = transformers.AutoConfig.from_pretrained(out)
    assert config.model_type == "marian" and config.share_encoder_decoder_embeddings
    assert (config.decoder_start_token_id, config.pad_token_id, config.eos_token_id) == (2, 0, 3)
    generation = transformers.GenerationConfig.from_pretrained(out)
    # The recipe: beam 4, alpha 0.6, max_len_a 1 and b 50 within 64 positions, min_len 1.
    assert (generation.num_beams, generation.length_penalty, generation.early_stopping) == (4, 0.6, True)
    assert (generation.max_length, generation.min_length, generation.forced_eos_token_id) == (65, 2, 3)
    assert (
        sorted((out / "vocab.json").read_text(encoding="utf-8")) and not (out / "target_vocab.json").exists()
    )
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [
            "config.json",
            "generation_config.json",
            "model.safetensors",
            "source.spm",
            "target.spm",
            "tokenizer_config.json",
            "vocab.json",
        ]
    )


def test_through_the_command_line(trained: TrainedRun, tmp_path: Path) -> None:
    out = tmp_path / "hf"
    assert nmt("-q", "export", "-m", trained.checkpoint, "--format", "hf-marian", "-o", out) == 0
    assert (out / "model.safetensors").is_file()
    # --force replaces an earlier export of this kind, and only that.
    assert nmt("-q", "export", "-m", trained.checkpoint, "--format", "hf-marian", "-o", out, "--force") == 0
    (out / "notes.txt").write_text("mine\n", encoding="utf-8")
    assert nmt("-q", "export", "-m", trained.checkpoint, "--format", "hf-marian", "-o", out, "--force") == 2
    assert (out / "notes.txt").is_file()


@pytest.fixture(scope="module")
def separate_untied(corpus: Corpus, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model with a vocabulary per side, its own output projection and </s> as its decoder
    start, trained one update: any weights serve a round trip."""
    root = tmp_path_factory.mktemp("separate_untied")
    data, run = into_capitals(corpus, root), root / "run"
    overrides = ("model.share_embeddings=false", 'model.decoder_start="eos"', "train.max_updates=1")
    assert nmt(*train_args(data, run, *overrides)) == 0
    return run / "checkpoints" / "checkpoint_last.pt"


@pytest.mark.parametrize("vocabulary", ["joint", "separate"])
def test_an_export_imports_back_to_the_same_weights(
    vocabulary: str, trained: TrainedRun, separate_untied: Path, tmp_path: Path
) -> None:
    model = trained.checkpoint if vocabulary == "joint" else separate_untied
    out, back = tmp_path / "hf", tmp_path / "back.pt"
    export_hf(model, out)
    assert (out / "target_vocab.json").exists() == (vocabulary == "separate")
    assert json.loads((out / "config.json").read_text(encoding="utf-8"))["nmt_export"] == {
        "position_layout": "interleaved",
        "output_bias": False,
    }
    assert nmt("-q", "import", out, "-o", back) == 0
    original, imported = checkpoint.load(model), checkpoint.load(back)
    # The import orders the positions back to nmt's layout and leaves out the bias the export added.
    assert imported.model.keys() == original.model.keys()
    for name, tensor in original.model.items():
        assert imported.model[name].dtype == tensor.dtype and torch.equal(imported.model[name], tensor), name
    ours, theirs = imported.run_config(back).model, original.run_config(model).model
    assert ours == theirs
    # The sentencepiece models are rewritten on the way (their trainer settings name the pieces
    # of the id table): the same pieces, ids and segmentation.
    lines = sentences(20, seed=4)
    for side in ("src", "tgt"):
        before, after = (spm.load_processor(c.spm[side]) for c in (original, imported))
        assert [after.id_to_piece(i) for i in range(after.get_piece_size())] == [
            before.id_to_piece(i) for i in range(before.get_piece_size())
        ]
        assert [after.encode(line) for line in lines] == [before.encode(line) for line in lines]


def test_transformers_loads_the_export_record_without_a_warning(
    trained: TrainedRun, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    out = tmp_path / "hf"
    export_hf(trained.checkpoint, out)
    with caplog.at_level("WARNING"):
        config = transformers.MarianConfig.from_pretrained(out)
        transformers.MarianMTModel.from_pretrained(out)
    assert config.nmt_export == {"position_layout": "interleaved", "output_bias": False}
    assert not [r for r in caplog.records if r.levelname in ("WARNING", "ERROR")], caplog.text


def imported_and_exported_back(tmp_path: Path, separate_vocabs: bool) -> tuple[Path, Path, dict, dict]:
    """A tiny Hugging Face Marian model imported by nmt and exported again: its folder, the
    export's, and the weights of each (theirs, ours)."""
    folder = marian_dir(tmp_path, "gelu" if separate_vocabs else "swish", separate_vocabs, seed=3)
    imported, out = tmp_path / "imported.pt", tmp_path / "hf"
    assert nmt("-q", "import", folder, "-o", imported) == 0
    export_hf(imported, out)
    theirs = safetensors_torch.load_file(str(folder / "model.safetensors"))
    return folder, out, theirs, safetensors_torch.load_file(str(out / "model.safetensors"))


@pytest.mark.parametrize("separate_vocabs", [False, True], ids=["joint", "separate"])
def test_an_imported_marian_model_exports_back_to_its_tensors(separate_vocabs: bool, tmp_path: Path) -> None:
    folder, out, theirs, ours = imported_and_exported_back(tmp_path, separate_vocabs)

    def ids(name: str) -> dict[str, int]:
        return json.loads((folder / name).read_text(encoding="utf-8"))

    def exported_ids(name: str) -> dict[str, int]:
        return json.loads((out / name).read_text(encoding="utf-8"))

    # nmt numbers the pieces its own way (<pad> <unk> <s> </s> first): rows compare piece by piece.
    src_name, tgt_name = ("vocab.json", "target_vocab.json") if separate_vocabs else ("vocab.json",) * 2
    sides = {
        "source": (ids(src_name), exported_ids(src_name)),
        "target": (ids(tgt_name), exported_ids(tgt_name)),
    }
    by_piece = {
        "model.shared.weight": "source",
        "model.encoder.embed_tokens.weight": "source",
        "model.decoder.embed_tokens.weight": "target",
        "lm_head.weight": "target",
    }
    for name, tensor in ours.items():
        if name == "final_logits_bias":
            old, new = sides["target"]
            assert all(torch.equal(tensor[0, new[p]], theirs[name][0, i]) for p, i in old.items())
        elif name in by_piece:
            old, new = sides[by_piece[name]]
            assert all(torch.equal(tensor[new[p]], theirs[name][i]) for p, i in old.items()), name
        else:
            assert torch.equal(tensor, theirs[name]), name
    lines = sentences(40, seed=9)
    pad = transformers.AutoConfig.from_pretrained(folder).pad_token_id
    # The original's generation_config aside, with nmt's rule of at least one piece (min_len 1).
    same = {"num_beams": 1, "max_new_tokens": 24, "min_new_tokens": 1, "forced_eos_token_id": None}
    assert generate(out, lines, **same) == generate(folder, lines, **same, bad_words_ids=[[pad]])


@pytest.mark.parametrize("separate_vocabs", [False, True], ids=["joint", "separate"])
def test_an_imported_marian_model_exports_back_to_the_same_tensors(
    separate_vocabs: bool, tmp_path: Path
) -> None:
    folder, out, theirs, ours = imported_and_exported_back(tmp_path, separate_vocabs)
    # The import records the files' row order, the export restores it: the same tensors, the
    # same id tables and the same special ids (nmt's own <s> and rows it added are left out again).
    assert ours.keys() == theirs.keys()
    for name, tensor in theirs.items():
        assert ours[name].dtype == tensor.dtype and torch.equal(ours[name], tensor), name
    for name in ("vocab.json", "target_vocab.json") if separate_vocabs else ("vocab.json",):
        assert json.loads((out / name).read_text(encoding="utf-8")) == json.loads(
            (folder / name).read_text(encoding="utf-8")
        )
    config, original = (transformers.AutoConfig.from_pretrained(f) for f in (out, folder))
    for key in ("pad_token_id", "eos_token_id", "decoder_start_token_id", "vocab_size", "decoder_vocab_size"):
        assert getattr(config, key) == getattr(original, key), key


@pytest.mark.parametrize(
    ("variant", "words"),
    [
        ('model.norm="pre"', 'model.norm = "pre"'),
        ("model.residual_attention=true", "model.residual_attention = true"),
        ("model.attention_window=2", "model.attention_window = 2"),
        ('model.positions="learned"', 'model.positions = "learned"'),
    ],
)
def test_what_marian_cannot_hold_is_refused_in_one_line(
    variant: str, words: str, corpus: Corpus, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    assert nmt(*train_args(corpus.data, run, variant, "train.max_updates=1")) == 0
    model = run / "checkpoints" / "checkpoint_last.pt"
    message = refused(capsys, "export", "-m", model, "--format", "hf-marian", "-o", tmp_path / "hf")
    assert words in message and "Hugging Face Marian" in message
    assert not (tmp_path / "hf").exists()


def test_a_shortlist_and_a_quantization_are_refused(
    listed: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "hf"
    assert "shortlist" in refused(capsys, "export", "-m", listed, "--format", "hf-marian", "-o", out)
    message = refused(
        capsys, "export", "-m", listed, "--format", "hf-marian", "--quantization", "int8", "-o", out
    )
    assert "--quantization int8" in message
    assert not out.exists()
