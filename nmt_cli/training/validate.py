"""Validation: loss and perplexity on the valid split, and sacreBLEU of its translations."""

from __future__ import annotations

import math

import sacrebleu
import torch
from sentencepiece import SentencePieceProcessor

from nmt_cli.config import RunConfig
from nmt_cli.data.batching import collate, make_batches
from nmt_cli.data.corpus import ParallelSplit
from nmt_cli.decoding.batches import translate_sentences
from nmt_cli.decoding.ensemble import Ensemble
from nmt_cli.decoding.settings import DecodeSettings
from nmt_cli.model import Transformer
from nmt_cli.special_ids import PAD_ID
from nmt_cli.training.loss import label_smoothed_nll
from nmt_cli.training.precision import autocast


@torch.inference_mode()
def valid_loss(
    model: Transformer, data: ParallelSplit, cfg: RunConfig, device: torch.device
) -> dict[str, float]:
    total_loss = total_nll = 0.0
    tokens = 0
    for idx in make_batches(
        data.src.lengths(), data.tgt.lengths(), cfg.train.max_tokens, 0, 0, shuffle=False
    ):
        batch = collate([data.src[i] for i in idx], [data.tgt[i] for i in idx], model.cfg.start_id)
        with autocast(device, cfg.train.precision):
            logits = model(batch["src"].to(device), batch["tgt_in"].to(device))
        loss, nll = label_smoothed_nll(logits, batch["tgt_out"].to(device), cfg.train.label_smoothing)
        total_loss, total_nll = total_loss + float(loss), total_nll + float(nll)
        tokens += int((batch["tgt_out"] != PAD_ID).sum())
    tokens = max(tokens, 1)
    return {
        "loss": total_loss / tokens,
        "nll_loss": total_nll / tokens,
        "ppl": math.exp(min(total_nll / tokens, 100.0)),
    }


def validate(
    model: Transformer,
    data: ParallelSplit,
    cfg: RunConfig,
    device: torch.device,
    tgt_processor: SentencePieceProcessor,
) -> dict[str, float]:
    """Loss, perplexity and (if train.valid_bleu) sacreBLEU's BLEU and chrF of the decoded valid set.

    Leaves the model in training mode."""
    model.eval()
    try:
        result = valid_loss(model, data, cfg, device)
        if cfg.train.valid_bleu and len(data) > 0:
            with autocast(device, cfg.train.precision):
                hyps = translate_sentences(
                    Ensemble([model]),
                    [data.src[i] for i in range(len(data))],
                    DecodeSettings(cfg.decode, batch_tokens=cfg.train.max_tokens, scores=False),
                    device,
                )
            hypotheses = [tgt_processor.decode(h[0].tokens if h else []) for h in hyps]
            references = [tgt_processor.decode(data.tgt[i].tolist()) for i in range(len(data))]
            result["bleu"] = sacrebleu.corpus_bleu(hypotheses, [references]).score
            result["chrf"] = sacrebleu.corpus_chrf(hypotheses, [references]).score
    finally:
        model.train()
    return result
