"""Device and thread choice for the commands (the model never picks a device)."""

from __future__ import annotations

import ctypes
import math
import os
import re
import sys
import time

import torch

from nmt_cli.errors import InputError, SettingError

# Compiled matmul kernels oneDNN keeps (_bound_onednn_caches): 32 serve decoding, not training.
DECODE_PRIMITIVES = 32
TRAIN_PRIMITIVES = 256
IDEEP_CACHE_ENTRIES = 32


def resolve_device(name: str) -> torch.device:
    """ "auto" takes a GPU when one is visible; "cuda" without one is an error, not a silent CPU
    run. A GPU comes with its attention kernels chosen (configure_cuda). A SettingError names the
    device: `--device` on the command line, `device=` from Python."""
    if re.fullmatch(r"cpu(:[0-9]+)?", name) or (name == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if name == "auto" or re.fullmatch(r"cuda(:[0-9]+)?", name):
        if not torch.cuda.is_available():
            raise SettingError("device", name, "no CUDA device is visible; use cpu (or auto)")
        configure_cuda()
        return torch.device("cuda" if name == "auto" else name)
    raise SettingError("device", name, "unknown device; use auto, cpu or cuda")


def cpu_has_fast_bf16() -> bool:
    """Whether this CPU multiplies bf16 in hardware (AVX512-BF16 or AMX). Without it oneDNN
    emulates bf16, many times slower than fp32: bf16 there is a trap, never a speed-up
    (docs/benchmarks.md, "Defaults and the measurements behind them")."""
    return cpu_has_amx() or bool(getattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)())


def cpu_has_amx() -> bool:
    """Whether this CPU has AMX tiles, on which oneDNN multiplies bf16 several times faster than
    fp32 or fbgemm's int8 (AVX512-VNNI)."""
    return bool(getattr(torch.cpu, "_is_amx_tile_supported", lambda: False)())


def cpu_bf16_speedup() -> float:
    """How many times faster than fp32 this CPU multiplies bf16, measured on a matmul of a small
    Transformer's feed-forward shape (about 0.1 s); 0.0 without hardware bf16, where one emulated
    matmul alone would take seconds. Hardware bf16 is not always faster (AVX512-BF16 without AMX
    can be slower than fp32), so it is measured rather than assumed. The best of several runs, so
    that a busy core does not decide."""
    if not cpu_has_fast_bf16():
        return 0.0
    best = {}
    for dtype in (torch.float32, torch.bfloat16):
        a = torch.randn(2048, 256).to(dtype)
        b = torch.randn(256, 1024).to(dtype)
        a @ b  # the first call builds oneDNN's kernel
        best[dtype] = math.inf
        for _ in range(5):
            start = time.perf_counter()
            a @ b
            best[dtype] = min(best[dtype], time.perf_counter() - start)
    return best[torch.float32] / best[torch.bfloat16]


def configure_cpu(threads: int, primitives: int = DECODE_PRIMITIVES) -> None:
    """Thread count, flush-to-zero for denormal floats, and glibc's malloc kept from unmapping.

    Adam's second moments and tiny gradients decay into the denormal range, where x86
    arithmetic is many times slower. glibc serves every large tensor with a fresh mmap and
    returns it on free, so each update would pay page faults for its activations again; freed
    memory is kept in the heap instead. oneDNN's caches are bounded before its first use, its
    primitive cache at `primitives` (see _bound_onednn_caches).
    """
    torch.set_flush_denormal(True)
    _keep_freed_memory()
    _bound_onednn_caches(primitives)
    if threads > 0:  # RuntimeConfig has checked the count
        torch.set_num_threads(threads)


def _keep_freed_memory() -> None:
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return  # not glibc (e.g. musl): nothing to tune
    m_trim_threshold, m_mmap_max = -1, -4  # mallopt parameters from <malloc.h>
    libc.mallopt(m_mmap_max, 0)  # large blocks from the heap, not one mmap each
    libc.mallopt(m_trim_threshold, 1 << 30)  # give memory back only beyond 1 GB of free heap


def _bound_onednn_caches(primitives: int) -> None:
    """bf16 matmuls on CPU go through oneDNN, which compiles a kernel for each new matmul shape
    (milliseconds each) and keeps it in its primitive cache, for about 3 MB each; PyTorch's ideep
    keeps an LRU of its own. Decoding loses little to a small cache (32). A training update of
    the Multi30k recipe looks up about 165 primitives (each linear layer's forward and two
    gradients, the attention's batched products, the loss's chunks), so with 32 the recurring
    ones are compiled again every update; 256 keep them (docs/benchmarks.md). Users may still
    set either variable themselves."""
    os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", str(primitives))
    os.environ.setdefault("LRU_CACHE_CAPACITY", str(IDEEP_CACHE_ENTRIES))


def configure_cuda() -> None:
    """Attention kernels whose cost does not depend on having seen a shape before. cuDNN's SDPA,
    which torch prefers for bf16 and fp16, builds an execution plan for every new shape, and
    batches and decoding steps keep bringing new shapes; flash and memory-efficient attention
    have no plan. With cuDNN attention, bf16 decoding took 9.9 times fp32's time on an H200."""
    if torch.cuda.is_available():
        torch.backends.cuda.enable_cudnn_sdp(False)


def check_precision(precision: str, device: torch.device, allowed: tuple[str, ...]) -> None:
    if precision not in allowed:
        raise InputError(f"precision '{precision}': use one of {', '.join(allowed)}")
    if precision == "fp16" and device.type != "cuda":
        raise InputError(
            "precision fp16 needs a CUDA device (loss scaling is a GPU feature); on CPU use bf16"
        )
