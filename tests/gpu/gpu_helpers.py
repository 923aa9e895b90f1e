"""What the GPU tests and bench/gpu_check.py, bench/gpu_paths.py and bench/gpu_run.py share: the
model sizes, WMT-shaped random batches, a model and optimizer set up as training sets them up, the
{"ok", "error"} figures of a check, and which profiled reads are fused Adam's own (which
tests/unit/test_update_syncs.py needs too). Plain torch, no pytest: the bench scripts import it too
(on a GPU machine they may run with a python that has no pytest)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from nmt_cli.config import ModelConfig
from nmt_cli.data.batching import collate
from nmt_cli.model import Transformer
from nmt_cli.training.update import with_real_rows

CUDA = torch.cuda.is_available()
DEVICE = torch.device("cuda" if CUDA else "cpu")
Figures = dict[str, Any]


def config(layers: int, d: int, d_ff: int, heads: int, vocab: int, dropout: float = 0.0) -> ModelConfig:
    return ModelConfig(
        encoder_layers=layers, decoder_layers=layers, d_model=d, d_ff=d_ff, heads=heads,
        d_k=d // heads, d_v=d // heads, dropout=dropout, src_vocab_size=vocab, tgt_vocab_size=vocab,
    )  # fmt: skip


TINY = config(2, 64, 128, 4, 1000)
BASE = config(6, 512, 2048, 8, 37000, dropout=0.1)
BIG = config(6, 1024, 4096, 16, 37000, dropout=0.1)


def checks(**conditions: bool) -> Figures:
    """{"ok": all conditions hold}, with an "error" naming those that do not."""
    failed = [name for name, ok in conditions.items() if not ok]
    return {"ok": not failed, **({"error": "failed: " + ", ".join(failed)} if failed else {})}


def combine(key: str, parts: Figures) -> Figures:
    """The figures of several sub-checks under `key`, ok when every one is."""
    return {key: parts, **checks(**{name: part.get("ok", True) for name, part in parts.items()})}


def wmt_batch(
    tokens: int, vocab: int, rng: np.random.Generator, multiple: int = 1
) -> dict[str, torch.Tensor]:
    """Random ids in a batch shaped like WMT training: sentences of one length bucket (newstest
    averages ~27 pieces, log-normal spread), as many rows as fit in `tokens` padded tokens, the
    lengths padded to a `multiple` (`nmt train` pads to 8 for a compiled model on a GPU only)."""
    length = int(np.clip(rng.lognormal(3.15, 0.55), 3, 200))
    rows = max(1, tokens // (length + 4))
    sides = [
        [rng.integers(4, vocab, max(1, length + int(rng.integers(-3, 4)))) for _ in range(rows)] for _ in "st"
    ]
    # Its real rows found on the host, as the training loop's prefetch thread does.
    return with_real_rows(collate(sides[0], sides[1], multiple=multiple))


def pinned(batch: dict[str, Any], device: torch.device = DEVICE) -> dict[str, Any]:
    """The batch in pinned memory when it goes to a GPU, as the training loop hands batches over
    (a packed batch's "packing" is a tuple of tensors)."""
    if device.type != "cuda":
        return batch
    return {
        k: (tuple(p.pin_memory() for p in v) if k == "packing" else v.pin_memory()) for k, v in batch.items()
    }


def sync(device: torch.device = DEVICE) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def in_fused_adam(event: Any) -> bool:
    """Whether a profiler `event` runs inside Adam's fused kernel: on CPU it reads each parameter's
    step count on the host, where it lies; the CUDA kernel reads it on the device."""
    parent = event.cpu_parent
    while parent is not None:
        if parent.name == "aten::_fused_adam_":
            return True
        parent = parent.cpu_parent
    return False


def model_of(cfg: ModelConfig, seed: int = 0, device: torch.device = DEVICE) -> Transformer:
    """A Transformer of `cfg` in training mode on `device`, its weights drawn from `seed`."""
    torch.manual_seed(seed)
    return Transformer(cfg).to(device).train()


def train_model(
    cfg: ModelConfig, seed: int = 0, device: torch.device = DEVICE
) -> tuple[Transformer, torch.optim.Adam]:
    """model_of's model and fused Adam as `nmt train` sets it up."""
    model = model_of(cfg, seed, device)
    return model, torch.optim.Adam(model.parameters(), lr=5e-4, betas=(0.9, 0.98), fused=True)
