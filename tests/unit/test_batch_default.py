"""The default batch of decoding: 4,096 source tokens on a CPU, 32,768 on a CUDA GPU, where a
search step costs about the same for a few hundred rows as for a few thousand."""

from types import SimpleNamespace

import torch

from nmt_cli.config import DecodeConfig
from nmt_cli.decoding.settings import BATCH_TOKENS, BATCH_TOKENS_CUDA, default_batch_tokens, resolve
from nmt_cli.decoding.translator import Translator


def test_the_default_depends_on_the_device() -> None:
    assert (BATCH_TOKENS, BATCH_TOKENS_CUDA) == (4096, 32768)
    assert default_batch_tokens("cpu") == BATCH_TOKENS
    assert default_batch_tokens("cuda") == BATCH_TOKENS_CUDA


def test_a_translator_fills_in_its_device_default_and_keeps_a_given_one() -> None:
    def on(device: str) -> SimpleNamespace:
        return SimpleNamespace(device=torch.device(device), decode=DecodeConfig(), shortlist=None)

    for device, tokens in (("cpu", BATCH_TOKENS), ("cuda", BATCH_TOKENS_CUDA)):
        assert Translator.settings(on(device)).batch_tokens == tokens  # type: ignore[arg-type]
        assert Translator.settings(on(device), batch_tokens=64).batch_tokens == 64  # type: ignore[arg-type]
    assert resolve(DecodeConfig(), batch_tokens=None).batch_tokens == BATCH_TOKENS
