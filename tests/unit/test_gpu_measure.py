"""bench/gpu_measure.py, the figures gpu_check reads off an update: model FLOPs of the real tokens
against torch's FlopCounterMode, the kernel classes of GPU time, and shares that sum to one."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from nmt_cli.config import ModelConfig
from nmt_cli.data.batching import collate
from nmt_cli.model import Transformer
from nmt_cli.training.update import accumulate_gradients

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from gpu_measure import (  # noqa: E402
    CLASSES,
    forward_flops,
    kernel_class,
    real_lengths,
    real_share,
    time_shares,
    training_flops,
)

TINY = ModelConfig(
    encoder_layers=2, decoder_layers=2, d_model=64, d_ff=128, heads=4, d_k=16, d_v=16,
    dropout=0.0, src_vocab_size=1000, tgt_vocab_size=1000,
)  # fmt: skip


def batch_of(src: list[int], tgt: list[int], seed: int = 0) -> dict[str, torch.Tensor]:
    """Random ids, a row for each pair of lengths (collate adds EOS and BOS)."""
    rng = np.random.default_rng(seed)
    return collate([rng.integers(4, 1000, n) for n in src], [rng.integers(4, 1000, n) for n in tgt])


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_training_flops_of_an_unpadded_batch_are_what_flop_counter_mode_counts(precision: str) -> None:
    # SDPA's math kernel: attention as matmuls, which the counter sees (it has no formula for
    # the CPU's flash kernel), with a backward of twice the forward, as the formula assumes.
    torch.manual_seed(0)
    model = Transformer(TINY).train()
    # Every row of a side one length: nothing padded; 6 x 32 target rows with their EOS, a
    # multiple of 64, so that the loss on CPU pads none either (training/loss.py).
    batch = batch_of([19] * 6, [31] * 6)
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    with sdpa_kernel([SDPBackend.MATH]), FlopCounterMode(display=False) as counter:
        accumulate_gradients(model, [batch], 0.1, precision, scaler, torch.device("cpu"))
    counted = counter.get_total_flops()
    assert training_flops(TINY, *real_lengths(batch)) == pytest.approx(counted, rel=0.03)


def test_forward_flops_of_one_sentence_by_hand() -> None:
    cfg = ModelConfig(
        encoder_layers=1, decoder_layers=1, d_model=4, d_ff=8, heads=2, d_k=2, d_v=2,
        src_vocab_size=10, tgt_vocab_size=10,
    )  # fmt: skip
    s, t = 3, 2
    encoder = 2 * s * 4 * 4 * 4 + 2 * s * 2 * 4 * 8 + 2 * 2 * s * s * 4
    decoder = (
        2 * t * 4 * 4 * 4 + 2 * 2 * t * t * 4  # self-attention
        + 2 * t * 2 * 4 * 4 + 2 * s * 2 * 4 * 4 + 2 * 2 * t * s * 4  # cross-attention
        + 2 * t * 2 * 4 * 8  # FFN
    )  # fmt: skip
    assert forward_flops(cfg, [s], [t]) == encoder + decoder + 2 * t * 4 * 10


def test_padding_adds_no_real_flops_and_lowers_the_real_share() -> None:
    alone = batch_of([10], [12])
    together = batch_of([10, 30], [12, 5])
    src, tgt = real_lengths(together)
    assert list(src) == [11, 31] and list(tgt) == [13, 6]  # EOS on the source, BOS or EOS on the target
    assert training_flops(TINY, *real_lengths(alone)) + training_flops(TINY, [31], [6]) == pytest.approx(
        training_flops(TINY, src, tgt)
    )
    assert real_share([alone]) == 1.0
    assert real_share([together]) == pytest.approx((11 + 31 + 13 + 6) / (2 * 31 + 2 * 13))


# Kernel names as torch's profiler reports them on Ampere and Hopper GPUs (template arguments cut),
# and aten operators as it reports them on CPU.
KERNELS = {
    "matmul": [
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1",
        "nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT",
        "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_32x5_tn",
        "void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_tn_align8>",
        "void cublasLt::splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float>",
        "aten::addmm",
        "aten::bmm",
        "aten::linear",
    ],
    "attention": [
        "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4>, true>",
        "void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits>",
        "fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<>::Params)",
        "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x64",
        "aten::_scaled_dot_product_flash_attention_for_cpu",
    ],
    "optimizer": [
        "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<FusedAdamMathFunctor<>>",
        "void at::native::lpnorm_cleanup<float, (at::native::NormType)1, float, float>(float const*)",
        "aten::_fused_adam_",
    ],
    "loss": [
        "triton_red_fused__softmax_amax_gather_log_sub_sum_where_0",
        "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float>",
        "void at::native::_scatter_gather_elementwise_kernel<128, 8, ...>",
        "aten::_softmax",
    ],
    "elementwise": [
        "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>>",
        "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda>",
        "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, func_wrapper_t>>",
        "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>",
        "void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernel<float, float>",
        "void at::native::(anonymous namespace)::fused_dropout_kernel_vec<c10::BFloat16, float>",
        "aten::native_layer_norm",
    ],
    "other": [
        "Memcpy HtoD (Pinned -> Device)",
        "Memset (Device)",
        "void at::native::embedding_backward_feature_kernel<float, float, long>",
    ],
}


def test_kernels_are_classed_by_name() -> None:
    wrong = {name: kernel_class(name) for kind, names in KERNELS.items() for name in names}
    wrong = {name: got for name, got in wrong.items() if name not in KERNELS[got]}
    assert not wrong
    assert set(KERNELS) == set(CLASSES)


def test_time_shares_split_the_wall_time_and_count_overlaps_once() -> None:
    kernels = [
        ("sm90_xmma_gemm", 0.0, 40.0),
        ("flash_fwd_kernel", 30.0, 50.0),  # overlaps the gemm by 10 on another stream
        ("vectorized_elementwise_kernel", 60.0, 70.0),
    ]
    shares = time_shares(kernels, wall=100.0)
    assert set(shares) == {*CLASSES, "idle"}
    assert sum(shares.values()) == pytest.approx(1.0)
    assert shares["idle"] == pytest.approx(0.4)  # busy 0-50 and 60-70
    assert shares["matmul"] == pytest.approx(0.6 * 40 / 70)
    assert shares["attention"] == pytest.approx(0.6 * 20 / 70)
    assert time_shares([], wall=10.0)["idle"] == 1.0
