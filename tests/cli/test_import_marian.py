"""`nmt import` of Hugging Face Marian models (OPUS-MT's format), checked against transformers'
own MarianMTModel.generate and MarianTokenizer on small random models built here."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import sentencepiece
import torch
from helpers import nmt, refused, sentences

from nmt_cli import Translator, checkpoint

transformers = pytest.importorskip("transformers")

MAX_NEW = 24  # tokens generate may add, </s> included


def spm_model(lines: list[str], vocab_size: int) -> bytes:
    """A unigram model (OPUS-MT's kind) learned here, with Marian's special ids."""
    out = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_writer=out,
        model_type="unigram",
        vocab_size=vocab_size,
        hard_vocab_limit=False,  # the test words cannot fill it
        unk_id=1,
        eos_id=0,
        bos_id=-1,
        pad_id=-1,
        minloglevel=2,
    )
    return out.getvalue()


def marian_dir(
    folder: Path, activation: str, separate: bool, seed: int, codes: tuple[str, ...] = (), heads: int = 4
) -> Path:
    """A random MarianMTModel with its tokenizer files, saved as OPUS-MT's models are."""
    torch.manual_seed(seed)
    source_lines, target_lines = sentences(400, seed=seed), sentences(400, seed=seed + 1, max_words=8)
    target_lines = [line.upper() for line in target_lines]  # another "language": other pieces
    work = folder / "spm"
    work.mkdir(parents=True)
    (work / "source.spm").write_bytes(spm_model(source_lines, 60))
    (work / "target.spm").write_bytes(spm_model(target_lines, 70))

    def pieces(name: str) -> list[str]:
        processor = sentencepiece.SentencePieceProcessor(model_file=str(work / name))
        return [processor.id_to_piece(i) for i in range(processor.get_piece_size())]

    specials = ["</s>", "<unk>"]
    src_pieces = [p for p in pieces("source.spm") if p not in specials]
    tgt_pieces = [p for p in pieces("target.spm") if p not in specials]
    if separate:  # <pad> third in both tables, so that one pad id serves both
        src_vocab = {p: i for i, p in enumerate([*specials, "<pad>", *src_pieces])}
        tgt_vocab = {p: i for i, p in enumerate([*specials, "<pad>", *tgt_pieces])}
        pad = 2
    else:  # OPUS-MT: one table, <pad> last
        joint = list(dict.fromkeys([*specials, *src_pieces, *tgt_pieces, *codes]))
        src_vocab = tgt_vocab = {p: i for i, p in enumerate([*joint, "<pad>"])}
        pad = len(joint)
    (work / "vocab.json").write_text(json.dumps(src_vocab), encoding="utf-8")
    (work / "target_vocab.json").write_text(json.dumps(tgt_vocab), encoding="utf-8")
    tokenizer = transformers.MarianTokenizer(
        source_spm=str(work / "source.spm"),
        target_spm=str(work / "target.spm"),
        vocab=str(work / "vocab.json"),
        target_vocab_file=str(work / "target_vocab.json") if separate else None,
        separate_vocabs=separate,
        source_lang="xx",
        target_lang="yy",
    )
    config = transformers.MarianConfig(
        vocab_size=len(src_vocab),
        decoder_vocab_size=len(tgt_vocab),
        share_encoder_decoder_embeddings=not separate,
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=heads,
        decoder_attention_heads=heads,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        activation_function=activation,
        max_position_embeddings=128,
        scale_embedding=True,
        pad_token_id=pad,
        eos_token_id=0,
        decoder_start_token_id=pad,
        init_std=0.2,  # larger than training's 0.02: outputs that are not all one piece
    )
    model = transformers.MarianMTModel(config)
    with torch.no_grad():  # a bias that matters, as a trained model's may, and ends in </s>
        model.final_logits_bias.normal_(0, 0.5)
        model.final_logits_bias[0, 0] += 3.0
    out = folder / "opus-mt-xx-yy"
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def generate(folder: Path, lines: list[str], beams: int, early_stopping: bool = True) -> list[str]:
    tokenizer = transformers.MarianTokenizer.from_pretrained(folder)
    model = transformers.MarianMTModel.from_pretrained(folder).eval()
    out = []
    for line in lines:  # one at a time: no padding in the reference
        batch = tokenizer([line], return_tensors="pt")
        with torch.inference_mode():
            ids = model.generate(
                **batch,
                num_beams=beams,
                do_sample=False,
                max_new_tokens=MAX_NEW,
                min_new_tokens=1,  # nmt's min_len = 1: no empty translation
                length_penalty=1.0,
                early_stopping=early_stopping,  # True: done when `beams` hypotheses have ended
                bad_words_ids=[[model.config.pad_token_id]],  # OPUS-MT's configs forbid <pad>
                forced_eos_token_id=None,
            )
        out.append(tokenizer.decode(ids[0], skip_special_tokens=True))
    return out


@pytest.mark.slow  # transformers' generate over both models: about 10 s
@pytest.mark.parametrize(
    "activation, separate", [("swish", False), ("gelu", True)], ids=["swish-shared", "gelu-separate"]
)
def test_marian_output_is_transformers(activation: str, separate: bool, tmp_path: Path) -> None:
    folder = marian_dir(tmp_path, activation, separate, seed=5 if separate else 3)
    imported = tmp_path / "imported.pt"
    assert nmt("-q", "import", folder, "-o", imported) == 0
    ckpt = checkpoint.load(imported)
    assert ckpt.languages == ("xx", "yy") and ckpt.kind == "import"
    lines = sentences(100, seed=9)
    translator = Translator.load(imported, device="cpu", precision="fp32", threads=1)
    limits = {"max_len_a": 0.0, "max_len_b": MAX_NEW, "min_len": 1}  # b pieces, then a forced </s>
    greedy = translator.translate(lines, beam=1, **limits)
    assert greedy == generate(folder, lines, beams=1)
    # Beam search as the import records it: without early stopping (config.json leaves it unset),
    # MAX_NEW tokens in all, a hypothesis at the limit ending without </s>: generate's own rules.
    limits["max_len_b"] = MAX_NEW - 1
    beam = translator.translate(lines, beam=4, lenpen=1.0, lenpen_style="fairseq", **limits)
    assert beam == generate(folder, lines, beams=4, early_stopping=False)


def test_a_multilingual_models_language_codes_are_read_as_marian_reads_them(tmp_path: Path) -> None:
    codes = (">>yy<<", ">>zz<<")
    folder = marian_dir(tmp_path, "swish", False, seed=3, codes=codes)
    imported = tmp_path / "imported.pt"
    assert nmt("-q", "import", folder, "-o", imported) == 0
    translator = Translator.load(imported, device="cpu", precision="fp32", threads=1)
    tokenizer = transformers.MarianTokenizer.from_pretrained(folder)
    plain = sentences(60, seed=9)
    lines = [f"{codes[i % 2]} {line}" for i, line in enumerate(plain)] + [">>zz<<apple", "apple >>yy<< river"]
    for line in lines:  # the same pieces as MarianTokenizer's, the code first and whole
        theirs = tokenizer.convert_ids_to_tokens(tokenizer(line)["input_ids"])[:-1]  # without </s>
        assert [translator.src_spm.id_to_piece(i) for i in translator.src_spm.encode(line)] == theirs
    limits = {"max_len_a": 0.0, "max_len_b": MAX_NEW, "min_len": 1}
    assert translator.translate(lines, beam=1, **limits) == generate(folder, lines, beams=1)


def test_a_marian_directory_without_its_vocabulary_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = marian_dir(tmp_path, "swish", False, seed=3)
    (folder / "vocab.json").unlink()
    capsys.readouterr()  # transformers' progress bars while saving
    assert "vocab.json" in refused(capsys, "import", folder, "-o", tmp_path / "out.pt")
    assert not (tmp_path / "out.pt").exists()


def test_an_imported_marian_model_fine_tunes_and_exports_to_ctranslate2(tmp_path: Path) -> None:
    ctranslate2 = pytest.importorskip("ctranslate2")
    folder = marian_dir(tmp_path, "swish", False, seed=3)
    imported = tmp_path / "imported.pt"
    assert nmt("-q", "import", folder, "-o", imported) == 0

    # Fine-tuning: the corpus prepared with its two sentencepiece models keeps their one table.
    text = tmp_path / "text"
    text.mkdir()
    for lang, rows in (("xx", sentences(120, seed=1)), ("yy", [s.upper() for s in sentences(120, seed=2)])):
        (text / f"train.{lang}").write_text("\n".join(rows) + "\n", encoding="utf-8")
    data, run = tmp_path / "data", tmp_path / "run"
    prepare = [
        "-q",
        "prepare",
        "--train",
        text / "train",
        "--valid",
        text / "train",
        "--src",
        "xx",
        "--tgt",
        "yy",
    ]
    assert nmt(*prepare, "--out", data, "--spm-from", imported) == 0
    budget = ["--set", "train.max_updates=2", "--set", "train.max_minutes=0", "--set", "train.precision=fp32"]
    assert nmt("-q", "train", "--data", data, "--out", run, "--init-from", imported, *budget) == 0
    assert (run / "checkpoints" / "checkpoint_last.pt").is_file()

    # Export: CTranslate2 starts from <pad> and adds the output bias as nmt does.
    out = tmp_path / "ct2"
    assert nmt("-q", "export", "-m", imported, "-o", out) == 0
    source = sentencepiece.SentencePieceProcessor(model_file=str(out / "src.spm.model"))
    target = sentencepiece.SentencePieceProcessor(model_file=str(out / "tgt.spm.model"))
    lines = sentences(60, seed=9)
    results = ctranslate2.Translator(str(out), device="cpu").translate_batch(
        [source.encode(line, out_type=str) for line in lines], beam_size=1, max_decoding_length=MAX_NEW
    )
    theirs = [target.decode(r.hypotheses[0]) for r in results]
    ours = Translator.load(imported, device="cpu", precision="fp32", threads=1).translate(
        lines, beam=1, max_len_a=0.0, max_len_b=MAX_NEW
    )
    assert theirs == ours


@pytest.mark.parametrize(
    ("fault", "words"),
    [
        ("huge id", "the ids are not 0..N-1"),
        ("vocabulary longer than the rows", "embedding has"),
        ("200 beams", "decode.beam"),
        ("negative length penalty", "decode.lenpen"),
        ("broken target.spm", "target.spm: not a sentencepiece model"),
        ("max_length 2", "generation_config.json: max_length = 2"),  # no room for a translation
        ("max_length -1", "generation_config.json: max_length = -1"),
        ("a string among the weights", "pytorch_model.bin: its weight final_logits_bias is a str"),
    ],
)
def test_a_marian_model_nmt_cannot_run_is_refused_at_import(
    fault: str, words: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = marian_dir(tmp_path, "swish", False, seed=3)
    vocab = json.loads((folder / "vocab.json").read_text(encoding="utf-8"))
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    if fault == "huge id":
        vocab["<extra>"] = 10**12
    elif fault == "vocabulary longer than the rows":
        vocab |= {f"extra{i}": len(vocab) + i for i in range(5)}
    elif fault == "broken target.spm":
        (folder / "target.spm").write_bytes(b"\x0a\xff not a model")
    elif fault == "200 beams":
        config["num_beams"] = 200
    elif fault.startswith("max_length"):
        generation = json.loads((folder / "generation_config.json").read_text(encoding="utf-8"))
        generation["max_length"] = int(fault.split()[1])
        (folder / "generation_config.json").write_text(json.dumps(generation), encoding="utf-8")
    elif fault == "a string among the weights":
        from safetensors.torch import load_file

        weights = load_file(str(folder / "model.safetensors")) | {"final_logits_bias": "x"}
        torch.save(weights, folder / "pytorch_model.bin")
        (folder / "model.safetensors").unlink()
    else:
        config["length_penalty"] = -1.0
    (folder / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    capsys.readouterr()
    line = refused(capsys, "import", folder, "-o", tmp_path / "out.pt")
    assert words in line, line
    assert not (tmp_path / "out.pt").exists()


def test_settings_config_json_leaves_out_take_marian_configs_defaults(tmp_path: Path) -> None:
    """transformers reads a config.json without activation_function or head counts with
    MarianConfig's defaults (gelu, 16 heads): so must the import."""
    folder = marian_dir(tmp_path, "gelu", False, seed=3, heads=16)
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    for name in ("activation_function", "encoder_attention_heads", "decoder_attention_heads"):
        del config[name]
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    imported = tmp_path / "imported.pt"
    assert nmt("-q", "import", folder, "-o", imported) == 0
    cfg = checkpoint.load(imported).run_config(imported).model
    assert (cfg.activation, cfg.heads) == ("gelu", 16)
    translator = Translator.load(imported, device="cpu", precision="fp32", threads=1)
    lines = sentences(40, seed=9)
    limits = {"max_len_a": 0.0, "max_len_b": MAX_NEW, "min_len": 1}
    assert translator.translate(lines, beam=1, **limits) == generate(folder, lines, beams=1)


def test_an_unknown_piece_reads_as_transformers_decodes_it(tmp_path: Path) -> None:
    from nmt_cli.special_ids import UNK_ID

    folder = marian_dir(tmp_path, "swish", False, seed=3)
    imported = tmp_path / "imported.pt"
    assert nmt("-q", "import", folder, "-o", imported) == 0
    translator = Translator.load(imported, device="cpu", precision="fp32", threads=1)
    tokenizer = transformers.MarianTokenizer.from_pretrained(folder)
    text = "APPLE RIVER"
    theirs = tokenizer(text_target=text)["input_ids"][:-1]  # the target side's ids, without </s>
    ours = translator.tgt_spm.encode(text)
    for at in (0, 1, len(ours)):
        mine = ours[:at] + [UNK_ID] + ours[at:]
        their = theirs[:at] + [tokenizer.unk_token_id] + theirs[at:]
        assert translator.tgt_spm.decode(mine) == tokenizer.decode(their, skip_special_tokens=True)


def test_without_early_stopping_the_search_is_generates(tmp_path: Path) -> None:
    """OPUS-MT's configs leave early_stopping unset: generate then goes on searching while a
    running hypothesis could still beat the worst finished one. The import records that, and
    nmt's beam search follows the same rule."""
    folder = marian_dir(tmp_path, "swish", False, seed=3)
    imported = tmp_path / "imported.pt"
    assert nmt("-q", "import", folder, "-o", imported) == 0
    assert checkpoint.load(imported).run_config(imported).decode.early_stopping is False
    translator = Translator.load(imported, device="cpu", precision="fp32", threads=1)
    lines = sentences(100, seed=9)
    # MAX_NEW tokens in all, </s> included, as max_new_tokens counts them; a hypothesis that
    # reaches the limit ends there without </s>, as in generate.
    limits = {"max_len_a": 0.0, "max_len_b": MAX_NEW - 1, "min_len": 1}
    ours = translator.translate(lines, beam=4, lenpen=1.0, lenpen_style="fairseq", **limits)
    theirs = generate(folder, lines, beams=4, early_stopping=False)
    same = sum(a == b for a, b in zip(ours, theirs, strict=True))
    assert same == 100, same


def test_importing_again_into_the_model_directory_replaces_the_earlier_import(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = marian_dir(tmp_path, "swish", False, seed=3)
    output = folder / "nmt.pt"  # beside the files the import reads, none of them
    assert nmt("-q", "import", folder, "-o", output) == 0
    output.write_bytes(b"an earlier import")
    assert nmt("-q", "import", folder, "-o", output) == 0
    assert checkpoint.load(output).kind == "import"
    config = (folder / "config.json").read_bytes()
    capsys.readouterr()
    assert "is an input of this command" in refused(capsys, "import", folder, "-o", folder / "config.json")
    assert (folder / "config.json").read_bytes() == config


def test_a_decoder_starting_from_eos_imports_and_translates_as_transformers(tmp_path: Path) -> None:
    """decoder_start_token_id may name </s> (fairseq's start) as well as <pad>: nmt starts there too."""
    folder = marian_dir(tmp_path, "swish", False, seed=3)
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    config["decoder_start_token_id"] = config["eos_token_id"]
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    generation = json.loads((folder / "generation_config.json").read_text(encoding="utf-8"))
    generation["decoder_start_token_id"] = config["eos_token_id"]
    (folder / "generation_config.json").write_text(json.dumps(generation), encoding="utf-8")
    imported = tmp_path / "imported.pt"
    assert nmt("-q", "import", folder, "-o", imported) == 0
    assert checkpoint.load(imported).run_config(imported).model.decoder_start == "eos"
    translator = Translator.load(imported, device="cpu", precision="fp32", threads=1)
    lines = sentences(40, seed=9)
    limits = {"max_len_a": 0.0, "max_len_b": MAX_NEW, "min_len": 1}
    assert translator.translate(lines, beam=1, **limits) == generate(folder, lines, beams=1)


def test_a_decoder_start_that_is_no_special_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = marian_dir(tmp_path, "swish", False, seed=3)
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    config["decoder_start_token_id"] = 5  # an ordinary piece
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    capsys.readouterr()
    line = refused(capsys, "import", folder, "-o", tmp_path / "out.pt")
    assert "decoder_start_token_id is not the id of <pad>, </s> or <s>" in line, line
    assert not (tmp_path / "out.pt").exists()


@pytest.mark.parametrize(
    "record",
    [{"position_layout": "diagonal", "output_bias": True}, {"position_layout": "halves"}, "interleaved"],
)
def test_an_nmt_export_record_it_cannot_read_is_refused(
    record: object, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """config.json's "nmt_export" (what nmt export changed) is read exactly or not at all."""
    folder = marian_dir(tmp_path, "swish", False, seed=3)
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    (folder / "config.json").write_text(json.dumps(config | {"nmt_export": record}), encoding="utf-8")
    capsys.readouterr()
    assert '"nmt_export" is not' in refused(capsys, "import", folder, "-o", tmp_path / "out.pt")
    assert not (tmp_path / "out.pt").exists()


def test_the_import_records_the_row_order_of_its_files(tmp_path: Path) -> None:
    """imported_from["marian_rows"]: for each id of the files' tables, the nmt id with its row,
    from which `nmt export --format hf-marian` puts the rows back in the files' order."""
    from nmt_cli.data import spm

    folder = marian_dir(tmp_path, "gelu", True, seed=5)
    imported = tmp_path / "imported.pt"
    assert nmt("-q", "import", folder, "-o", imported) == 0
    ckpt = checkpoint.load(imported)
    assert ckpt.imported_from is not None
    rows = ckpt.imported_from["marian_rows"]
    for side, name in (("src", "vocab.json"), ("tgt", "target_vocab.json")):
        table = json.loads((folder / name).read_text(encoding="utf-8"))
        processor = spm.load_processor(ckpt.spm[side])
        assert len(rows[side]) == len(table)
        assert all(processor.id_to_piece(rows[side][i]) == piece for piece, i in table.items())
