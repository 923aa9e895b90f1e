"""Host synchronisations in a training update: on a GPU each one stalls the host until the device
has caught up, so an update must queue all its work without one. On CPU the same calls show in the
profiler as the operators that read a tensor's value on the host (item, nonzero, is_nonzero, equal):
counted over a whole `nmt train`, the count must not grow with the number of updates between two
log records."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest
from helpers import Corpus, nmt, train_args
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gpu"))  # the GPU tests' helpers
from gpu_helpers import in_fused_adam  # noqa: E402

# The operators behind float(t), int(t), bool(t), t.tolist() of a CUDA tensor, boolean indexing,
# torch.equal: each makes the host wait for the device.
SYNCING = ("aten::item", "aten::_local_scalar_dense", "aten::nonzero", "aten::is_nonzero", "aten::equal")


def syncs(corpus: Corpus, run_dir: Path, updates: int, precision: str, *overrides: str) -> Counter[str]:
    args = train_args(
        corpus.data,
        run_dir,
        f"train.max_updates={updates}",
        "train.log_every_updates=1000",
        "train.valid_every_updates=0",
        "train.save_every_updates=0",
        "train.max_tokens=256",
        *overrides,
    )
    args += ["--precision", precision]  # bf16 even where the CPU would train faster in fp32
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        assert nmt(*args) == 0
    return Counter(e.name for e in prof.events() if e.name in SYNCING and not in_fused_adam(e))


@pytest.mark.parametrize("precision", ["fp32", pytest.param("bf16", marks=pytest.mark.slow)])  # 3 s each
def test_an_update_reads_nothing_back_from_the_device(corpus: Corpus, tmp_path: Path, precision: str) -> None:
    overrides = ("train.update_freq=2", "model.dropout=0.1")
    short = syncs(corpus, tmp_path / "short", 2, precision, *overrides)
    long = syncs(corpus, tmp_path / "long", 8, precision, *overrides)
    per_update = {name: (long[name] - short[name]) / 6 for name in SYNCING if long[name] != short[name]}
    assert per_update == {}
