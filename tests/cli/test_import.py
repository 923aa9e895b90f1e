"""`nmt import`: a fairseq Transformer reproduces fairseq's own translations, and the imported
checkpoint is an ordinary one (exported, fine-tuned); foreign files are refused in one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from helpers import exported_to_ctranslate2, nmt, refused, sets

from nmt_cli import Translator, checkpoint
from nmt_cli.data import corpus
from nmt_cli.data.batching import collate
from nmt_cli.model import Transformer
from nmt_cli.training.loss import label_smoothed_nll

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
FAIRSEQ = FIXTURES / "fairseq-multi30k-tiny"
MOSES = FIXTURES / "fairseq-moses-tiny"


def lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("import") / "fairseq.pt"
    assert nmt("-q", "import", FAIRSEQ / "checkpoint.pt", "-o", out) == 0
    return out


@pytest.fixture(scope="module")
def translator(imported: Path) -> Translator:
    return Translator.load(imported, device="cpu", precision="fp32", threads=1)


def agreement(ours: list[str], theirs: list[str]) -> float:
    assert len(ours) == len(theirs)
    return sum(a == b for a, b in zip(ours, theirs, strict=True)) / len(theirs)


def test_fairseq_greedy_output_is_fairseqs_on_every_line(translator: Translator) -> None:
    ours = translator.translate(lines(FAIRSEQ / "input.en"), beam=1)
    assert agreement(ours, lines(FAIRSEQ / "fairseq.beam1.de")) == 1.0


def test_fairseq_beam_output_is_fairseqs(translator: Translator) -> None:
    # fairseq-interactive --beam 4 --lenpen 1.0: the import's decode defaults score as it does.
    ours = translator.translate(lines(FAIRSEQ / "input.en"), beam=4)
    assert agreement(ours, lines(FAIRSEQ / "fairseq.beam4.de")) >= 0.98


@pytest.mark.parametrize("precision", ["bf16", "int8"])
def test_an_import_decodes_at_every_cpu_precision(imported: Path, precision: str) -> None:
    # A model this small drifts at beam 4 in reduced precision, but most lines stay fairseq's.
    translator = Translator.load(imported, device="cpu", precision=precision, threads=1)
    ours = translator.translate(lines(FAIRSEQ / "input.en")[:100], beam=4)
    assert agreement(ours, lines(FAIRSEQ / "fairseq.beam4.de")[:100]) >= 0.6


def test_the_checkpoint_records_its_origin_and_fairseqs_decoding(imported: Path) -> None:
    ckpt = checkpoint.load(imported)
    assert ckpt.kind == "import" and ckpt.languages == ("en", "de")
    assert ckpt.imported_from is not None and ckpt.imported_from["toolkit"] == "fairseq"
    cfg = ckpt.run_config(imported)
    assert (cfg.model.decoder_start, cfg.model.positions) == ("eos", "sinusoidal-fairseq")
    assert (cfg.decode.beam, cfg.decode.lenpen_style, cfg.decode.max_len_b) == (5, "fairseq", 200)


def test_the_cli_translates_an_import_with_its_defaults(imported: Path, tmp_path: Path) -> None:
    source = tmp_path / "in.en"
    source.write_text("\n".join(lines(FAIRSEQ / "input.en")[:30]) + "\n", encoding="utf-8")
    out = tmp_path / "out.de"
    options = ("--beam", "4", "--workers", "1", "--precision", "fp32")
    assert nmt("-q", "translate", "-m", imported, "-i", source, "-o", out, *options) == 0
    assert agreement(lines(out), lines(FAIRSEQ / "fairseq.beam4.de")[:30]) >= 0.95


def test_an_import_exports_to_ctranslate2_and_decodes_the_same(
    imported: Path, translator: Translator, tmp_path: Path
) -> None:
    import sentencepiece

    out = tmp_path / "ct2"
    engine = exported_to_ctranslate2(imported, out)
    assert json.loads((out / "config.json").read_text())["decoder_start_token"] == "</s>"
    processor = sentencepiece.SentencePieceProcessor(model_file=str(out / "spm.model"))
    source = lines(FAIRSEQ / "input.en")[:100]
    results = engine.translate_batch(
        [processor.encode(line, out_type=str) for line in source], beam_size=1, max_decoding_length=200
    )
    theirs = [processor.decode(r.hypotheses[0]) for r in results]
    assert theirs == translator.translate(source, beam=1)


def test_an_import_fine_tunes_from_its_own_loss(imported: Path, tmp_path: Path) -> None:
    text = tmp_path / "text"
    text.mkdir()
    source, target = lines(FAIRSEQ / "input.en"), lines(FAIRSEQ / "fairseq.beam4.de")
    for split, rows in (("train", slice(0, 160)), ("valid", slice(160, 200))):
        (text / f"{split}.en").write_text("\n".join(source[rows]) + "\n", encoding="utf-8")
        (text / f"{split}.de").write_text("\n".join(target[rows]) + "\n", encoding="utf-8")
    data, run = tmp_path / "data", tmp_path / "run"
    prepare = ["-q", "prepare", "--train", text / "train", "--valid", text / "valid"]
    assert nmt(*prepare, "--src", "en", "--tgt", "de", "--out", data, "--spm-from", imported) == 0
    overrides = sets(
        "train.max_updates=1",
        "train.max_minutes=0",
        "train.max_tokens=100000",  # every pair in the first batch
        "train.precision=fp32",
        "train.log_every_updates=1",
        "model.dropout=0.0",
    )
    assert nmt("-q", "train", "--data", data, "--out", run, "--init-from", imported, *overrides) == 0
    logged = next(
        json.loads(row) for row in (run / "metrics.jsonl").read_text().splitlines() if '"train"' in row
    )

    ckpt = checkpoint.load(imported)
    cfg = ckpt.run_config(imported)
    model = Transformer(cfg.model)
    model.load_state_dict(ckpt.model)
    model.eval()
    train = corpus.load_split(data, "train")
    pairs = range(len(train))
    batch = collate([train.src[i] for i in pairs], [train.tgt[i] for i in pairs], cfg.model.start_id)
    with torch.inference_mode():
        logits = model(batch["src"], batch["tgt_in"])
        loss, _ = label_smoothed_nll(logits, batch["tgt_out"], cfg.train.label_smoothing)
    tokens = int((batch["tgt_out"] != 0).sum())
    assert logged["update"] == 1
    assert logged["loss"] == pytest.approx(float(loss) / tokens, rel=1e-4)
    # fairseq's own translations, scored by the model that made them: a low loss, of which the
    # rows fairseq cannot produce (kept for sentencepiece's merges) take a small part.
    assert logged["nll_loss"] < 1.5 and logged["loss"] < logged["nll_loss"] + 1.5


@pytest.fixture(scope="module")
def moses(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fairseq model tokenized with Moses and subword-nmt BPE, as the WMT models are."""
    out = tmp_path_factory.mktemp("import") / "moses.pt"
    assert nmt("-q", "import", MOSES / "checkpoint.pt", "-o", out) == 0
    return out


@pytest.mark.parametrize("beam, share", [(1, 1.0), (4, 0.98)])
def test_a_moses_bpe_fairseq_model_translates_as_fairseq(moses: Path, beam: int, share: float) -> None:
    translator = Translator.load(moses, device="cpu", precision="fp32", threads=1)
    ours = translator.translate(lines(MOSES / "input.en"), beam=beam)
    assert agreement(ours, lines(MOSES / f"fairseq.beam{beam}.de")) >= share


def test_a_moses_bpe_model_exports_and_fine_tunes(moses: Path, tmp_path: Path) -> None:
    out = tmp_path / "ct2"
    engine = exported_to_ctranslate2(moses, out)
    translator = Translator.load(moses, device="cpu", precision="fp32", threads=1)
    assert (out / "bpecodes").read_text(encoding="utf-8") == (MOSES / "bpecodes").read_text(encoding="utf-8")
    source = lines(MOSES / "input.en")[:60]
    tokenized = [
        [translator.src_spm.id_to_piece(i) for i in translator.src_spm.encode(line)] for line in source
    ]
    results = engine.translate_batch(tokenized, beam_size=1, max_decoding_length=200)
    tgt = translator.tgt_spm
    theirs = [tgt.decode([tgt.piece_to_id(p) for p in r.hypotheses[0]]) for r in results]
    assert theirs == translator.translate(source, beam=1)

    text = tmp_path / "text"
    text.mkdir()
    (text / "train.en").write_text("\n".join(source) + "\n", encoding="utf-8")
    (text / "train.de").write_text("\n".join(lines(MOSES / "fairseq.beam4.de")[:60]) + "\n", encoding="utf-8")
    data, run = tmp_path / "data", tmp_path / "run"
    prepare = ["-q", "prepare", "--train", text / "train", "--valid", text / "train"]
    assert nmt(*prepare, "--src", "en", "--tgt", "de", "--out", data, "--spm-from", moses) == 0
    budget = sets(
        "train.max_updates=1", "train.max_minutes=0", "train.precision=fp32", "train.log_every_updates=1"
    )
    assert nmt("-q", "train", "--data", data, "--out", run, "--init-from", moses, *budget) == 0
    record = json.loads((run / "metrics.jsonl").read_text().splitlines()[0])
    assert record["type"] == "train" and record["nll_loss"] < 3.0  # fairseq's own outputs: likely


@pytest.mark.parametrize("what", ["empty directory", "not a checkpoint"])
def test_what_is_not_a_model_is_refused_in_one_line(
    what: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    if what == "not a checkpoint":
        (folder / "checkpoint.pt").write_bytes(b"not a zip file")
        shutil.copy(FAIRSEQ / "dict.en.txt", folder / "dict.en.txt")
    refused(capsys, "import", folder, "-o", tmp_path / "out.pt")
    assert not (tmp_path / "out.pt").exists()


def test_an_output_that_is_the_source_model_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "fairseq"
    shutil.copytree(FAIRSEQ, source)
    before = {p.name: p.read_bytes() for p in source.iterdir()}
    for output in (source / "checkpoint.pt", source / "dict.en.txt"):
        capsys.readouterr()
        assert "is an input of this command" in refused(
            capsys, "import", source / "checkpoint.pt", "-o", output
        )
    assert {p.name: p.read_bytes() for p in source.iterdir()} == before


def _broken_fairseq(tmp_path: Path, fault: str) -> Path:
    """A copy of the fairseq fixture with one fault of the kind real files have."""
    import argparse

    source = tmp_path / fault.replace(" ", "_")
    shutil.copytree(FAIRSEQ, source)
    path = source / "checkpoint.pt"
    if fault == "empty dictionary":
        (source / "dict.en.txt").write_text("", encoding="utf-8")
    elif fault == "dictionary 50 short":
        lines = (source / "dict.de.txt").read_text(encoding="utf-8").splitlines()
        (source / "dict.de.txt").write_text("\n".join(lines[:-50]) + "\n", encoding="utf-8")
    else:
        with torch.serialization.safe_globals([argparse.Namespace]):
            state = torch.load(path, weights_only=True)
        model = state["model"]
        if fault == "nan weight":
            model["encoder.layers.0.fc1.weight"][0, 0] = float("nan")
        elif fault == "truncated tensor":
            model["decoder.layers.0.fc2.weight"] = model["decoder.layers.0.fc2.weight"][:, :7]
        elif fault == "several settings":  # all of them in one message, as CTranslate2's converters say
            args = state["cfg"]["model"]
            args.layernorm_embedding, args.decoder_ffn_embed_dim = True, 4 * args.decoder_ffn_embed_dim
            args.encoder_layers_to_keep, args.activation_fn = "0", "tanh"
        elif fault == "multilingual":
            state["cfg"]["task"].update(_name="translation_multi_simple_epoch", encoder_langtok="src")
        elif fault == "zero heads":  # fairseq 0.12 keeps the model's settings as a Namespace
            state["cfg"]["model"].encoder_attention_heads = 0
            state["cfg"]["model"].decoder_attention_heads = 0
        torch.save(state, path)
    return path


@pytest.mark.parametrize(
    ("fault", "words"),
    [
        ("empty dictionary", "embeddings have"),
        ("dictionary 50 short", "embeddings have"),
        ("nan weight", "encoder.0.ffn.linear1.weight holds NaN"),
        ("truncated tensor", "cannot import"),
        ("zero heads", "0 attention heads do not divide"),
        ("multilingual", "a multilingual fairseq model"),
        (
            "several settings",
            "layernorm_embedding = True has no counterpart in nmt's model; fairseq's encoder_layers_to_keep "
            "= '0' has no counterpart in nmt's model; encoder and decoder feed-forward widths differ; nmt "
            "has one d_ff; activation_fn = 'tanh'",
        ),
    ],
)
def test_a_foreign_model_whose_files_disagree_is_refused_in_one_line(
    fault: str, words: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _broken_fairseq(tmp_path, fault)
    capsys.readouterr()
    line = refused(capsys, "import", path, "-o", tmp_path / "out.pt")
    assert words in line and "internal error" not in line, line
    assert not (tmp_path / "out.pt").exists()


@pytest.mark.parametrize("source", ["hf:", "hf:../../etc", "hf:org", "hf:org/../../x"])
def test_a_hub_name_that_is_not_one_is_refused_before_any_download(
    source: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert "not a Hugging Face model name" in refused(capsys, "import", source, "-o", tmp_path / "out.pt")


def test_fastbpe_codes_are_refused_at_import(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "wmt19-like"
    shutil.copytree(MOSES, source)
    codes = (source / "bpecodes").read_text(encoding="utf-8").splitlines()[1:]
    (source / "bpecodes").write_text("".join(f"{line} {1000 - i}\n" for i, line in enumerate(codes)))
    assert "fastBPE codes" in refused(capsys, "import", source / "checkpoint.pt", "-o", tmp_path / "out.pt")
    assert not (tmp_path / "out.pt").exists()


def test_a_fairseq_run_that_names_no_languages_imports_with_src_and_tgt(
    imported: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """fairseq 0.12 saves source_lang = None for a run trained as its own examples train, without
    --source-lang/--target-lang; fairseq itself runs such a model."""
    import argparse

    source = tmp_path / "unnamed"
    shutil.copytree(FAIRSEQ, source)
    with torch.serialization.safe_globals([argparse.Namespace]):
        state = torch.load(source / "checkpoint.pt", weights_only=True)
    state["cfg"]["task"].update(source_lang=None, target_lang=None)
    torch.save(state, source / "checkpoint.pt")
    out = tmp_path / "out.pt"
    capsys.readouterr()
    assert "give them with --src and --tgt" in refused(capsys, "import", source / "checkpoint.pt", "-o", out)
    assert nmt("-q", "import", source / "checkpoint.pt", "-o", out, "--src", "en", "--tgt", "de") == 0
    assert checkpoint.load(out).languages == ("en", "de")
    lines = (FAIRSEQ / "input.en").read_text(encoding="utf-8").splitlines()[:20]
    ours = Translator.load(out, device="cpu", precision="fp32", threads=1).translate(lines, beam=1)
    assert ours == Translator.load(imported, device="cpu", precision="fp32", threads=1).translate(
        lines, beam=1
    )
    # A model that names its languages keeps them: --src/--tgt may only agree.
    assert "translates en-de" in refused(
        capsys, "import", FAIRSEQ / "checkpoint.pt", "-o", out, "--src", "de", "--tgt", "en"
    )


def test_the_layout_before_fairseq_0_9_imports_and_translates_as_fairseq(tmp_path: Path) -> None:
    """Older published checkpoints stack attention's projections (`in_proj_weight`) and number a
    layer's norms (`layer_norms.N`); fairseq 0.12 still loads them. The fixture written in that
    layout must give fairseq's own translations."""
    import argparse

    source = tmp_path / "old"
    shutil.copytree(FAIRSEQ, source)
    with torch.serialization.safe_globals([argparse.Namespace]):
        state = torch.load(source / "checkpoint.pt", weights_only=True)
    new, old = state["model"], {}
    norms = {"encoder": ("self_attn_layer_norm", "final_layer_norm"),
             "decoder": ("self_attn_layer_norm", "encoder_attn_layer_norm", "final_layer_norm")}  # fmt: skip
    for name, tensor in new.items():
        parts = name.split(".")
        if parts[-2] in ("q_proj", "k_proj", "v_proj"):
            if parts[-2] == "q_proj":
                base = ".".join(parts[:-2])
                stacked = [new[f"{base}.{p}.{parts[-1]}"] for p in ("q_proj", "k_proj", "v_proj")]
                old[f"{base}.in_proj_{parts[-1]}"] = torch.cat(stacked)
            continue
        if len(parts) == 5 and parts[1] == "layers" and parts[3] in norms[parts[0]]:
            name = ".".join([*parts[:3], "layer_norms", str(norms[parts[0]].index(parts[3])), parts[4]])
        old[name] = tensor
    assert any(".in_proj_weight" in name for name in old) and any(".layer_norms.2." in name for name in old)
    state["model"] = old
    torch.save(state, source / "checkpoint.pt")
    out = tmp_path / "old.pt"
    assert nmt("-q", "import", source / "checkpoint.pt", "-o", out) == 0
    ours = Translator.load(out, device="cpu", precision="fp32", threads=1).translate(
        lines(FAIRSEQ / "input.en"), beam=1
    )
    assert ours == lines(FAIRSEQ / "fairseq.beam1.de")


def test_an_output_projection_of_its_own_in_the_old_layout_is_imported(tmp_path: Path) -> None:
    """Before fairseq 0.9 a decoder whose output projection is not its embedding kept it as
    `decoder.embed_out`, which fairseq's upgrade renames. The fixture untied (the same values
    under both names, so fairseq's translations stay) and saved that way."""
    import argparse

    source = tmp_path / "untied"
    shutil.copytree(FAIRSEQ, source)
    with torch.serialization.safe_globals([argparse.Namespace]):
        state = torch.load(source / "checkpoint.pt", weights_only=True)
    for key in ("share_all_embeddings", "share_decoder_input_output_embed"):
        setattr(state["cfg"]["model"], key, False)
    weights = state["model"]
    weights["decoder.embed_out"] = weights.pop("decoder.output_projection.weight").clone()
    weights["decoder.embed_tokens.weight"] = weights["decoder.embed_tokens.weight"].clone()
    torch.save(state, source / "checkpoint.pt")
    out = tmp_path / "untied.pt"
    assert nmt("-q", "import", source / "checkpoint.pt", "-o", out) == 0
    ours = Translator.load(out, device="cpu", precision="fp32", threads=1).translate(
        lines(FAIRSEQ / "input.en")[:50], beam=1
    )
    assert ours == lines(FAIRSEQ / "fairseq.beam1.de")[:50]


def test_learned_positions_of_unequal_lengths_are_cut_to_the_shorter(tmp_path: Path) -> None:
    import argparse

    source = tmp_path / "learned"
    shutil.copytree(FAIRSEQ, source)
    with torch.serialization.safe_globals([argparse.Namespace]):
        state = torch.load(source / "checkpoint.pt", weights_only=True)
    args = state["cfg"]["model"]
    args.encoder_learned_pos = args.decoder_learned_pos = True
    args.max_source_positions, args.max_target_positions = 300, 200
    d = state["model"]["encoder.embed_tokens.weight"].shape[1]
    gen = torch.Generator().manual_seed(0)
    state["model"]["encoder.embed_positions.weight"] = torch.randn(302, d, generator=gen) * 0.01
    state["model"]["decoder.embed_positions.weight"] = torch.randn(202, d, generator=gen) * 0.01
    torch.save(state, source / "checkpoint.pt")
    out = tmp_path / "learned.pt"
    assert nmt("-q", "import", source / "checkpoint.pt", "-o", out) == 0
    ckpt = checkpoint.load(out)
    assert ckpt.run_config(out).model.max_positions == 200
    torch.testing.assert_close(
        ckpt.model["src_embed.positions.weight"], state["model"]["encoder.embed_positions.weight"][2:202]
    )
    assert Translator.load(out, device="cpu", precision="fp32", threads=1).translate(["a dog runs ."])[0]


def test_an_unknown_piece_reads_as_fairseq_writes_it(translator: Translator) -> None:
    from nmt_cli.special_ids import UNK_ID

    hello = translator.tgt_spm.encode("Hallo")
    assert translator.tgt_spm.decode([*hello, UNK_ID]) == "Hallo<unk>"  # fairseq's "<unk>", not " ⁇ "


def test_a_hub_model_that_cannot_be_downloaded_is_one_line(tmp_path: Path) -> None:
    import subprocess

    from helpers import nmt_command, subprocess_env

    pytest.importorskip("huggingface_hub")
    # Offline, with an empty cache: what a machine without a network meets.
    env = {**subprocess_env(), "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    args = nmt_command("import", "hf:Helsinki-NLP/opus-mt-en-de", "-o", tmp_path / "m.pt")
    done = subprocess.run(args, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 1
    errors = [
        line for line in done.stderr.splitlines() if line.startswith("nmt: error:") or "Traceback" in line
    ]
    assert errors == [done.stderr.strip().splitlines()[-1]] and "cannot download it" in errors[0]
    assert "not in the local cache" in errors[0] and not (tmp_path / "m.pt").exists()
