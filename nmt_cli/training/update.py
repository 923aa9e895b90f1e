"""One training update, queued on the device without reading anything back to the host.

On a GPU every value the host reads (`float(loss)`, `bool(finite)`, boolean indexing) waits for
the device to finish all the work queued before it, and the GPU then idles while the host
prepares the next kernels. So the loss, the gradient norm and the decision to skip a non-finite
update stay on the device: Adam's fused kernel takes that decision as `found_inf` and leaves the
weights, moments and step count alone, as it does under fp16 loss scaling. The host reads the
figures of many updates at once (`Pending.settle`), when it logs, validates or saves.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from nmt_cli.model.packing import Packing, packed_tokens
from nmt_cli.special_ids import PAD_ID
from nmt_cli.training import distributed
from nmt_cli.training.loss import linear_label_smoothed_nll
from nmt_cli.training.precision import autocast


@dataclass
class UpdateLoss:
    """The summed smoothed loss and NLL of an update's batches, (2,) float32 on the device, and
    the target tokens they were normalised by (known on the host from the lengths)."""

    sums: Tensor
    tokens: int


def accumulate_gradients(
    model: torch.nn.Module,
    batches: list[dict],
    label_smoothing: float,
    precision: str,
    scaler: torch.amp.GradScaler,
    device: torch.device,
    ntokens: int | None = None,
    idle: bool = False,
) -> UpdateLoss:
    """Forward and backward over this process's batches of one update. The loss is normalised by
    `ntokens`, the update's target tokens over the batches of all processes, so accumulation, and
    DDP's summed all-reduce, equal one big batch.

    Under DDP gradients are all-reduced in the last backward only. An `idle` process (no batch
    left for it at the end of an epoch) runs one stand-in batch with weight 0, so that it still
    joins the all-reduce; it reports no loss. `ntokens` defaults to the target tokens of
    `batches`, counted on the host before they are copied to the device."""
    if ntokens is None:
        ntokens = sum(int((b["tgt_out"] != PAD_ID).sum()) for b in batches)
    sums = torch.zeros(2, dtype=torch.float32, device=device)
    weight, bias = output_layer(model)
    for i, batch in enumerate(batches):
        if "target" not in batch:
            batch = with_real_rows(batch)
        src, tgt_in, target = (batch[k].to(device, non_blocking=True) for k in ("src", "tgt_in", "target"))
        where: dict[str, Any]
        if "packing" in batch:
            where = {"packing": tuple(p.to(device, non_blocking=True) for p in batch["packing"])}
        else:
            where = {"rows": batch["rows"].to(device, non_blocking=True)}
        with distributed.gradient_sync(model, i == len(batches) - 1):
            with autocast(device, precision):
                hidden = model(src, tgt_in, project=False, **where)
                loss, nll = linear_label_smoothed_nll(hidden, weight, bias, target, label_smoothing)
            if idle:
                loss, nll = loss * 0.0, nll * 0.0
            scaler.scale(loss / ntokens).backward()
        sums += torch.stack([loss.detach(), nll])
    return UpdateLoss(sums, ntokens)


def with_real_rows(batch: dict[str, Tensor]) -> dict[str, Tensor]:
    """The batch with "rows", the flat indices of its real (non-padding) target positions, the
    rows the model projects and the loss scores, and "target", their tokens. Made from the
    batch's host copy (the training loop does it in its prefetch thread), where reading the mask
    back costs no GPU synchronisation."""
    flat = batch["tgt_out"].reshape(-1)
    rows = (flat != PAD_ID).nonzero().view(-1)
    return {**batch, "rows": rows, "target": flat.index_select(0, rows)}


def packed(batch: dict[str, Tensor]) -> dict[str, Any]:
    """A padded batch packed (model/packing.py): "src" and "tgt_in" the real tokens end to end,
    "target" the real tokens of tgt_out in the same order, "packing" their (source, target)
    layouts; "tgt_out" stays for counting. Made on the host, in the prefetch thread."""
    tgt_out = batch["tgt_out"]
    real = tgt_out != PAD_ID  # tgt_in's real positions too (its first token may be the pad id)
    src, sources = packed_tokens(batch["src"], PAD_ID)
    lengths = real.sum(dim=1).tolist()
    return {
        "src": src,
        "tgt_in": batch["tgt_in"][real],
        "target": tgt_out[real],
        "tgt_out": tgt_out,
        "packing": (sources, Packing.of(lengths)),
    }


def output_layer(model: torch.nn.Module) -> tuple[Tensor, Tensor | None]:
    """The pre-softmax projection of `model`, or of the model inside a DDP or compiled wrapper."""
    inner: Any = model
    while not hasattr(inner, "output_layer"):
        inner = getattr(inner, "module", None) or inner._orig_mod  # DDP's, torch.compile's
    return inner.output_layer()


def apply_update(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scaler: torch.amp.GradScaler,
    lr: float,
    clip_norm: float,
    loss: Tensor,
) -> Tensor:
    """Step Adam (fused) unless the update's `loss` (a device scalar) or gradient is non-finite.

    Returns (gradient norm, 1.0 if the update was skipped else 0.0) on the device. A skipped
    update changes no weight, no Adam moment and no step count; with fp16 the loss scale is
    halved, as GradScaler does."""
    scaler.unscale_(optimizer)  # fp16: divides by the loss scale and records inf/NaN; else a no-op
    params = [p for group in optimizer.param_groups for p in group["params"]]
    grads = [p.grad for p in params if p.grad is not None]
    norm = torch.nn.utils.get_total_norm(grads, foreach=True).float()
    if clip_norm > 0:
        torch.nn.utils.clip_grads_with_norm_(params, clip_norm, norm, foreach=True)
    skipped = torch.logical_not(torch.isfinite(norm) & torch.isfinite(loss)).float()
    for group in optimizer.param_groups:
        group["lr"] = lr
    # The attributes GradScaler sets for optimizers with `_step_supports_amp_scaling` (fused Adam):
    # the kernel does nothing where found_inf is 1, and undoes its step count increment.
    optimizer.found_inf = skipped  # type: ignore[attr-defined]
    optimizer.grad_scale = None  # type: ignore[attr-defined]
    try:
        optimizer.step()
    finally:
        del optimizer.found_inf, optimizer.grad_scale  # type: ignore[attr-defined]
    scaler.update()  # fp16: halve the scale after an overflow, grow it after a run without one
    optimizer.zero_grad(set_to_none=True)
    return torch.stack([norm, skipped])


@dataclass
class Settled:
    """One update's figures, read on the host."""

    loss: float
    nll: float
    grad_norm: float
    skipped: bool
    tokens: int
    place: tuple[int, int] = (0, 0)
    """(epoch, batch) once the update's batches were taken: where the data stood."""


@dataclass
class Pending:
    """Updates queued since the figures were last read: their (loss, nll, grad norm, skipped) rows
    stay on the device until `settle` reads them all with one transfer."""

    rows: list[Tensor] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    places: list[tuple[int, int]] = field(default_factory=list)

    def add(self, loss: UpdateLoss, outcome: Tensor, place: tuple[int, int] = (0, 0)) -> None:
        self.rows.append(torch.cat([loss.sums, outcome]))
        self.tokens.append(loss.tokens)
        self.places.append(place)

    def __len__(self) -> int:
        return len(self.rows)

    def settle(self) -> list[Settled]:
        """The figures of every pending update, in order (one host synchronisation), and none
        pending afterwards."""
        if not self.rows:
            return []
        values = torch.stack(self.rows).cpu().tolist()
        settled = [
            Settled(loss, nll, norm, skipped > 0, tokens, place)
            for (loss, nll, norm, skipped), tokens, place in zip(
                values, self.tokens, self.places, strict=True
            )
        ]
        self.rows, self.tokens, self.places = [], [], []
        return settled
