"""Device and thread choice for the commands (the model never picks a device)."""

from __future__ import annotations

import ctypes
import math
import os
import sys
import time

import torch

from nmt_cli.errors import InputError

ONEDNN_CACHE_ENTRIES = 32


def resolve_device(name: str) -> torch.device:
    """ "auto" takes a GPU when one is visible; "cuda" without one is an error, not a silent CPU
    run. A GPU comes with its attention kernels chosen (configure_cuda)."""
    if name == "cpu" or (name == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if name == "auto" or name.startswith("cuda"):
        if not torch.cuda.is_available():
            raise InputError(f"--device {name}: no CUDA device is visible; use --device cpu (or auto)")
        configure_cuda()
        return torch.device("cuda" if name == "auto" else name)
    raise InputError(f"--device {name}: unknown device; use auto, cpu or cuda")


def cpu_has_fast_bf16() -> bool:
    """Whether this CPU multiplies bf16 in hardware (AVX512-BF16 or AMX). Without it oneDNN
    emulates bf16: on an AVX2-only AMD EPYC a 1024-square bf16 matmul took 2.5 s against 32 ms
    in fp32, so bf16 there is a trap, never a speed-up."""
    return cpu_has_amx() or bool(getattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)())


def cpu_has_amx() -> bool:
    """Whether this CPU has AMX tiles, on which oneDNN multiplies bf16 several times faster than
    fp32 or fbgemm's int8 (AVX512-VNNI): a 240 x 256 by 256 x 8,000 product on one core of an
    Intel Xeon took 0.93 ms in bf16, 3.1 ms in int8 and 5.8 ms in fp32."""
    return bool(getattr(torch.cpu, "_is_amx_tile_supported", lambda: False)())


def cpu_bf16_speedup() -> float:
    """How many times faster than fp32 this CPU multiplies bf16, measured on a matmul of a small
    Transformer's feed-forward shape (about 0.1 s); 0.0 without hardware bf16, where one emulated
    matmul alone would take seconds. Hardware bf16 is not always faster: on 2 cores of an Intel
    Xeon with AVX512-BF16 but no AMX, oneDNN's bf16 matmul ran at 0.58x fp32 (175 against 298
    GFLOP/s) and bf16 training made 0.64x the updates of fp32, where an AMD EPYC trains 2.8x faster
    in bf16. The best of several runs, so that a busy core does not decide."""
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


def configure_cpu(threads: int) -> None:
    """Thread count, flush-to-zero for denormal floats, and glibc's malloc kept from unmapping.

    Adam's second moments and tiny gradients decay into the denormal range, where x86
    arithmetic is many times slower: without flushing, CPU training ran over 5x slower.
    glibc serves every large tensor with a fresh mmap and returns it on free, so each
    update paid page faults for its activations again; keeping freed memory in the heap
    made bf16 training about 15% faster at the same peak RSS (measured on Multi30k).
    oneDNN's caches are bounded before its first use (see _bound_onednn_caches).
    """
    torch.set_flush_denormal(True)
    _keep_freed_memory()
    _bound_onednn_caches()
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


def _bound_onednn_caches() -> None:
    """bf16 matmuls on CPU go through oneDNN, whose two caches (its own primitive cache and
    PyTorch's ideep LRU) keep up to 1024 entries each, with buffers, per matmul shape. Batch
    shapes change every update, so they filled up with one-off shapes: 0.8 GB of peak RSS for
    the Multi30k recipe. 32 entries each held it at 1.36 GB instead of 2.2 GB and ran no slower
    (measured; 8 entries ran about 15% slower). Users may still set either variable themselves."""
    os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", str(ONEDNN_CACHE_ENTRIES))
    os.environ.setdefault("LRU_CACHE_CAPACITY", str(ONEDNN_CACHE_ENTRIES))


def configure_cuda() -> None:
    """Attention kernels whose cost does not depend on having seen a shape before. cuDNN's SDPA,
    which torch prefers for bf16 and fp16, builds an execution plan for every new shape: a base
    model's update took 0.53 s with unseen batch shapes against 0.13 s with seen ones on an H200,
    and every decoding step has a new shape. Flash and memory-efficient attention have no plan."""
    if torch.cuda.is_available():
        torch.backends.cuda.enable_cudnn_sdp(False)


def check_precision(precision: str, device: torch.device, allowed: tuple[str, ...]) -> None:
    if precision not in allowed:
        raise InputError(f"precision '{precision}': use one of {', '.join(allowed)}")
    if precision == "fp16" and device.type != "cuda":
        raise InputError(
            "precision fp16 needs a CUDA device (loss scaling is a GPU feature); on CPU use bf16"
        )
