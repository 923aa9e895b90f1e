"""The recipe schema: `RunConfig` and its sections ([model], [train], [decode], [average]), each
checked when a recipe is loaded. `recipe` reads and writes them as TOML; what a user gives a command
beside the recipe is in `user_settings`. The values each key may take are declared as the decode
settings' are (`ranges`): `MODEL_BOUNDS`, `TRAIN_BOUNDS`, and `ranges.SETTINGS` for [decode]; each
section's `validate` checks them, then the rules between keys.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from nmt_cli.errors import InputError, SettingError
from nmt_cli.ranges import SETTINGS, Allowed, Range, check_each
from nmt_cli.special_ids import BOS_ID, EOS_ID, PAD_ID

DECODER_START = {"bos": BOS_ID, "eos": EOS_ID, "pad": PAD_ID}
POSITIONS = ("sinusoidal", "learned", "sinusoidal-halves", "sinusoidal-fairseq")
ACTIVATIONS = ("relu", "gelu", "swish")

MAX_POSITIONS = 100_000
"""The most positions a model may have: decode.max_len_b's bound, and a table of 400 MB at
d_model 1024; a setting of 10**12 would ask for terabytes before the first step."""

MODEL_BOUNDS: dict[str, Allowed] = {
    **dict.fromkeys("encoder_layers decoder_layers d_model d_ff heads d_k d_v".split(), Range(int, 1)),
    "max_positions": Range(int, 1, MAX_POSITIONS),
    **dict.fromkeys("dropout attention_dropout activation_dropout".split(), Range(float, 0, 1, below=True)),
    "norm": ("post", "pre"),
    "positions": POSITIONS,
    "activation": ACTIVATIONS,
    "decoder_start": tuple(DECODER_START),
    "attention_window": Range(int, 0),  # 0: unrestricted
}


@dataclass
class ModelConfig:
    """The Transformer's hyper-parameters; names follow the paper's Table 3."""

    encoder_layers: int = 6
    """N for the encoder stack (§3.1)."""
    decoder_layers: int = 6
    """N for the decoder stack (§3.1)."""
    d_model: int = 512
    """Width of every sub-layer output and embedding (§3.1)."""
    d_ff: int = 2048
    """Inner width of the position-wise feed-forward network (§3.3)."""
    heads: int = 8
    """h, the number of attention heads (§3.2.2)."""
    d_k: int = 64
    """Query/key width per head (§3.2.2)."""
    d_v: int = 64
    """Value width per head (§3.2.2)."""
    dropout: float = 0.1
    """P_drop: on sub-layer outputs and on embedding+position sums (§5.4)."""
    attention_dropout: float = 0.0
    """Dropout on attention weights (not in the paper; fairseq's attention_dropout)."""
    activation_dropout: float = 0.0
    """Dropout after the feed-forward ReLU (not in the paper)."""
    norm: str = "post"
    """"post": LayerNorm(x + Dropout(Sublayer(x))) as in the paper; "pre": x + Dropout(Sublayer(LN(x)))."""
    positions: str = "sinusoidal"
    """"sinusoidal" (§3.5: sines and cosines interleaved) or "learned" position embeddings; for
    imported models, Marian's "sinusoidal-halves" (all sines, then all cosines) and fairseq's
    "sinusoidal-fairseq" (halves, frequencies spaced over d/2 - 1 steps, positions from 2)."""
    share_embeddings: bool = True
    """Tie decoder input embedding and pre-softmax weights (§3.4); also the source embedding
    when the vocabulary is joint."""
    max_positions: int = 1024
    """Longest sequence (in pieces, with EOS) the model accepts."""
    residual_attention: bool = False
    """RealFormer: add the previous layer's raw attention scores to this layer's."""
    attention_window: int = 0
    """Restricted self-attention (§4, Table 1): attend only within radius r; 0 means unrestricted."""
    activation: str = "relu"
    """The feed-forward non-linearity: "relu" (Eq. 2); "gelu" or "swish" (imported models)."""
    scale_embeddings: bool = True
    """Multiply token embeddings by sqrt(d_model) (§3.4)."""
    output_bias: bool = False
    """A bias on the pre-softmax projection (Marian's final_logits_bias); the paper has none."""
    decoder_start: str = "bos"
    """The first token fed to the decoder: "bos"; "eos" as fairseq, "pad" as Marian."""
    src_vocab_size: int = 0
    """Set from the prepared data; not a recipe value."""
    tgt_vocab_size: int = 0
    """Set from the prepared data; not a recipe value."""
    joint_vocab: bool = True
    """Set from the prepared data: source and target share one sentencepiece model."""

    @property
    def start_id(self) -> int:
        """The id of `decoder_start`."""
        return DECODER_START[self.decoder_start]

    def validate(self, where: str) -> None:
        _check_bounds("model", MODEL_BOUNDS, self, where)
        _check(
            self.d_model % self.heads == 0,
            where,
            "model.d_model",
            f"{self.d_model} is not divisible by model.heads = {self.heads}",
        )


TRAIN_BOUNDS: dict[str, Allowed] = {
    **dict.fromkeys("max_tokens update_freq warmup log_every_updates".split(), Range(int, 1)),
    # 0: none, no limit or never (pad_to_multiple: the device's default).
    **dict.fromkeys("max_updates max_epochs save_every_updates keep_last".split(), Range(int, 0)),
    **dict.fromkeys("valid_every_updates patience update_tokens pad_to_multiple".split(), Range(int, 0)),
    **dict.fromkeys("max_minutes save_every_minutes clip_norm".split(), Range(float, 0)),
    **dict.fromkeys("lr lr_scale adam_eps".split(), Range(float, 0, above=True)),
    "label_smoothing": Range(float, 0, 1, below=True),
    "seed": Range(int, 0, 2**63 - 1),
    "lr_schedule": ("noam", "inverse_sqrt", "linear"),
    "precision": ("bf16", "fp16", "fp32"),
    "checkpoint_precision": ("fp32", "train"),
    "best_metric": ("loss", "bleu", "chrf"),
}


@dataclass
class TrainConfig:
    """The training recipe (§5)."""

    max_tokens: int = 4096
    """Tokens per batch, counted as padded size of the larger side."""
    update_freq: int = 1
    """Batches accumulated into one update (effective batch = max_tokens x update_freq x GPUs)."""
    update_tokens: int = 0
    """Tokens wanted per update (the paper: ~25,000, §5.1); when set, update_freq becomes
    ceil(update_tokens / (max_tokens x processes)), so one recipe fits 1, 8 or 64 GPUs."""
    fit_batch: bool = False
    """With update_tokens, on a GPU: split an update into as few batches as the GPU's memory holds
    (one of update_tokens where it fits), never smaller than max_tokens; found at the start of a
    new run by trying, and recorded in its config.toml as max_tokens and update_freq."""
    label_smoothing: float = 0.1
    """eps_ls (§5.4)."""
    lr_schedule: str = "noam"
    """"noam": d_model^-0.5 * min(step^-0.5, step * warmup^-1.5) * lr_scale (§5.3, Eq. 3);
    "inverse_sqrt": linear warm-up to `lr`, then lr * sqrt(warmup / step); "linear": linear warm-up
    to `lr` and a linear decay to 0 at the end of the budget (max_updates or max_minutes, whichever
    ends the run first), the lower of the two."""
    warmup: int = 4000
    """warmup_steps (§5.3)."""
    lr_scale: float = 1.0
    """Multiplier on the noam schedule."""
    lr: float = 1e-3
    """Peak learning rate of the inverse_sqrt and linear schedules."""
    adam_betas: list[float] = field(default_factory=lambda: [0.9, 0.98])
    """Adam beta1, beta2 (§5.3)."""
    adam_eps: float = 1e-9
    """Adam epsilon (§5.3)."""
    clip_norm: float = 0.0
    """Clip the gradient norm to this value; 0 disables (the paper does not clip)."""
    max_updates: int = 100000
    """Stop after this many updates; 0 means no limit."""
    max_epochs: int = 0
    """Stop after this many epochs; 0 means no limit."""
    max_minutes: float = 0.0
    """Stop after this much wall time of training; 0 means no limit."""
    precision: str = "fp32"
    """"bf16" (autocast, CPU and GPU), "fp16" (autocast with loss scaling, GPU only) or "fp32"."""
    save_every_updates: int = 1000
    """Write a checkpoint every this many updates; 0 disables."""
    save_every_minutes: float = 10.0
    """Write a checkpoint every this many minutes (the paper: 10); 0 disables."""
    keep_last: int = 5
    """Numbered checkpoints kept on disk (best and last are kept besides)."""
    checkpoint_precision: str = "fp32"
    """The weights of numbered checkpoints, which hold weights only: "fp32", or "train" for the
    training precision's (bf16 or fp16: half the disk; `nmt average` sums them in fp32).
    checkpoint_last.pt holds fp32 weights and the training state that resume reads."""
    valid_every_updates: int = 1000
    """Validate (loss, perplexity, BLEU) every this many updates; 0 disables."""
    valid_bleu: bool = True
    """Decode the valid set during validation and report sacreBLEU."""
    patience: int = 0
    """Stop after this many validations without a better best_metric; 0 disables."""
    best_metric: str = "loss"
    """What checkpoint_best.pt and patience follow: valid "loss", or "bleu" or "chrf" of the decoded
    valid set (these need valid_bleu)."""
    corpus_weights: list[float] = field(default_factory=list)
    """Share of each training corpus (in `nmt prepare --train` order) in every epoch, e.g. [1, 1]
    for half and half; an epoch keeps the corpora's total size, drawing a smaller corpus's share
    with repeats. Empty: each pair once an epoch."""
    log_every_updates: int = 50
    """Write a metrics.jsonl record every this many updates. The host reads the figures of the
    updates (loss, gradient norm, whether one was skipped) only then, and to validate and save:
    on a GPU, each read waits for the device."""
    tensorboard: str = ""
    """A directory for TensorBoard logs (`nmt train --tensorboard DIR`, as fairseq's
    --tensorboard-logdir), relative to where nmt train runs: the train and valid records of
    metrics.jsonl also as scalars, in DIR/<run directory's name>. "" writes none."""
    compile: bool = False
    """Train through torch.compile of the model: its layers fused into fewer, larger kernels (a
    GPU's gain; compiling takes a minute or more, once: the graph is compiled for dynamic batch
    lengths and rows). Validation and checkpoints use the model as it is."""
    half_weights: bool = False
    """With precision "bf16": train through a bf16 copy of the model (weights, activations and the
    residual stream in bf16, no autocast casts), Adam updating the fp32 weights that checkpoints
    hold. Fewer, cheaper kernels: a GPU's gain."""
    packed: bool = False
    """Train on packed batches (model/packing.py): the sentences end to end, no padding; on a GPU
    attention is torch's variable-length flash attention. Not with model.residual_attention or
    model.attention_window."""
    pad_to_multiple: int = 0
    """Pad batch lengths to a multiple of this, and cut batches at a multiple of this many rows
    where they can be: few distinct shapes, which compiled graphs reuse. 0: 8 with train.compile
    on a GPU, 1 (no padding) otherwise: eager kernels take any length."""
    seed: int = 1
    """Seed for initialisation, dropout and batch order."""

    def for_processes(self, processes: int) -> TrainConfig:
        """These settings for `processes` training processes: with update_tokens set, update_freq
        gives that many tokens per update whatever the number of processes."""
        if self.update_tokens <= 0:
            return self
        update_freq = max(1, math.ceil(self.update_tokens / (self.max_tokens * processes)))
        return dataclasses.replace(self, update_freq=update_freq)

    def validate(self, where: str) -> None:
        _check_bounds("train", TRAIN_BOUNDS, self, where)
        _check(
            self.lr_schedule != "linear" or self.max_updates > 0 or self.max_minutes > 0,
            where,
            "train.lr_schedule",
            '"linear" decays to 0 at the end of the budget: set train.max_updates or train.max_minutes',
        )
        _check(
            self.best_metric == "loss" or self.valid_bleu,
            where,
            "train.best_metric",
            f'"{self.best_metric}" needs train.valid_bleu = true (the valid set is decoded to score it)',
        )
        _check(
            all(w >= 0 for w in self.corpus_weights)
            and (not self.corpus_weights or any(self.corpus_weights)),
            where,
            "train.corpus_weights",
            "must not be negative, and one at least must be positive",
        )
        _check(
            not (self.half_weights and self.precision == "fp16"),
            where,
            "train.half_weights",
            'is a bf16 mode: use train.precision = "bf16", or train.half_weights = false with fp16',
        )
        _check(
            len(self.adam_betas) == 2 and all(0.0 <= b < 1.0 for b in self.adam_betas),
            where,
            "train.adam_betas",
            "must be two numbers in [0, 1)",
        )


@dataclass(frozen=True)
class DecodeConfig:
    """Beam search settings (§6.1: beam 4, alpha 0.6, max length input + 50). Frozen: a call's
    settings are a value that decoding requests are grouped by."""

    beam: int = 4
    """Beam size; 1 is greedy search."""
    lenpen: float = 0.6
    """alpha of the length penalty."""
    lenpen_style: str = "gnmt"
    """"gnmt": ((5 + |Y|) / 6)^alpha (the paper's); "fairseq": |Y|^alpha."""
    max_len_a: float = 1.0
    """Maximum output length = max_len_a * source length + max_len_b."""
    max_len_b: int = 50
    """See max_len_a."""
    min_len: int = 1
    """Fewest target tokens before EOS may end a hypothesis (0 allows an empty translation); the
    maximum length wins where the two meet."""
    shortlist: bool = False
    """Score each batch over its vocabulary shortlist (`nmt shortlist` stores one in a checkpoint)
    instead of the whole target vocabulary."""
    early_stopping: bool = True
    """Beam search ends a sentence once `beam` hypotheses have finished (fairseq, Marian). False:
    it goes on while the best running hypothesis, scored at its current length, could still beat
    the worst finished one, which it then replaces (transformers' generate with early_stopping
    unset, as OPUS-MT models are run)."""

    def validate(self, where: str) -> None:
        _check_bounds(
            "decode", {item.name: SETTINGS[item.name] for item in dataclasses.fields(self)}, self, where
        )


@dataclass
class AverageConfig:
    """Checkpoint averaging (§6.1: base the last 5, big the last 20)."""

    last: int = 5
    """How many of the latest checkpoints `nmt average --run` averages."""

    def validate(self, where: str) -> None:
        _check_bounds("average", {"last": Range(int, 1)}, self, where)


@dataclass
class RunConfig:
    """A whole recipe: one section per dataclass above."""

    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)
    average: AverageConfig = field(default_factory=AverageConfig)

    def validate(self, where: str) -> None:
        for section in dataclasses.fields(self):
            getattr(self, section.name).validate(where)


def _check(ok: bool, where: str, key: str, problem: str) -> None:
    if not ok:
        raise InputError(f"{where}: {key}: {problem}")


def _check_bounds(section: str, bounds: Mapping[str, Allowed], values: object, where: str) -> None:
    """`ranges.check_each` worded for a recipe: the file, the key and the value as TOML spells it."""
    try:
        check_each(bounds, values)
    except SettingError as err:
        shown = json.dumps(err.value)
        raise InputError(f"{where}: {section}.{err.name} = {shown}: {err.problem}") from None
