"""The models a search decodes with, and the batch it decodes: an ensemble decoded in lockstep
(log-probabilities averaged), each model's decoder state, the vocabulary the batch is scored over
(a shortlist's), and where asked the links of each chosen piece to the source piece it attended to
(`Batch.stored`), kept with the token so that the search's bookkeeping moves both.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor

from nmt_cli.decoding import int8
from nmt_cli.decoding.alignment import default_layer
from nmt_cli.model import DecoderState, Transformer
from nmt_cli.special_ids import BOS_ID, EOS_ID, PAD_ID

LINK = 1 << 32
"""Searches that align keep each token with its link in one integer, token + link * LINK, so that
the bookkeeping that moves tokens moves links with them."""


@dataclass
class Batch:
    """A batch being decoded: each model's decoder state, and the target vocabulary it is scored
    over (`vocab[i]` is the target id of score column i; None: the whole vocabulary)."""

    states: list[DecoderState]
    vocab: Tensor | None = None
    projections: list[Callable[[Tensor], Tensor] | None] = field(default_factory=list)
    alignable: Tensor | None = None
    """Where the search aligns: (sentences, S), True at the source positions a link may name."""

    def reorder(self, rows: Tensor, sentences: Tensor | None = None, beam: int | None = None) -> None:
        """Keep hypothesis `rows`, and memory rows `sentences` (`DecoderState.reorder`)."""
        self.states = [state.reorder(rows, sentences, beam) for state in self.states]
        if self.alignable is not None and sentences is not None:
            self.alignable = self.alignable[sentences]

    def stored(self, tokens: Tensor, beams: Tensor | None = None) -> Tensor:
        """`tokens` chosen for each of A sentences as the search stores them: with their links
        (`LINK`) where it aligns, EOS alone as it has no link. `tokens` (A,), one a row of the last
        step (greedy search), or (A, X) continuing each sentence's hypotheses `beams` (A, X)."""
        links = self.attended()
        if links is None:
            return tokens  # a search that does not align does no work here
        a = tokens.shape[0]
        rows = torch.arange(a, device=tokens.device)
        if beams is not None:  # rows of the hypotheses that the tokens continue
            rows = rows.unsqueeze(1) * (links.shape[0] // a) + beams
        return torch.where(tokens == EOS_ID, tokens, tokens + links[rows] * LINK)

    def attended(self) -> Tensor | None:
        """(rows,) the source position (EOS left out) each hypothesis row attended to most at the
        last step, predicting its next piece; None where the search does not align."""
        if self.alignable is None or self.states[0].attended is None:
            return None
        weights = self.states[0].attended[:, -1]  # (rows, S)
        allowed = self.alignable.repeat_interleave(weights.shape[0] // self.alignable.shape[0], dim=0)
        return weights.masked_fill(~allowed, -1.0).argmax(dim=1)

    def target_ids(self, ids: Tensor) -> Tensor:
        """Ids of the batch's vocabulary as target ids (the special ids are both)."""
        return ids if self.vocab is None else self.vocab[ids]


def _projection(model: Transformer, vocab: Tensor) -> Callable[[Tensor], Tensor]:
    """The model's pre-softmax projection onto the pieces `vocab` alone: its rows of the weights
    (and of the output bias), selected once per batch."""
    bias = None if model.output_bias is None else model.output_bias.index_select(0, vocab)
    proj = model.output_proj
    if isinstance(proj, int8.Int8Linear):
        rows = proj.rows(vocab)
        return rows if bias is None else lambda hidden: rows(hidden) + bias
    weight = (model.tgt_embed.tokens.weight if proj is None else proj.weight).index_select(0, vocab)
    return lambda hidden: F.linear(hidden, weight, bias)


ENCODE_TOKENS = 512


def _encode(model: Transformer, src: Tensor) -> tuple[Tensor, Tensor]:
    """`model.encode(src)`, on CPU in parts of about ENCODE_TOKENS source tokens: a batch's
    activations then stay in the core's cache (encoding 2,500 lines in batches of 4,096 tokens
    took twice as long as in batches of 512). Like `--batch-tokens`, the parts can move a float
    sum in its last bits; 1,000 test lines translated identically in fp32 and int8."""
    rows = max(1, ENCODE_TOKENS // src.shape[1])
    if src.device.type != "cpu" or src.shape[0] <= rows:
        return model.encode(src)
    parts = [model.encode(part) for part in src.split(rows)]
    return torch.cat([memory for memory, _ in parts]), torch.cat([mask for _, mask in parts])


class Ensemble:
    """One or more models decoded in lockstep; their log-probabilities are averaged."""

    def __init__(self, models: list[Transformer]):
        self.models = models

    @property
    def start_id(self) -> int:
        """The first token fed to the decoder (the models agree: checked at load)."""
        return self.models[0].cfg.start_id

    def start(
        self, src: Tensor, *, vocab: Tensor | None = None, align: bool = False, steps: int | None = None
    ) -> Batch:
        """Encode a batch, one hypothesis row per sentence (a beam search's `Batch.reorder` widens
        it to the beam); `vocab`: the target ids to score (a shortlist's, `Shortlist.vocabulary`),
        None for the whole vocabulary; `align`: record the first model's cross-attention at the
        layer that aligns (`alignment.default_layer`); `steps`: the most steps the search takes,
        the positions its caches are allocated for."""
        states = []
        for i, model in enumerate(self.models):
            memory, src_mask = _encode(model, src)
            watch = default_layer(model) if align and i == 0 else None
            states.append(model.init_state(memory, src_mask, watch=watch, capacity=steps))
        projections = [None if vocab is None else _projection(model, vocab) for model in self.models]
        alignable = (src != PAD_ID) & (src != EOS_ID) if align else None
        return Batch(states, vocab, projections, alignable)

    def step(self, tokens: Tensor, batch: Batch, normalize: bool = True) -> Tensor:
        """Feed the newest tokens (rows, 1), ids of the batch's vocabulary -> log-probabilities
        over it (rows, V); the batch's decoder states advance. `normalize=False`: a single model's
        logits instead (an ensemble averages log-probabilities whatever it is asked), whose largest
        is the likeliest piece all the same."""
        if batch.vocab is not None:
            tokens = batch.vocab[tokens]
        normalize = normalize or len(self.models) > 1
        outputs = [
            model.decode_step(tokens, state, project, normalize)
            for model, state, project in zip(self.models, batch.states, batch.projections, strict=True)
        ]
        log_probs = outputs[0][0] if len(outputs) == 1 else torch.stack([o[0] for o in outputs]).mean(dim=0)
        log_probs[:, PAD_ID] = float("-inf")
        log_probs[:, BOS_ID] = float("-inf")
        batch.states = [o[1] for o in outputs]
        return log_probs

    @property
    def max_positions(self) -> int:
        return min(m.cfg.max_positions for m in self.models)
