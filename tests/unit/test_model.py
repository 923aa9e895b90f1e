"""Behaviour of the Transformer core: masks, padding, incremental decoding, learning."""

import pytest
import torch
import torch.nn.functional as F
from helpers import VARIANTS, tiny_model

from nmt_cli.config import ModelConfig
from nmt_cli.model import Transformer
from nmt_cli.model.layers import dropout
from nmt_cli.special_ids import BOS_ID, EOS_ID, PAD_ID

VOCAB = 40


def rand_tokens(b: int, t: int, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(4, VOCAB, (b, t), generator=g)


# bf16 on CPU takes the written-out attention path (bf16 matmuls, float32 softmax), not SDPA,
# except for one query a row (a decoding step), which SDPA answers.
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("variant", VARIANTS)
def test_future_target_tokens_never_change_earlier_outputs(variant, dtype):
    model = tiny_model(**VARIANTS[variant]).to(DTYPES[dtype])
    src, tgt = rand_tokens(2, 7), rand_tokens(2, 6, seed=2)
    changed = tgt.clone()
    changed[:, 4:] = rand_tokens(2, 2, seed=3)
    with torch.no_grad():
        a, b = model(src, tgt), model(src, changed)
    torch.testing.assert_close(a[:, :4], b[:, :4], rtol=0, atol=1e-6)
    assert not torch.allclose(a[:, 4:], b[:, 4:])


@pytest.mark.parametrize("variant", VARIANTS)
def test_padding_a_batch_never_changes_real_positions(variant):
    model = tiny_model(**VARIANTS[variant])
    src, tgt = rand_tokens(1, 5), rand_tokens(1, 4, seed=2)
    padded_src = torch.cat([src, torch.full((1, 3), PAD_ID)], dim=1)
    padded_tgt = torch.cat([tgt, torch.full((1, 2), PAD_ID)], dim=1)
    with torch.no_grad():
        alone = model(src, tgt)
        batched = model(padded_src, padded_tgt)
    torch.testing.assert_close(batched[:, :4], alone, rtol=0, atol=1e-5)


@pytest.mark.parametrize("dtype", DTYPES)
def test_padded_source_positions_receive_no_attention(dtype):
    model = tiny_model().to(DTYPES[dtype])
    src = torch.cat([rand_tokens(2, 5), torch.full((2, 4), PAD_ID)], dim=1)
    tgt = rand_tokens(2, 6, seed=2)
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        clean = model._decode(tgt, model.init_state(memory, src_mask))[0]
        # Whatever sits at padded positions of the encoder output must not reach the decoder.
        noisy_memory = memory.clone()
        noisy_memory[:, 5:] = torch.randn_like(noisy_memory[:, 5:]) * 100
        noisy = model._decode(tgt, model.init_state(noisy_memory, src_mask))[0]
    torch.testing.assert_close(noisy, clean, rtol=0, atol=1e-6)


@pytest.mark.parametrize("variant", VARIANTS)
def test_bf16_outputs_follow_fp32_outputs(variant):
    model = tiny_model(**VARIANTS[variant])
    src = torch.cat([rand_tokens(3, 6), torch.full((3, 2), PAD_ID)], dim=1)
    tgt = rand_tokens(3, 5, seed=2)
    with torch.no_grad():
        high = model(src, tgt)
        low = model.to(torch.bfloat16)(src, tgt).float()
    # bf16 keeps 8 bits of mantissa: close, not equal; a wrong mask or softmax is far off.
    assert (low - high).abs().max() < 0.05 * high.abs().max()
    assert (low.argmax(-1) == high.argmax(-1)).float().mean() > 0.9


@pytest.mark.parametrize("variant", VARIANTS)
def test_incremental_decoding_equals_full_forward(variant):
    model = tiny_model(**VARIANTS[variant])
    src = torch.cat([rand_tokens(3, 6), torch.full((3, 2), PAD_ID)], dim=1)
    src[0, 6:] = rand_tokens(1, 2, seed=5)  # rows of different lengths
    tgt = torch.cat([torch.full((3, 1), BOS_ID), rand_tokens(3, 7, seed=2)], dim=1)
    with torch.no_grad():
        full = model(src, tgt).log_softmax(dim=-1)
    torch.testing.assert_close(decode_stepwise(model, src, tgt), full, rtol=0, atol=1e-5)


def test_bf16_incremental_decoding_follows_the_full_forward():
    # The steps' self-attention (one query a row) goes through SDPA, the full pass through the
    # written-out form: two kernels, one result up to bf16 rounding.
    model = tiny_model().to(torch.bfloat16)
    src = torch.cat([rand_tokens(3, 6), torch.full((3, 2), PAD_ID)], dim=1)
    tgt = torch.cat([torch.full((3, 1), BOS_ID), rand_tokens(3, 7, seed=2)], dim=1)
    with torch.no_grad():
        full = model(src, tgt).float().log_softmax(dim=-1)
    steps = decode_stepwise(model, src, tgt)
    assert (steps - full).abs().max() < 0.05 * full.abs().max()
    assert (steps.argmax(-1) == full.argmax(-1)).float().mean() > 0.9


@torch.no_grad()
def decode_stepwise(model: Transformer, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
    """Log-probabilities (B, T, V) from feeding tgt one token at a time through the cache."""
    memory, src_mask = model.encode(src)
    state = model.init_state(memory, src_mask)
    steps = []
    for i in range(tgt.shape[1]):
        log_probs, state = model.decode_step(tgt[:, i : i + 1], state)
        steps.append(log_probs)
    return torch.stack(steps, dim=1)


def test_reordering_the_state_follows_the_rows():
    model = tiny_model()
    src, tgt = rand_tokens(3, 5), rand_tokens(3, 3, seed=2)
    with torch.no_grad():
        memory, mask = model.encode(src)
        state = model.init_state(memory, mask)
        for i in range(2):
            _, state = model.decode_step(tgt[:, i : i + 1], state)
        order = torch.tensor([2, 0, 0])
        reordered, _ = model.decode_step(tgt[order, 2:3], state.reorder(order, order))
        direct, _ = model.decode_step(tgt[:, 2:3], state)
    torch.testing.assert_close(reordered, direct[order], rtol=0, atol=1e-6)


def test_weight_sharing_is_three_way_with_a_joint_vocabulary():
    model = tiny_model()
    assert model.src_embed.tokens.weight is model.tgt_embed.tokens.weight
    assert model.output_proj is None
    separate = tiny_model(joint_vocab=False)
    assert separate.src_embed.tokens.weight is not separate.tgt_embed.tokens.weight
    unshared = tiny_model(share_embeddings=False)
    assert unshared.output_proj is not None


def test_embeddings_are_scaled_by_sqrt_d_model():
    model = tiny_model()
    ids = torch.tensor([[5]])
    expected = model.src_embed.tokens.weight[5] * 32**0.5 + model.src_embed.table[0]
    torch.testing.assert_close(model.src_embed(ids)[0, 0], expected)


def test_a_tiny_model_overfits_a_handful_of_pairs():
    model = tiny_model(VOCAB, d_model=64, d_ff=128, d_k=16, d_v=16, max_positions=32).train()
    src = rand_tokens(8, 6)
    target = src.flip(1)  # learn to reverse
    tgt_in = torch.cat([torch.full((8, 1), BOS_ID), target], dim=1)
    tgt_out = torch.cat([target, torch.full((8, 1), EOS_ID)], dim=1)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3, betas=(0.9, 0.98), eps=1e-9)
    for _ in range(150):
        loss = F.cross_entropy(model(src, tgt_in).flatten(0, 1), tgt_out.flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert loss.item() < 0.05


@pytest.mark.parametrize("dtype", DTYPES)
def test_cpu_dropout_zeroes_a_fraction_p_and_keeps_the_expectation(dtype):
    torch.manual_seed(0)
    y = dropout(torch.ones(400_000, dtype=DTYPES[dtype]), 0.1, training=True).float()
    assert abs((y == 0).float().mean().item() - 0.1) < 0.003  # ~6 standard deviations
    kept = y[y != 0]
    assert torch.all(kept == kept[0])  # every kept element gets the same scale
    assert abs(y.mean().item() - 1.0) < 0.005


def test_cpu_dropout_follows_the_seed_and_is_the_identity_in_eval():
    x = torch.randn(64, 33)
    torch.manual_seed(3)
    a = dropout(x, 0.3, training=True)
    torch.manual_seed(3)
    b = dropout(x, 0.3, training=True)
    assert torch.equal(a, b)
    assert not torch.equal(a, dropout(x, 0.3, training=True))
    assert dropout(x, 0.3, training=False) is x
    assert dropout(x, 0.0, training=True) is x


def test_cpu_dropout_gradient_is_its_mask_times_the_scale():
    x = torch.randn(50, 40, requires_grad=True)
    torch.manual_seed(1)
    y = dropout(x, 0.25, training=True)
    y.backward(torch.ones_like(y))
    kept = y != 0
    torch.testing.assert_close(x.grad[kept], torch.full_like(x.grad[kept], 1 / 0.75))
    assert torch.all(x.grad[~kept] == 0)


WINDOWED = {
    "window": {"attention_window": 2},
    "window-realformer": {"attention_window": 2, "residual_attention": True},
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("variant", WINDOWED)
def test_padding_far_beyond_the_window_changes_nothing_and_stays_finite(variant, dtype):
    # Ten pads after three tokens: the last pads are further than the radius from any real token.
    model = tiny_model(**WINDOWED[variant]).to(DTYPES[dtype])
    short, long_ = rand_tokens(1, 3), rand_tokens(1, 13, seed=4)
    src = torch.cat([torch.cat([short, torch.full((1, 10), PAD_ID)], dim=1), long_])
    tgt = torch.cat([torch.full((2, 1), BOS_ID), rand_tokens(2, 4, seed=2)], dim=1)
    with torch.no_grad():
        batched = model(src, tgt)
        alone = model(short, tgt[:1])
    assert batched.isfinite().all() and decode_stepwise(model, src, tgt).isfinite().all()
    atol = 1e-5 if dtype == "fp32" else 0.05 * alone.abs().max().item()
    torch.testing.assert_close(batched[:1], alone, rtol=0, atol=atol)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("variant", WINDOWED)
def test_training_with_padding_far_beyond_the_window_has_finite_gradients(variant, dtype):
    model = tiny_model(**WINDOWED[variant]).to(DTYPES[dtype]).train()
    src = torch.cat([torch.cat([rand_tokens(1, 2), torch.full((1, 12), PAD_ID)], dim=1), rand_tokens(1, 14)])
    tgt = rand_tokens(2, 5, seed=2)
    loss = F.cross_entropy(model(src, tgt[:, :-1]).float().flatten(0, 1), tgt[:, 1:].flatten())
    loss.backward()
    assert loss.isfinite()
    assert all(p.grad.isfinite().all() for p in model.parameters() if p.grad is not None)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("variant", VARIANTS)
def test_cached_decoding_of_several_new_tokens_equals_full_recompute(variant, dtype):
    # Prefix or forced decoding feeds several tokens at once after a cache: 2, then 4, then 1.
    model = tiny_model(**VARIANTS[variant]).to(DTYPES[dtype])
    src = torch.cat([rand_tokens(2, 6), torch.full((2, 2), PAD_ID)], dim=1)
    tgt = torch.cat([torch.full((2, 1), BOS_ID), rand_tokens(2, 6, seed=2)], dim=1)
    with torch.no_grad():
        full = model(src, tgt).float()
        memory, src_mask = model.encode(src)
        state = model.init_state(memory, src_mask)
        pieces = []
        for lo, hi in ((0, 2), (2, 6), (6, 7)):
            hidden, state = model._decode(tgt[:, lo:hi], state)
            pieces.append(model.project(hidden).float())
    chunked = torch.cat(pieces, dim=1)
    atol = 1e-5 if dtype == "fp32" else 0.02 * full.abs().max().item()
    torch.testing.assert_close(chunked, full, rtol=0, atol=atol)


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"positions": "learned", "share_embeddings": False, "joint_vocab": False},
        {"positions": "sinusoidal-fairseq", "output_bias": True, "norm": "pre"},
        {"positions": "sinusoidal-halves", "activation": "swish", "decoder_start": "pad"},
    ],
    ids=["paper", "learned-untied", "fairseq-prenorm", "marian"],
)
def test_a_model_holding_loaded_weights_is_the_model_that_loads_them(overrides: dict) -> None:
    cfg = ModelConfig(
        encoder_layers=2, decoder_layers=2, d_model=32, d_ff=64, heads=4, d_k=8, d_v=8,
        src_vocab_size=50, tgt_vocab_size=50, max_positions=64, **overrides,
    )  # fmt: skip
    torch.manual_seed(0)
    weights = Transformer(cfg).state_dict()
    built = Transformer(cfg)
    built.load_state_dict(weights)
    held = Transformer.holding(cfg, weights)
    tensors = [*held.named_parameters(), *held.named_buffers()]
    assert not [name for name, tensor in tensors if tensor.is_meta]
    assert held.state_dict().keys() == built.state_dict().keys()
    assert all(torch.equal(held.state_dict()[k], v) for k, v in built.state_dict().items())
    assert (held.src_embed.tokens is held.tgt_embed.tokens) == (
        built.src_embed.tokens is built.tgt_embed.tokens
    )
    src, tgt = torch.randint(4, 50, (3, 9)), torch.randint(4, 50, (3, 6))
    built.eval(), held.eval()
    with torch.inference_mode():
        assert torch.equal(held(src, tgt), built(src, tgt))
