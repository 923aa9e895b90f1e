"""The machine's matmul peak in fp32 and bf16 (GFLOP/s): the denominator for utilisation.

Square matmuls of a few sizes on the benchmark's thread count; the best of several runs.
    .venv/bin/python bench/peak.py
"""

from __future__ import annotations

import time

import torch
from common import THREADS, emit


def peak_gflops(dtype: torch.dtype, sizes: tuple[int, ...] = (1024, 2048, 3072), repeats: int = 5) -> float:
    best = 0.0
    for n in sizes:
        a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
        a @ b  # warm-up
        for _ in range(repeats):
            start = time.perf_counter()
            a @ b
            best = max(best, 2 * n**3 / (time.perf_counter() - start) / 1e9)
    return best


def measure() -> dict:
    """Both peaks on the benchmark's threads; `main` prints them, train_speed.py within its own JSON."""
    torch.set_num_threads(THREADS)
    return {
        "peak_gflops_fp32": round(peak_gflops(torch.float32)),
        "peak_gflops_bf16": round(peak_gflops(torch.bfloat16)),
        "threads": THREADS,
    }


def main() -> dict:
    result = measure()
    emit(result)
    return result


if __name__ == "__main__":
    main()
