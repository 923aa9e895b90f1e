"""The Transformer (§3): encoder, decoder, weight tying and incremental decoding.

Pure nn.Module code: no files, printing, logging or device choice. The model returns
logits or log-probabilities, never a loss.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from nmt_cli.config import ModelConfig
from nmt_cli.model.kv_cache import KVCache, SelfCache, StaticKVCache
from nmt_cli.model.layers import Embedding
from nmt_cli.model.packing import Packing, packing_supported
from nmt_cli.model.stacks import DecoderLayer, EncoderLayer, ScorePair
from nmt_cli.special_ids import PAD_ID


@dataclass
class DecoderState:
    """Everything decode_step needs besides the next tokens; reordered as one value by beam search."""

    memory_kv: list[KVCache]
    """Cross-attention keys/values per decoder layer, projected once from the encoder output."""
    self_kv: list[SelfCache | None]
    """Self-attention keys/values of the steps so far, per decoder layer: written in place where
    the state was made with a capacity (`StaticKVCache`), so a state is stepped or reordered once
    and decoding goes on from the state that returned."""
    src_mask: Tensor
    """(B, 1, 1, S), True at real source positions."""
    step: int = 0
    """Number of target tokens already fed."""
    beam: int = 1
    """Hypotheses per sentence: rows r*beam .. r*beam+beam-1 of the self-attention cache (and of
    the tokens fed) belong to row r of memory_kv and src_mask, which are not repeated per beam."""
    watch: int | None = None
    """The decoder layer whose cross-attention each step records in `attended` (word alignment
    during search); None records nothing."""
    attended: Tensor | None = None
    """The watched layer's cross-attention of the last step, averaged over heads: (B, T, S)."""

    def reorder(self, rows: Tensor, sentences: Tensor | None = None, beam: int | None = None) -> DecoderState:
        """Keep hypothesis `rows` (indices into the current rows) in that order; `sentences`, when
        given, are the memory rows that remain (sentences leaving the batch); `beam`, when given,
        the hypotheses per sentence from now on (a first step decoded once per sentence)."""
        memory_kv, src_mask = self.memory_kv, self.src_mask
        if sentences is not None:
            memory_kv = [kv.index_select(sentences) for kv in memory_kv]
            src_mask = src_mask.index_select(0, sentences)
        self_kv = [kv.reordered(rows) if kv is not None else None for kv in self.self_kv]
        beam = self.beam if beam is None else beam
        return DecoderState(memory_kv, self_kv, src_mask, self.step, beam, self.watch)


def window_mask(t_q: int, t_k: int, radius: int, causal: bool, device: torch.device) -> Tensor:
    """(t_q, t_k) boolean mask for queries at the last t_q of t_k positions, True where allowed.

    Restricted self-attention (§4) lets position i see j only when |i - j| <= radius
    (radius 0 means unrestricted); the decoder also never sees the future.
    """
    i = torch.arange(t_k - t_q, t_k, device=device).unsqueeze(1)  # (t_q, 1) absolute query positions
    j = torch.arange(t_k, device=device).unsqueeze(0)  # (1, t_k)
    allowed = torch.ones(t_q, t_k, dtype=torch.bool, device=device)
    if causal:
        allowed &= j <= i
    if radius > 0:
        allowed &= (i - j).abs() <= radius
    return allowed


class Transformer(nn.Module):
    """Encoder-decoder Transformer. Source ids end in EOS; target input starts with
    `cfg.start_id` (BOS unless the model was imported)."""

    def __init__(self, cfg: ModelConfig, initialize: bool = True):
        """`initialize=False` draws no initial weights, for a model whose weights are loaded next
        (see `holding`)."""
        super().__init__()
        assert cfg.src_vocab_size > 0 and cfg.tgt_vocab_size > 0, "vocabulary sizes come from the data"
        self.cfg = cfg
        d = cfg.d_model

        def tokens(size: int) -> nn.Embedding:
            weight = None if initialize else torch.empty(size, d)  # given: nn.Embedding draws none
            return nn.Embedding(size, d, padding_idx=PAD_ID, _weight=weight)

        tgt_tokens = tokens(cfg.tgt_vocab_size)
        three_way = cfg.share_embeddings and cfg.joint_vocab and cfg.src_vocab_size == cfg.tgt_vocab_size
        src_tokens = tgt_tokens if three_way else tokens(cfg.src_vocab_size)
        at = (cfg.max_positions, cfg.positions, cfg.dropout, cfg.scale_embeddings, initialize)
        self.src_embed = Embedding(src_tokens, d, *at)
        self.tgt_embed = Embedding(tgt_tokens, d, *at)
        self.encoder = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.encoder_layers))
        self.decoder = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.decoder_layers))
        # Pre-norm leaves the stacks' outputs unnormalised; post-norm already ends in a LayerNorm.
        pre = cfg.norm == "pre"
        self.encoder_norm = nn.LayerNorm(d) if pre else nn.Identity()
        self.decoder_norm = nn.LayerNorm(d) if pre else nn.Identity()
        self.output_proj = None if cfg.share_embeddings else nn.Linear(d, cfg.tgt_vocab_size, bias=False)
        # Marian's final_logits_bias; a parameter of its own so that a tied projection keeps it.
        self.output_bias = nn.Parameter(torch.zeros(cfg.tgt_vocab_size)) if cfg.output_bias else None
        if initialize:
            self._init_weights()

    @classmethod
    def holding(cls, cfg: ModelConfig, weights: dict[str, Tensor]) -> Transformer:
        """A model made of `weights` (a state dict, whose tensors it then holds), built without
        drawing the initial weights they replace: on the meta device, which allocates nothing.
        Drawing them would be most of a large model's start-up (docs/benchmarks.md)."""
        with torch.device("meta"):
            model = cls(cfg, initialize=False)
        model.load_state_dict(weights, assign=True)
        for embed in (model.src_embed, model.tgt_embed):
            embed.reset_table()
        return model

    def _init_weights(self) -> None:
        for name, p in self.named_parameters():
            if p.dim() > 1 and "embed" not in name:
                nn.init.xavier_uniform_(p)
            elif p.dim() == 1 and name.endswith(".bias"):
                nn.init.zeros_(p)
        for emb in {id(e): e for e in (self.src_embed.tokens, self.tgt_embed.tokens)}.values():
            # N(0, d^-1/2) so that the sqrt(d_model) scaling gives unit-variance inputs.
            nn.init.normal_(emb.weight, std=self.cfg.d_model**-0.5)
            with torch.no_grad():
                emb.weight[PAD_ID].zero_()

    def encode(self, src: Tensor) -> tuple[Tensor, Tensor]:
        """src (B, S) -> memory (B, S, d_model) and src_mask (B, 1, 1, S), True at real tokens."""
        src_mask = (src != PAD_ID)[:, None, None, :]  # (B, 1, 1, S)
        mask = src_mask
        if self.cfg.attention_window > 0:
            s = src.shape[1]
            window = window_mask(s, s, self.cfg.attention_window, False, src.device)
            # A query always sees itself: a padding position more than the radius away from
            # every real token would otherwise see no key at all, and the NaN of its empty
            # softmax would reach real positions through the next layer's values.
            diagonal = torch.eye(s, dtype=torch.bool, device=src.device)
            mask = (src_mask & window) | diagonal
        x = self.src_embed(src)
        scores: Tensor | None = None  # RealFormer's raw scores, from the first layer on
        for layer in self.encoder:
            x, scores = layer(x, mask, scores)
        return self.encoder_norm(x), src_mask

    def _decode(self, tgt_in: Tensor, state: DecoderState) -> tuple[Tensor, DecoderState]:
        """Run the decoder over tgt_in (B, T) at positions state.step.. -> hidden (B, T, d_model)."""
        t, start = tgt_in.shape[1], state.step
        x = self.tgt_embed(tgt_in, start)
        self_mask, is_causal = self._target_mask(t, start, tgt_in.device)
        scores: ScorePair = (None, None)
        new_kv: list[SelfCache | None] = []
        attended: list[Tensor] = []
        for i, (layer, cache, memory_kv) in enumerate(
            zip(self.decoder, state.self_kv, state.memory_kv, strict=True)
        ):
            watched = attended if i == state.watch else None
            x, cache, scores = layer(
                x, self_mask, is_causal, cache, memory_kv, state.src_mask, scores, state.beam, watched
            )
            new_kv.append(cache)
        step = attended[0].mean(dim=1) if attended else None
        state = DecoderState(
            state.memory_kv, new_kv, state.src_mask, start + t, state.beam, state.watch, step
        )
        return self.decoder_norm(x), state

    @property
    def encoder_layers(self) -> list[EncoderLayer]:
        """The encoder stack with its layers' type (nn.ModuleList hands out plain Modules)."""
        return cast(list[EncoderLayer], list(self.encoder))

    @property
    def decoder_layers(self) -> list[DecoderLayer]:
        """The decoder stack with its layers' type (nn.ModuleList hands out plain Modules)."""
        return cast(list[DecoderLayer], list(self.decoder))

    def _target_mask(self, t: int, start: int, device: torch.device) -> tuple[Tensor | None, bool]:
        """Decoder self-attention of t new positions after `start` cached ones: (mask, is_causal)."""
        if self.cfg.attention_window == 0:
            return None, t > 1  # a single new query may see every key there is
        return window_mask(t, start + t, self.cfg.attention_window, True, device), False

    def project(self, hidden: Tensor) -> Tensor:
        """Pre-softmax linear transformation (§3.4): hidden (..., d_model) -> logits (..., V)."""
        if self.output_proj is None:
            return F.linear(hidden, self.tgt_embed.tokens.weight, self.output_bias)
        logits = self.output_proj(hidden)
        return logits if self.output_bias is None else logits + self.output_bias

    def init_state(
        self, memory: Tensor, src_mask: Tensor, watch: int | None = None, capacity: int | None = None
    ) -> DecoderState:
        """The state before the first target token, one row per sentence (`DecoderState.reorder`
        widens it to a beam); it records decoder layer `watch`'s cross-attention
        (`DecoderState.attended`). `capacity`: the most target positions that will be fed, for
        which the first step allocates the self-attention caches (`StaticKVCache`); None for a
        teacher-forced pass, which keeps its keys and values as they are (a later step then copies
        them into buffers that double)."""
        memory_kv = [layer.cross_attn.project_kv(memory) for layer in self.decoder_layers]
        self_kv: list[SelfCache | None] = [
            None if capacity is None else StaticKVCache(capacity) for _ in self.decoder_layers
        ]
        return DecoderState(memory_kv, self_kv, src_mask, watch=watch)

    def forward(
        self,
        src: Tensor,
        tgt_in: Tensor,
        rows: Tensor | None = None,
        project: bool = True,
        packing: tuple[Packing, Packing] | None = None,
    ) -> Tensor:
        """Teacher-forced pass: src (B, S), tgt_in (B, T) -> logits (B, T, V).

        `rows` (N,), flat indices into the B x T target positions, keeps those positions only:
        logits (N, V), so that a loss projects and scores the real target tokens, not padding.
        `project=False` returns the decoder's output before the pre-softmax projection, (B, T,
        d_model) or (N, d_model), for a loss that projects it itself (see `output_layer`).
        `packing`: src (N_s,) and tgt_in (N_t,) are packed batches laid out by these (source,
        target) packings (see model/packing.py) -> (N_t, V) or (N_t, d_model); `rows` unused."""
        if packing is not None:
            hidden = self._forward_packed(src, tgt_in, *packing)
            return self.project(hidden) if project else hidden
        memory, src_mask = self.encode(src)
        hidden, _ = self._decode(tgt_in, self.init_state(memory, src_mask))
        if rows is not None:
            hidden = hidden.reshape(-1, hidden.shape[-1]).index_select(0, rows)
        return self.project(hidden) if project else hidden

    def _forward_packed(self, src: Tensor, tgt_in: Tensor, sources: Packing, targets: Packing) -> Tensor:
        assert packing_supported(self.cfg), "packed batches need a model without RealFormer scores or windows"
        memory = self.src_embed(src, positions=sources.positions)
        for layer in self.encoder_layers:
            memory = layer.forward_packed(memory, sources)
        memory = self.encoder_norm(memory)
        x = self.tgt_embed(tgt_in, positions=targets.positions)
        for block in self.decoder_layers:
            x = block.forward_packed(x, targets, memory, sources)
        return self.decoder_norm(x)

    def output_layer(self) -> tuple[Tensor, Tensor | None]:
        """The pre-softmax projection's (weight (V, d_model), bias (V,) or None): `project(h)` is
        `h @ weight.T + bias`."""
        weight = self.tgt_embed.tokens.weight if self.output_proj is None else self.output_proj.weight
        return weight, self.output_bias

    def cross_attention(self, src: Tensor, tgt_in: Tensor, layer: int = -1) -> Tensor:
        """Encoder-decoder attention of decoder `layer` (0-based, negative from the top) in a
        teacher-forced pass: src (B, S), tgt_in (B, T) -> probabilities (B, h, T, S).

        Row t is the attention while predicting the token after tgt_in[:, t]; it sums to 1 over
        the real source positions (padding gets 0). Decoding computes them only for a watched
        layer (`DecoderState.watch`).
        """
        index = range(len(self.decoder))[layer]  # IndexError for a layer the model does not have
        memory, src_mask = self.encode(src)
        blocks = self.decoder_layers[: index + 1]
        memory_kv = [block.cross_attn.project_kv(memory) for block in blocks]
        t = tgt_in.shape[1]
        x = self.tgt_embed(tgt_in)
        self_mask, is_causal = self._target_mask(t, 0, tgt_in.device)
        scores: ScorePair = (None, None)
        attended: list[Tensor] = []
        for block, kv in zip(blocks, memory_kv, strict=True):
            watched = attended if block is blocks[index] else None
            x, _, scores = block(x, self_mask, is_causal, None, kv, src_mask, scores, 1, watched)
        return attended[0]

    def decode_step(
        self,
        tokens: Tensor,
        state: DecoderState,
        project: Callable[[Tensor], Tensor] | None = None,
        normalize: bool = True,
    ) -> tuple[Tensor, DecoderState]:
        """Feed the newest target tokens (B, 1) -> log-probabilities (B, V) of the next, and the new
        state. `project` replaces the pre-softmax projection (a vocabulary shortlist's: V is then
        its size, and the softmax is over those pieces); `normalize=False` returns the logits, in
        float32, without the softmax."""
        hidden, state = self._decode(tokens, state)
        logits = (project or self.project)(hidden[:, -1]).float()  # (B, V)
        return (logits.log_softmax(dim=-1) if normalize else logits), state


def count_parameters(model: nn.Module) -> int:
    """Distinct trainable parameters (tied weights counted once)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
