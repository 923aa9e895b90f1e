"""The decode rules: what one call decodes with, checked once for every front end.

`nmt translate`, the Python API and `nmt serve` each gather what the user gave (options,
keyword arguments, JSON fields) into `DecodeOverrides` and `Sampling`, then call `resolve`,
which applies the rules between settings and fills in the checkpoint's recipe for the rest (a
command checks them first with `check_before_load`, before it loads the checkpoint).
Every value is checked against `ranges.SETTINGS`; every refusal is a `SettingError` naming the
setting, which the command line words as `--flag`, the API as `name=` and HTTP as its field.
No front end checks a decode setting itself. Pure Python: no torch, so the command line can
check its options before it loads anything.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypedDict

from nmt_cli.config import DecodeConfig
from nmt_cli.data.glossary import Glossary
from nmt_cli.errors import InputError, SettingError, literal
from nmt_cli.ranges import check_setting
from nmt_cli.user_settings import DecodeOverrides

BATCH_TOKENS = 4096
"""Source tokens per batch by default on a CPU (`--batch-tokens`, `batch_tokens=`)."""
BATCH_TOKENS_CUDA = 32768
"""Source tokens per batch by default on a CUDA GPU. A search step costs a GPU about the same
launches for a few hundred rows as for a few thousand, so batches of 4,096 tokens (about 200
sentences of beam 4) leave it waiting on the host. A batch of 32,768 holds 8 times the rows; its
self-attention caches (two sets a decoder layer, `StaticKVCache`) take a base model in bf16
about 2.5 GB for sentences of 25 tokens at the default limits (source length + 50), more for
shorter sentences, whose limits add more positions per source token."""


def default_batch_tokens(device_type: str) -> int:
    """Source tokens per batch where none are given, for a device of this type ("cpu", "cuda")."""
    return BATCH_TOKENS_CUDA if device_type == "cuda" else BATCH_TOKENS


SAMPLING_FIELDS = ("topk", "topp", "temperature", "seed")
DEFAULT_LIMITS = {"topk": 10, "topp": 0.9}
"""Each sampling method's limit where it is not given."""


@dataclass(frozen=True)
class Sampling:
    """Draw each next piece at random instead of searching: the usual way to back-translate
    monolingual text (Edunov et al., 2018). One sample per line. Checked on creation."""

    method: str = "topk"
    """"topk": among the `topk` likeliest pieces; "topp": among the fewest likeliest pieces whose
    probabilities add up to `topp` (nucleus sampling, Holtzman et al., 2020)."""
    topk: int | None = None
    """For "topk" only (10 when not given; 0 draws from the whole vocabulary); None for "topp"."""
    topp: float | None = None
    """For "topp" only (0.9 when not given); None for "topk"."""
    temperature: float = 1.0
    """Log-probabilities are divided by it before drawing: below 1 sharper, above 1 flatter."""
    seed: int = 1
    """A line's sample depends on the line, the model, the options and this seed only: not on
    the batch, the process or the other lines (identical lines get identical samples)."""

    def __post_init__(self) -> None:
        check_setting("sampling", self.method)
        # The other method's limit would be ignored: refused, as the command line refuses it.
        other = "topp" if self.method == "topk" else "topk"
        if getattr(self, other) is not None:
            raise SettingError(
                other, getattr(self, other), f"goes with {{sampling}} {other}, not {{sampling}} {self.method}"
            )
        if getattr(self, self.method) is None:
            object.__setattr__(self, self.method, DEFAULT_LIMITS[self.method])
        for name in (self.method, "temperature", "seed"):
            check_setting(name, getattr(self, name))
        for name in ("topp", "temperature"):  # a JSON or Python integer such as 1
            if getattr(self, name) is not None:
                object.__setattr__(self, name, float(getattr(self, name)))

    @classmethod
    def given(
        cls,
        method: object,
        topk: object = None,
        topp: object = None,
        temperature: object = None,
        seed: object = None,
    ) -> Sampling | None:
        """Sampling as a command line or a request gives it, one setting at a time (None: not
        given): None without a method, which the others need; each method takes its own limit."""
        given = {"topk": topk, "topp": topp, "temperature": temperature, "seed": seed}
        given = {name: value for name, value in given.items() if value is not None}
        if method is None:
            for name, value in given.items():
                raise SettingError(name, value, "goes with {sampling} topk or {sampling} topp")
            return None
        check_setting("sampling", method)
        return cls(str(method), **given)  # type: ignore[arg-type]


@dataclass(frozen=True)
class DecodeSettings:
    """One call's settings with every rule checked (made by `resolve` from what a user gave; code
    that decodes a recipe's own settings, as validation does, builds it directly). Frozen and
    comparable: `nmt serve` decodes requests with equal settings together."""

    search: DecodeConfig
    nbest: int = 1
    batch_tokens: int = BATCH_TOKENS
    sampling: Sampling | None = None
    """Draw one translation per line instead of searching (the search then has beam 1)."""
    scores: bool = True
    """Whether the caller reads the hypotheses' scores; without them, greedy search skips the
    softmax and gives NaN scores."""
    alignments: bool = False
    """Whether the best hypothesis of each line gets its word alignment (`decoding.alignment`)."""
    glossary: Glossary | None = None
    """Terms whose target side a translation must contain where the line holds the source side."""
    ordered_constraints: bool = False
    """Whether a line's phrases must appear in the order given (else in any order)."""
    prune_every: int | None = None
    """Steps between two prunings of finished sentences from the batch; None: the device's
    (`search.prune_interval`). No option sets it: the search's tests do."""


def resolve(
    defaults: DecodeConfig,
    search: DecodeOverrides = DecodeOverrides(),
    nbest: object = None,
    batch_tokens: object = BATCH_TOKENS,
    sampling: Sampling | None = None,
) -> DecodeSettings:
    """The settings of one call: what was given (None: not given), the rules between settings,
    and `defaults` (the checkpoint's [decode]) for the rest. A missing beam is the recipe's,
    raised to `nbest`; missing `batch_tokens` are BATCH_TOKENS (a caller that knows the device
    gives `default_batch_tokens`). Raises SettingError, and TypeError for a `search` that is not
    one."""
    if not isinstance(search, DecodeOverrides):
        raise TypeError(
            "settings(search): a DecodeOverrides, such as DecodeOverrides(beam=4), "
            f"not {type(search).__name__}"
        )
    if nbest is not None:
        check_setting("nbest", nbest)
    if batch_tokens is None:
        batch_tokens = BATCH_TOKENS
    check_setting("batch_tokens", batch_tokens)
    if sampling is not None and not isinstance(sampling, Sampling):
        raise SettingError(
            "sampling", sampling, 'must be a Sampling, such as Sampling("topk", topk=10), or None'
        )
    count = int(nbest or 1)  # type: ignore[call-overload]
    given = search.given()
    if sampling is not None:
        for name in ("beam", "lenpen", "lenpen_style"):
            if name in given:
                raise SettingError(
                    name, given[name], "is a setting of the search, which {sampling} replaces; leave it out"
                )
        if count > 1:
            raise SettingError("nbest", nbest, "{sampling} draws one translation per line; leave it out")
        settings = dataclasses.replace(search.apply(defaults), beam=1)
    else:
        settings = search.apply(defaults)
        if "beam" not in given and settings.beam < count:
            settings = dataclasses.replace(settings, beam=count)
        if count > settings.beam:
            raise SettingError("nbest", nbest, f"larger than {{beam}} {settings.beam}; raise {{beam}}")
    if settings.max_len_a == 0 and settings.max_len_b == 0:
        name = "max_len_b" if "max_len_b" in given else "max_len_a"
        raise SettingError(name, 0, "{max_len_a} and {max_len_b} are both 0: no room for a translation")
    return DecodeSettings(settings, count, int(batch_tokens), sampling)  # type: ignore[call-overload]


def check_before_load(
    search: DecodeOverrides,
    nbest: object = None,
    batch_tokens: object = BATCH_TOKENS,
    sampling: Sampling | None = None,
) -> None:
    """Raise what `resolve` would for the settings given, over the default recipe: the rules that
    hold whatever a checkpoint's [decode] says, so that a command refuses a bad option before it
    loads a model or waits for its input. The call's settings are then resolved once, against
    the checkpoint (`Translator.settings`)."""
    resolve(DecodeConfig(), search, nbest, batch_tokens, sampling)


class DecodeOptions(TypedDict, total=False):
    """What `translate` and `translate_nbest` take by keyword, as `nmt translate`'s options of the
    same names (None: the checkpoint's recipe); for that call only."""

    beam: int | None
    lenpen: float | None
    lenpen_style: str | None
    max_len_a: float | None
    max_len_b: int | None
    min_len: int | None
    shortlist: bool | None
    batch_tokens: int
    sampling: Sampling | None
    glossary: Glossary | Mapping[str, str] | None
    ordered_constraints: bool


def with_terms(settings: DecodeSettings, glossary: object, ordered: object) -> DecodeSettings:
    """`settings` with a glossary (a `Glossary`, a mapping of source terms to target terms, or a
    list of (source term, target term) pairs; None for none) and whether a line's phrases keep
    their order."""
    check_setting("ordered_constraints", ordered)
    if glossary is not None and not isinstance(glossary, Glossary):
        if not isinstance(glossary, Mapping | list | tuple):
            raise SettingError("glossary", glossary, "must map source terms to target terms, or list pairs")
        try:
            glossary = Glossary.of(glossary, where="")
        except InputError as err:  # an entry: the setting is what is refused, a ValueError
            raise SettingError("glossary", glossary, literal(str(err))) from None
    return dataclasses.replace(settings, glossary=glossary, ordered_constraints=bool(ordered))
