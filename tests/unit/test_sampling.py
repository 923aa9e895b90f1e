"""Sampled translation (`Sampling`, `translate --sampling`): a seed reproduces its samples and
another seed gives others; a line's sample depends on the line alone, not on batching, workers or
its neighbours; top-k and top-p draw only from their truncated sets, with the tempered
probabilities; top-k 1, a tiny top-p and a temperature near 0 are greedy search; and bad sampling
options are one-line errors (exit 2)."""

from __future__ import annotations

import contextlib
import math
import random
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from helpers import Corpus, TrainedRun, nmt, one_thread, sentences, tiny_model

from nmt_cli import Translator
from nmt_cli.config import DecodeConfig
from nmt_cli.decoding.ensemble import Ensemble
from nmt_cli.decoding.sampling import draw, row_keys, uniforms
from nmt_cli.decoding.search import greedy_search
from nmt_cli.decoding.settings import DecodeSettings, Sampling
from nmt_cli.decoding.workers import can_fork
from nmt_cli.errors import InputError
from nmt_cli.special_ids import BOS_ID, EOS_ID, PAD_ID

# The copy model is sure of itself: at temperature 1 a sample is nearly always the copy. Flatter,
# it makes mistakes, so that seeds and methods can be told apart by their outputs.
HOT = 3.0


@pytest.fixture(scope="module")
def translator(trained: TrainedRun) -> Iterator[Translator]:
    with one_thread():
        yield Translator.load(trained.checkpoint, device="cpu")


def with_blanks(lines: list[str], seed: int) -> list[str]:
    mixed = [*lines, "", "   ", "", "\t"]
    random.Random(seed).shuffle(mixed)
    return ["", *mixed]


def differing(a: list[str], b: list[str]) -> int:
    assert len(a) == len(b)
    return sum(x != y for x, y in zip(a, b, strict=True))


# --- the Translator on the trained copy model ---------------------------------------------------


def test_a_seed_reproduces_its_samples_and_another_seed_gives_others(
    translator: Translator, corpus: Corpus
) -> None:
    lines = corpus.test_src[:30]
    with one_thread():
        for method, limit in (("topk", {"topk": 0}), ("topp", {"topp": 0.95})):
            drawn = Sampling(method, **limit, temperature=HOT, seed=11)
            first = translator.translate(lines, sampling=drawn)
            again = translator.translate(lines, sampling=Sampling(method, **limit, temperature=HOT, seed=11))
            other = translator.translate(lines, sampling=Sampling(method, **limit, temperature=HOT, seed=12))
            assert first == again
            assert differing(first, other) >= 3, (method, first, other)


def test_samples_differ_from_beam_search_and_keep_one_line_per_line(
    translator: Translator, corpus: Corpus
) -> None:
    lines = with_blanks(corpus.test_src[:30], seed=5)
    with one_thread():
        beam = translator.translate(lines)
        hot = translator.translate(lines, sampling=Sampling("topk", topk=0, temperature=HOT, seed=3))
        usual = translator.translate(lines, sampling=Sampling("topk", topk=10, seed=3))
    for outputs in (hot, usual):
        assert len(outputs) == len(lines)
        assert all(out == "" for src, out in zip(lines, outputs, strict=True) if not src.strip())
    assert differing(hot, beam) >= 3
    # At temperature 1 the samples come from the model: the copy, nearly always.
    real = [(src, out) for src, out in zip(lines, usual, strict=True) if src.strip()]
    assert sum(src == out for src, out in real) / len(real) >= 0.9
    # An empty line alone, and nbest-style output of the API: one empty hypothesis.
    assert translator.translate_nbest(["", "  "], sampling=Sampling(seed=3)) == [[("", 0.0)], [("", 0.0)]]


def test_a_sample_depends_on_its_line_not_on_batching_order_or_neighbours(
    translator: Translator, corpus: Corpus
) -> None:
    lines = corpus.test_src[:40]
    drawn = Sampling("topp", topp=0.95, temperature=HOT, seed=7)
    with one_thread():
        together = translator.translate(lines, sampling=drawn)
        tiny_batches = translator.translate(lines, sampling=drawn, batch_tokens=8)
        backwards = translator.translate(lines[::-1], sampling=drawn)[::-1]
        alone = [translator.translate([line], sampling=drawn)[0] for line in lines[:10]]
        twice = translator.translate([lines[0], lines[1], lines[0], lines[0]], sampling=drawn)
    assert differing(together, lines) >= 3  # hot enough that the samples are not all copies
    assert tiny_batches == together
    assert backwards == together
    assert alone == together[:10]
    assert twice == [together[0], together[1], together[0], together[0]]  # the same line, the same sample


def test_workers_give_the_samples_of_one_process(translator: Translator) -> None:
    # 80 lines: more than two workers' minimum share (32 each), so each worker gets its own part
    # and its own batches, unlike the single process.
    lines = with_blanks(sentences(80, seed=41), seed=41)
    drawn = Sampling("topk", topk=0, temperature=HOT, seed=5)
    with one_thread():
        single = translator.translate(lines, sampling=drawn)
        assert translator.translate(lines, sampling=drawn, batch_tokens=16) == single
        if not can_fork():
            return  # no worker processes on this platform; the single-process check stands
        translator.start_workers(2)
        try:
            assert translator.workers == 2
            parallel = translator.translate(lines, sampling=drawn)
            parallel_small = translator.translate(lines, sampling=drawn, batch_tokens=16)
        finally:
            translator.close()
    assert translator.workers == 1
    assert parallel == single
    assert parallel_small == single


@pytest.mark.parametrize(
    "sampling, nbest, search, says",
    [
        ({"method": "topx"}, 1, {}, "sampling='topx'"),
        ({"topk": -1}, 1, {}, "topk=-1"),
        ({"method": "topp", "topp": 0.0}, 1, {}, "topp=0.0"),
        ({"method": "topp", "topp": 1.01}, 1, {}, "topp=1.01"),
        ({"method": "topp", "topk": 5}, 1, {}, "topk=5: goes with sampling topk, not sampling topp"),
        ({"topp": 0.5}, 1, {}, "topp=0.5: goes with sampling topp, not sampling topk"),
        ({"temperature": 0.0}, 1, {}, "temperature=0.0"),
        ({"temperature": math.inf}, 1, {}, "temperature=inf"),
        ({}, 2, {}, "nbest=2"),
        ({}, 1, {"beam": 4}, "beam=4"),
        ({}, 1, {"lenpen": 1.0}, "lenpen=1.0"),
    ],
    ids=[
        "method",
        "topk",
        "topp-0",
        "topp-above-1",
        "topk-with-topp",
        "topp-with-topk",
        "temperature",
        "temperature-inf",
        "nbest",
        "beam",
        "lenpen",
    ],
)
def test_bad_sampling_settings_are_value_errors(
    translator: Translator, sampling: dict, nbest: int, search: dict, says: str
) -> None:
    with pytest.raises(ValueError) as info:
        translator.translate_nbest(["apple river"], nbest, sampling=Sampling(**sampling), **search)
    assert isinstance(info.value, InputError)
    assert "\n" not in str(info.value) and str(info.value).startswith(says)


# --- the search on a random model -----------------------------------------------------------------

VOCAB = 40


def sources(rows: int = 6, seed: int = 0) -> torch.Tensor:
    """Rows of different lengths (EOS then padding), ids of real words only."""
    g = torch.Generator().manual_seed(seed)
    src = torch.full((rows, 8), PAD_ID, dtype=torch.long)
    for r in range(rows):
        n = 2 + r % 6
        src[r, :n] = torch.randint(EOS_ID + 1, VOCAB, (n,), generator=g)
        src[r, n] = EOS_ID
    return src


def decoding(min_len: int = 1) -> DecodeConfig:
    return DecodeConfig(beam=1, max_len_a=1.0, max_len_b=4, min_len=min_len)


def hyps(result) -> list[tuple[list[int], float]]:
    return [(h[0].tokens, h[0].score) for h in result]


@pytest.fixture(scope="module")
def model():
    with one_thread():
        yield tiny_model(VOCAB, seed=3)


def searched(model, src: torch.Tensor, sampling: Sampling | None = None, cfg: DecodeConfig | None = None):
    """Greedy search of `model` (`decoding()` unless `cfg`), or its draws with `sampling`."""
    return greedy_search(Ensemble([model]), src, DecodeSettings(cfg or decoding(), sampling=sampling))


@pytest.mark.parametrize(
    "sampling",
    [
        Sampling("topk", topk=1, seed=1),
        Sampling("topk", topk=1, temperature=5.0, seed=2),
        Sampling("topp", topp=1e-6, seed=3),
        Sampling("topp", topp=1e-6, temperature=5.0, seed=4),
        Sampling("topk", topk=0, temperature=1e-3, seed=5),
        Sampling("topp", topp=0.9, temperature=1e-3, seed=6),
    ],
    ids=["topk-1", "topk-1-hot", "topp-tiny", "topp-tiny-hot", "cold-topk", "cold-topp"],
)
def test_degenerate_sampling_is_greedy_search(model, sampling: Sampling) -> None:
    src = sources()
    with one_thread():
        greedy = searched(model, src)
        drawn = searched(model, src, sampling)
    assert [t for t, _ in hyps(drawn)] == [t for t, _ in hyps(greedy)]
    assert [s for _, s in hyps(drawn)] == pytest.approx([s for _, s in hyps(greedy)], abs=1e-5)


def test_real_sampling_leaves_greedy_search(model) -> None:
    """The check above has teeth: the random model's distributions are flat enough that proper
    samples are rarely the greedy translation."""
    src = sources()
    with one_thread():
        greedy = [t for t, _ in hyps(searched(model, src))]
        for sampling in (Sampling("topk", topk=5, seed=1), Sampling("topp", topp=0.9, seed=1)):
            drawn = [t for t, _ in hyps(searched(model, src, sampling))]
            assert sum(a != b for a, b in zip(drawn, greedy, strict=True)) >= len(greedy) // 2


@pytest.mark.parametrize("min_len", [0, 1, 3])
def test_samples_keep_the_length_limits_and_score_as_the_model_does(model, min_len: int) -> None:
    src = sources(rows=8, seed=2)
    cfg = decoding(min_len)
    longest = (src != PAD_ID).sum(dim=1) - 1 + cfg.max_len_b  # pieces before the final EOS
    with one_thread():
        drawn = searched(model, src, Sampling("topk", topk=0, temperature=2.0, seed=9), cfg)
        for row, (tokens, score) in enumerate(hyps(drawn)):
            assert min(min_len, int(longest[row])) <= len(tokens) <= int(longest[row])
            assert not {PAD_ID, BOS_ID, EOS_ID} & set(tokens)
            # The score is the untempered log-probability of the pieces and the final EOS.
            path = [*tokens, EOS_ID]
            tgt = torch.tensor([[BOS_ID, *tokens]])
            with torch.no_grad():
                log_probs = model(src[row : row + 1], tgt).log_softmax(-1)[0]
            assert score == pytest.approx(
                sum(float(log_probs[i, tok]) for i, tok in enumerate(path)), abs=1e-3
            )


def test_a_row_samples_the_same_alone_as_in_its_batch(model) -> None:
    src = sources(rows=6, seed=4)
    drawn = Sampling("topp", topp=0.9, temperature=1.5, seed=21)
    with one_thread():
        together = hyps(searched(model, src, drawn))
        for row in range(src.shape[0]):
            alone = src[row : row + 1, : int((src[row] != PAD_ID).sum())]
            ((tokens, score),) = hyps(searched(model, alone, drawn))
            assert tokens == together[row][0]
            assert score == pytest.approx(together[row][1], abs=1e-4)
        reordered = hyps(searched(model, src.flip(0), drawn))[::-1]
    assert [t for t, _ in reordered] == [t for t, _ in together]


def test_row_keys_ignore_padding_and_follow_the_seed() -> None:
    src = torch.tensor([[5, 6, EOS_ID, PAD_ID, PAD_ID], [5, 6, 7, 8, EOS_ID], [5, 6, EOS_ID, PAD_ID, PAD_ID]])
    keys = row_keys(src, 1)
    assert keys[0] == keys[2] != keys[1]
    assert keys[0] == row_keys(src[:1, :3], 1)[0]  # the same sentence without padding
    assert len({int(row_keys(src[:1], seed)[0]) for seed in range(50)}) == 50


def test_uniforms_are_uniform_in_the_unit_interval_and_change_with_key_and_step() -> None:
    keys = row_keys(torch.arange(4, 20_004).reshape(-1, 1), seed=1)  # 20,000 one-piece "sentences"
    first, second = uniforms(keys, 0), uniforms(keys, 1)
    for u in (first, second):
        assert u.dtype == torch.float64
        assert bool(((u >= 0) & (u < 1)).all())
        counts = torch.histc(u.float(), bins=10, min=0.0, max=1.0)
        assert bool((counts - 2000).abs().max() < 200), counts  # each tenth: 2,000 +- 10%
    assert abs(float((first * second).mean()) - 0.25) < 0.01  # steps are not correlated
    assert torch.equal(uniforms(keys, 3), uniforms(keys.clone(), 3))  # a function of key and step
    assert float((first == second).double().mean()) < 0.001


# --- _draw: the truncated, tempered distribution --------------------------------------------------


def row_log_probs(vocab: int = 12, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    log_probs = (2.0 * torch.randn(1, vocab, generator=g, dtype=torch.float64)).log_softmax(-1).float()
    log_probs[:, PAD_ID] = float("-inf")
    log_probs[:, BOS_ID] = float("-inf")
    return log_probs


def expected(log_probs: torch.Tensor, sampling: Sampling) -> dict[int, float]:
    """The distribution `sampling` should draw from, computed independently in float64."""
    probs = (log_probs[0].double() / sampling.temperature).softmax(-1)
    order = [int(i) for i in probs.argsort(descending=True) if probs[i] > 0]
    if sampling.method == "topk" and sampling.topk > 0:
        order = order[: sampling.topk]
    if sampling.method == "topp":
        mass, kept = 0.0, []
        for i in order:
            kept.append(i)
            mass += float(probs[i])
            if mass >= sampling.topp:
                break
        order = kept
    total = sum(float(probs[i]) for i in order)
    return {i: float(probs[i]) / total for i in order}


DRAWS = [
    Sampling("topk", topk=4),
    Sampling("topk", topk=4, temperature=0.5),
    Sampling("topk", topk=0),
    Sampling("topk", topk=0, temperature=2.5),
    Sampling("topk", topk=100),
    Sampling("topp", topp=0.5),
    Sampling("topp", topp=0.9, temperature=2.0),
    Sampling("topp", topp=1.0),
]
DRAW_IDS = [
    "topk-4",
    "topk-4-cold",
    "all",
    "all-hot",
    "topk-beyond-vocab",
    "topp-0.5",
    "topp-0.9-hot",
    "topp-1",
]


@pytest.mark.parametrize("sampling", DRAWS, ids=DRAW_IDS)
def test_draws_follow_the_truncated_tempered_distribution(sampling: Sampling) -> None:
    n = 20_000
    log_probs = row_log_probs()
    want = expected(log_probs, sampling)
    # Evenly spaced numbers in [0, 1): each piece gets its probability's share of them, to within 1/n.
    grid = (torch.arange(n, dtype=torch.float64) + 0.5) / n
    drawn = draw(log_probs.expand(n, -1), sampling, grid)
    assert drawn.shape == (n, 1) and drawn.dtype == torch.long
    got = torch.bincount(drawn[:, 0], minlength=log_probs.shape[1]).double() / n
    assert {i for i in range(log_probs.shape[1]) if got[i] > 0} == set(want)
    for piece, p in want.items():
        assert float(got[piece]) == pytest.approx(p, abs=2.0 / n), piece
    # The ends of [0, 1): the likeliest piece, and the least likely one of the set (never PAD or BOS).
    ends = draw(log_probs.expand(2, -1), sampling, torch.tensor([0.0, 1.0 - 2.0**-53], dtype=torch.float64))
    assert int(ends[0, 0]) == max(want, key=want.__getitem__)
    assert int(ends[1, 0]) == min(want, key=want.__getitem__)


@pytest.mark.parametrize("k", [1, 3, 7])
def test_topk_draws_only_among_the_k_likeliest(k: int) -> None:
    rows, repeats = 8, 400
    g = torch.Generator().manual_seed(k)
    log_probs = torch.randn(rows, 30, generator=g).log_softmax(-1)
    top = log_probs.topk(k, dim=-1).indices
    uniforms = torch.rand(rows * repeats, generator=g, dtype=torch.float64)
    drawn = draw(log_probs.repeat(repeats, 1), Sampling("topk", topk=k, temperature=1.5), uniforms)
    drawn = drawn.view(repeats, rows).T
    for r in range(rows):
        assert set(drawn[r].tolist()) == set(top[r].tolist())  # within the k, and each of them drawn


@pytest.mark.parametrize("p", [0.3, 0.6, 0.9])
def test_topp_draws_only_from_the_smallest_set_of_mass_p(p: float) -> None:
    rows, repeats = 8, 400
    g = torch.Generator().manual_seed(int(p * 10))
    log_probs = torch.randn(rows, 30, generator=g).log_softmax(-1)
    uniforms = torch.rand(rows * repeats, generator=g, dtype=torch.float64)
    drawn = draw(log_probs.repeat(repeats, 1), Sampling("topp", topp=p), uniforms).view(repeats, rows).T
    for r in range(rows):
        probs, order = log_probs[r].double().exp().sort(descending=True)
        size = int((probs.cumsum(0) < p).sum()) + 1  # the first prefix whose mass reaches p
        nucleus = set(order[:size].tolist())
        assert set(drawn[r].tolist()) <= nucleus
        assert len(set(drawn[r].tolist())) >= min(size, 2)  # more than the argmax when it can be


def test_a_temperature_near_zero_approaches_argmax() -> None:
    rows, repeats = 6, 500
    g = torch.Generator().manual_seed(0)
    log_probs = torch.randn(rows, 20, generator=g).log_softmax(-1)
    argmax = log_probs.argmax(-1).repeat(repeats)
    uniforms = torch.rand(rows * repeats, generator=g, dtype=torch.float64)
    share = []
    for temperature in (2.0, 1.0, 0.3, 0.1, 1e-3):
        drawn = draw(
            log_probs.repeat(repeats, 1), Sampling("topk", topk=0, temperature=temperature), uniforms
        )
        share.append(float((drawn[:, 0] == argmax).double().mean()))
    assert share == sorted(share)  # colder, more often the likeliest piece
    assert share[0] < 0.6 and share[-1] == 1.0


def flushing_denormals() -> bool:
    return float(torch.tensor([1e-30]) * torch.tensor([1e-10])) == 0.0


@contextlib.contextmanager
def denormals_flushed(flush: bool) -> Iterator[None]:
    """One of the floating-point modes a process can be in: `nmt translate` and `nmt train` flush
    denormals to zero for the whole process (device.configure_cpu); the API alone does not."""
    before = flushing_denormals()
    if not torch.set_flush_denormal(flush):
        pytest.skip("this CPU cannot flush denormals")
    try:
        yield
    finally:
        torch.set_flush_denormal(before)


@pytest.mark.parametrize(
    "flush, temperature",
    [(False, 1e-45), (True, 1e-38), (True, 1e-45)],
    ids=["denormals-1e-45", "flush-to-zero-1e-38", "flush-to-zero-1e-45"],
)
def test_a_tiny_positive_temperature_is_still_argmax(flush: bool, temperature: float) -> None:
    Sampling("topk", topk=0, temperature=temperature)  # accepted: checked on creation
    log_probs = row_log_probs(seed=1)
    with denormals_flushed(flush):
        for sampling in (
            Sampling("topk", topk=0, temperature=temperature),
            Sampling("topp", temperature=temperature),
        ):
            drawn = draw(
                log_probs.expand(3, -1),
                sampling,
                torch.tensor([0.0, 0.5, 0.999], dtype=torch.float64),
            )
            assert drawn[:, 0].tolist() == [int(log_probs.argmax())] * 3


# --- nmt translate --sampling ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def source(corpus: Corpus, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    lines = with_blanks(corpus.test_src[:30], seed=9)
    path = tmp_path_factory.mktemp("sampling") / "in.txt"
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return path, lines


def translate_cli(capsys: pytest.CaptureFixture[str], *args: object) -> tuple[int, str, str]:
    capsys.readouterr()
    code = nmt("-q", "translate", "--threads", 1, *args)
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_samples_are_reproducible_whatever_the_buffering(
    trained: TrainedRun,
    translator: Translator,
    source: tuple[Path, list[str]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    path, lines = source
    args = ["-m", trained.checkpoint, "-i", path, "--precision", "fp32", "--sampling", "topk"]
    hot = ["--topk", "0", "--temperature", HOT]
    runs = [
        translate_cli(capsys, *args, "--seed", 5),
        translate_cli(capsys, *args, "--seed", 5),
        translate_cli(capsys, *args, *hot, "--seed", 5),
        translate_cli(capsys, *args, *hot, "--seed", 5, "--buffer-size", 3, "--batch-tokens", 8),
        translate_cli(capsys, *args, *hot, "--seed", 6),
    ]
    assert [code for code, _, _ in runs] == [0] * len(runs), [err for _, _, err in runs]
    outputs = [out.split("\n") for _, out, _ in runs]
    for out in outputs:
        assert len(out) == len(lines) + 1 and out[-1] == ""  # one line per input line
        assert all(hyp == "" for src, hyp in zip(lines, out, strict=False) if not src.strip())
    assert outputs[0] == outputs[1]
    assert outputs[2] == outputs[3]  # buffers of 3 lines and tiny batches: the same samples
    assert differing(outputs[2], outputs[4]) >= 3  # another seed
    # The CLI's options mean what Sampling's fields mean: the API gives the same lines.
    with one_thread():
        api = translator.translate(lines, sampling=Sampling("topk", topk=0, temperature=HOT, seed=5))
    assert outputs[2][:-1] == api


@pytest.mark.parametrize(
    "options, named",
    [
        (["--sampling", "topx"], "--sampling"),
        (["--sampling", "topk", "--topk", "-1"], "--topk"),
        (["--sampling", "topp", "--topp", "0"], "--topp"),
        (["--sampling", "topp", "--topp", "1.5"], "--topp"),
        (["--sampling", "topk", "--temperature", "0"], "--temperature"),
        (["--sampling", "topp", "--temperature", "-2"], "--temperature"),
        (["--sampling", "topk", "--nbest", "2"], "--nbest"),
        (["--topp", "0.5"], "--sampling"),
        (["--seed", "3"], "--sampling"),
        (["--sampling", "topp", "--topk", "5"], "--topk"),
        (["--sampling", "topk", "--beam", "4"], "--beam"),
    ],
    ids=[
        "method",
        "topk",
        "topp-0",
        "topp-above-1",
        "temperature-0",
        "temperature-negative",
        "nbest",
        "topp-without-sampling",
        "seed-without-sampling",
        "topk-with-topp",
        "beam-with-sampling",
    ],
)
def test_cli_bad_sampling_options_are_one_line_exit_2(
    trained: TrainedRun,
    source: tuple[Path, list[str]],
    capsys: pytest.CaptureFixture[str],
    options: list[str],
    named: str,
) -> None:
    code, out, err = translate_cli(capsys, "-m", trained.checkpoint, "-i", source[0], *options)
    assert code == 2
    assert out == ""
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("nmt: error:") and named in lines[0]


def test_seeds_that_agree_in_their_low_bits_still_differ() -> None:
    src = torch.tensor([[5, 6, 7, EOS_ID], [8, 9, EOS_ID, PAD_ID]])
    low = row_keys(src, 1)
    assert not torch.equal(low, row_keys(src, 1 + 2**32))
    assert not torch.equal(low, row_keys(src, -1))
    assert torch.equal(low, row_keys(src, 1))
