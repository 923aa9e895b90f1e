"""A format-1 payload of an earlier nmt, without the keys added since, reads as one of today's
that records none of them; what `to_dict` writes reads back unchanged."""

from __future__ import annotations

from pathlib import Path

import torch

from nmt_cli import checkpoint
from nmt_cli.checkpoint import Checkpoint, TrainState

SPM = {"src": b"src model", "tgt": b"tgt model"}


def test_a_payload_without_the_later_keys_reads_as_recording_none() -> None:
    earliest = {
        "format": 1,
        "kind": "train",
        "config": {},
        "model": {},
        "spm": SPM,
        "progress": {"update": 3},
    }
    ckpt = Checkpoint.from_dict(earliest, Path("old.pt"))
    assert (ckpt.languages, ckpt.tokenizers, ckpt.shortlist, ckpt.imported_from) == (None,) * 4
    assert ckpt.update == 3 and ckpt.train_state is None and ckpt.averaged_from is None
    assert Checkpoint.from_dict({**earliest, "kind": "best"}, Path("x")).kind == "best"
    without_kind = {key: value for key, value in earliest.items() if key != "kind"}
    assert Checkpoint.from_dict(without_kind, Path("x")).kind == "train"


def test_what_to_dict_writes_reads_back_the_same() -> None:
    ckpt = Checkpoint(
        kind="train",
        config={"model": {}},
        model={"w": torch.ones(2)},
        spm=SPM,
        languages=("en", "de"),
        progress={"update": 7},
        train_state=TrainState({"state": {}}, {}, {"torch": torch.zeros(1)}),
        shortlist={"candidates": torch.zeros(1, 1, dtype=torch.long), "frequent": torch.zeros(1)},
    )
    payload = ckpt.to_dict()
    # The keys in the order earlier releases wrote them: a checkpoint's bytes stay as they were.
    order = ["format", "kind", "config", "model", "spm", "progress", "optimizer", "scaler", "rng"]
    assert list(payload) == [*order, "languages", "shortlist"]
    again = Checkpoint.from_dict(payload, Path("x"))
    assert again.languages == ("en", "de") and again.update == 7 and again.train_state is not None
    assert again.tokenizers is None and set(checkpoint.NOT_RECORDED) >= {
        "languages",
        "tokenizers",
        "shortlist",
    }
