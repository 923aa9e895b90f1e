"""Vocabulary shortlists: `nmt shortlist` learns one and stores it with the model; `--shortlist`
decodes over it in translate, the API and serve; `nmt export` writes it as CTranslate2's map."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import Corpus, TrainedRun, exported_to_ctranslate2, nmt, refused

from nmt_cli import Translator, checkpoint
from nmt_cli.commands import shortlist as shortlist_command
from nmt_cli.data.shortlist import Shortlist, coverage
from nmt_cli.data.spm import processors
from nmt_cli.errors import SettingError


def stored(path: Path) -> Shortlist:
    ckpt = checkpoint.load(path)
    cfg = ckpt.run_config(path).model
    return Shortlist.from_dict(ckpt.shortlist, cfg.src_vocab_size, cfg.tgt_vocab_size, str(path))


def test_every_reference_piece_of_held_out_lines_is_reachable(listed: Path, corpus: Corpus) -> None:
    """The copy task's reference pieces are its source pieces: 3 candidates a piece must hold each
    piece's own copy, for every line of the held-out test split."""
    shortlist = stored(listed)
    assert shortlist.sizes == (3, 0)
    encode = processors(checkpoint.load(listed).spm, None)
    pairs = [
        (encode[0].encode(s), encode[1].encode(t))
        for s, t in zip(corpus.test_src, corpus.test_tgt, strict=True)
    ]
    share, size = coverage(shortlist, pairs)
    assert share == 1.0
    assert size < 0.5 * shortlist.candidates.shape[0]  # and it is a short list: under half the pieces


def test_decoding_over_the_shortlist_keeps_the_translations(listed: Path, corpus: Corpus) -> None:
    translator = Translator.load(listed, device="cpu", precision="fp32")
    lines = corpus.test_src
    full = translator.translate_nbest(lines, nbest=2, beam=4)
    short = translator.translate_nbest(lines, nbest=2, beam=4, shortlist=True)
    same = sum(a[0][0] == b[0][0] for a, b in zip(full, short, strict=True))
    assert same >= 0.95 * len(lines), f"{same} of {len(lines)}"
    # The scores differ: the softmax is over the shortlist, so each is at least the full one.
    assert any(b[0][1] != a[0][1] for a, b in zip(full, short, strict=True))
    greedy = translator.translate(lines, beam=1, shortlist=True)
    assert sum(g == f[0][0] for g, f in zip(greedy, full, strict=True)) >= 0.9 * len(lines)


def test_a_shortlist_of_the_whole_vocabulary_changes_nothing(
    trained: TrainedRun, corpus: Corpus, tmp_path: Path
) -> None:
    out = tmp_path / "all.pt"
    code = nmt(
        "-q", "shortlist", "-m", trained.checkpoint, "--train", corpus.raw / "train", "--src", "src", "--tgt",
        "tgt", "--candidates", 1, "--frequent", 1000, "-o", out,
    )  # fmt: skip
    assert code == 0
    translator = Translator.load(out, device="cpu", precision="fp32")
    lines = corpus.test_src[:40]
    for options in ({"beam": 4}, {"beam": 1}):
        assert translator.translate_nbest(
            lines, nbest=1, shortlist=True, **options
        ) == translator.translate_nbest(lines, nbest=1, **options)


@pytest.mark.parametrize("precision", ["bf16", "int8"])
def test_the_shortlist_decodes_at_every_precision(listed: Path, corpus: Corpus, precision: str) -> None:
    translator = Translator.load(listed, device="cpu", precision=precision)
    lines = corpus.test_src[:50]
    full, short = translator.translate(lines, beam=4), translator.translate(lines, beam=4, shortlist=True)
    assert sum(a == b for a, b in zip(full, short, strict=True)) >= 0.9 * len(lines)


def test_the_cli_flag_and_the_recipe_default(listed: Path, corpus: Corpus, tmp_path: Path) -> None:
    out_full, out_short = tmp_path / "full.hyp", tmp_path / "short.hyp"
    source = corpus.raw / "test.src"
    assert nmt("-q", "translate", "-m", listed, "-i", source, "-o", out_full, "--threads", 1) == 0
    assert (
        nmt("-q", "translate", "-m", listed, "-i", source, "-o", out_short, "--shortlist", "--threads", 1)
        == 0
    )
    expected = Translator.load(listed, device="cpu", precision="bf16").translate(
        corpus.test_src, shortlist=True
    )
    assert out_short.read_text(encoding="utf-8").splitlines() == expected


def test_asking_for_a_shortlist_the_model_lacks_is_one_line(
    trained: TrainedRun, corpus: Corpus, capsys: pytest.CaptureFixture[str]
) -> None:
    line = refused(
        capsys, "translate", "-m", trained.checkpoint, "-i", corpus.raw / "test.src", "--shortlist"
    )
    assert (
        line.startswith(f"nmt: error: --shortlist: {trained.checkpoint} has no") and "nmt shortlist" in line
    )
    with pytest.raises(SettingError, match="no vocabulary shortlist"):
        Translator.load(trained.checkpoint, device="cpu").translate(["a b"], shortlist=True)


def test_averaging_keeps_the_shortlist(listed: Path, tmp_path: Path) -> None:
    out, copy = tmp_path / "avg.pt", tmp_path / "copy.pt"
    copy.write_bytes(listed.read_bytes())  # a second file: the same one twice is refused
    assert nmt("-q", "average", listed, copy, "-o", out) == 0
    assert torch.equal(stored(out).candidates, stored(listed).candidates)


def test_a_shortlist_that_does_not_fit_the_model_is_refused(
    listed: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ckpt = checkpoint.load(listed)
    assert ckpt.shortlist is not None
    ckpt.shortlist = {**ckpt.shortlist, "candidates": ckpt.shortlist["candidates"][:5]}
    bad = tmp_path / "bad.pt"
    checkpoint.save(ckpt, bad)
    assert "shortlist does not fit" in refused(capsys, "translate", "-m", bad, "-i", "/dev/null")


def test_bad_shortlist_options_and_corpora_are_one_line(
    trained: TrainedRun, corpus: Corpus, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["shortlist", "-m", trained.checkpoint, "-o", tmp_path / "out.pt", "--src", "src", "--tgt", "tgt"]
    assert "--candidates" in refused(capsys, *base, "--train", corpus.raw / "train", "--candidates", 0)
    assert "missing.src" in refused(capsys, *base, "--train", tmp_path / "missing")
    (tmp_path / "uneven.src").write_text("a\nb\n")
    (tmp_path / "uneven.tgt").write_text("a\n")
    assert "2 lines" in refused(capsys, *base, "--train", tmp_path / "uneven")
    assert not (tmp_path / "out.pt").exists()


def test_an_output_that_is_an_input_is_refused_before_the_work(
    trained: TrainedRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    prefix = tmp_path / "corpus"
    for lang in ("src", "tgt"):
        Path(f"{prefix}.{lang}").write_text("apple river\nstone\n", encoding="utf-8")
    model = tmp_path / "model.pt"
    model.write_bytes(trained.checkpoint.read_bytes())
    args = ["shortlist", "-m", model, "--train", prefix, "--src", "src", "--tgt", "tgt", "-o"]
    for output in (Path(f"{prefix}.tgt"), model):
        assert "is an input of this command" in refused(capsys, *args, output)
    assert Path(f"{prefix}.tgt").read_text(encoding="utf-8") == "apple river\nstone\n"
    assert model.read_bytes() == trained.checkpoint.read_bytes()


def test_export_writes_the_shortlist_as_ctranslate2s_vocabulary_map(
    listed: Path, corpus: Corpus, tmp_path: Path
) -> None:
    out = tmp_path / "ct2"
    engine = exported_to_ctranslate2(listed, out)
    shortlist = stored(listed)
    spm = processors(checkpoint.load(listed).spm, None)[1]
    # Round trip: the map names exactly the stored candidates of each source piece.
    lines = (out / "vmap.txt").read_text(encoding="utf-8").splitlines()
    always, *rules = (line.split("\t") for line in lines)
    assert always == ["", ""]  # no frequent pieces in this shortlist
    read = {spm.piece_to_id(key): [spm.piece_to_id(p) for p in value.split(" ")] for key, value in rules}
    expected = {
        s: [t for t in row if t >= 0] for s, row in enumerate(shortlist.candidates.tolist()) if max(row) >= 0
    }
    assert read == expected
    # CTranslate2 decodes over it: greedy, one line at a time, as nmt over the same candidates.
    lines_in = corpus.test_src[:30]
    ours = Translator.load(listed, device="cpu", precision="fp32").translate(
        lines_in, beam=1, shortlist=True, batch_tokens=1
    )
    theirs = [
        spm.decode(r.hypotheses[0])
        for r in engine.translate_batch(
            [spm.encode(x, out_type=str) for x in lines_in], beam_size=1, use_vmap=True, max_batch_size=1
        )
    ]
    assert sum(a == b for a, b in zip(ours, theirs, strict=True)) >= 0.9 * len(lines_in)


def test_a_corpus_of_the_opposite_direction_or_a_missing_valid_set_is_refused_before_any_output(
    trained: TrainedRun, corpus: Corpus, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out.pt"
    base = ["shortlist", "-m", trained.checkpoint, "-o", out, "--train", corpus.raw / "train"]
    # The model translates src into tgt.
    assert "translates src into tgt; give --src src --tgt tgt" in refused(
        capsys, *base, "--src", "tgt", "--tgt", "src"
    )
    assert "--valid" in refused(
        capsys, *base, "--src", "src", "--tgt", "tgt", "--valid", tmp_path / "missing"
    )
    assert not out.exists()


def test_a_valid_set_of_uneven_sides_is_refused_before_the_checkpoint_is_written(
    trained: TrainedRun, corpus: Corpus, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "uneven.src").write_text("apple river\nstone\n", encoding="utf-8")
    (tmp_path / "uneven.tgt").write_text("apple river\n", encoding="utf-8")
    out = tmp_path / "out.pt"
    args = ["shortlist", "-m", trained.checkpoint, "-o", out, "--train", corpus.raw / "train"]
    assert "2 lines" in refused(capsys, *args, "--src", "src", "--tgt", "tgt", "--valid", tmp_path / "uneven")
    assert not out.exists()  # exit 2 means nothing was done


def test_a_thin_shortlist_warns_and_candidates_are_capped_at_the_vocabulary(
    trained: TrainedRun, corpus: Corpus, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    few = tmp_path / "few"
    for side in ("src", "tgt"):
        (tmp_path / f"few.{side}").write_text("apple river\n", encoding="utf-8")
    out = tmp_path / "thin.pt"
    capsys.readouterr()
    args = ["shortlist", "-m", trained.checkpoint, "-o", out, "--train", few, "--src", "src", "--tgt", "tgt"]
    assert nmt(*args, "--frequent", 0, "--candidates", 100_000) == 0
    err = capsys.readouterr().err
    assert "learned from 1 pair: a shortlist this thin" in err
    assert "--candidates 100000: the target vocabulary has" in err
    vocab = checkpoint.load(out).run_config(out).model.tgt_vocab_size
    assert stored(out).candidates.shape[1] <= vocab
    # --frequent too: the report names what was taken, not what was asked for.
    args[args.index(out)] = tmp_path / "all_frequent.pt"
    assert nmt(*args, "--frequent", 999_999_999) == 0
    err = capsys.readouterr().err
    assert f"--frequent 999999999: the target vocabulary has {vocab}; taking that" in err
    assert f"and {vocab} frequent pieces" in err


def test_a_very_long_pair_is_cut_to_the_models_positions(
    trained: TrainedRun, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Learning costs the product of a pair's lengths: one pair of 30,000-character lines took a
    # minute and 2.4 GB, and longer ones more memory than a machine has.
    learned, learn = [], shortlist_command.learn

    def recorded(pairs: list, *args: object, **kwargs: object) -> Shortlist:
        learned.extend(pairs)
        return learn(pairs, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(shortlist_command, "learn", recorded)
    for side in ("src", "tgt"):
        (tmp_path / f"long.{side}").write_text(
            "apple river\n" + "apple river " * 500 + "\n", encoding="utf-8"
        )
    args = ["-m", trained.checkpoint, "-o", tmp_path / "long.pt", "--src", "src", "--tgt", "tgt"]
    assert nmt("shortlist", *args, "--train", tmp_path / "long") == 0
    positions = checkpoint.load(trained.checkpoint).run_config(trained.checkpoint).model.max_positions
    assert len(learned) == 2
    assert max(len(ids) for pair in learned for ids in pair) == positions - 1  # as translate cuts a source
