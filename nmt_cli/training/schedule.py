"""Learning-rate schedules as pure functions of the update number (1-based) and, for "linear",
of the share of the run's budget already spent."""

from __future__ import annotations


def noam(step: int, d_model: int, warmup: int, scale: float = 1.0) -> float:
    """lrate = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5) (§5.3, Eq. 3), times `scale`."""
    step = max(step, 1)
    return scale * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def inverse_sqrt(step: int, peak_lr: float, warmup: int) -> float:
    """Linear warm-up to `peak_lr` over `warmup` updates, then decay with 1/sqrt(step)."""
    step = max(step, 1)
    if step < warmup:
        return peak_lr * step / warmup
    return peak_lr * (warmup / step) ** 0.5


def linear(step: int, peak_lr: float, warmup: int, spent: float) -> float:
    """Linear warm-up to `peak_lr` over `warmup` updates, and a linear decay that reaches 0 when
    the whole budget is `spent` (a share from 0 to 1): whichever of the two is lower. A run with a
    fixed budget ends at a small learning rate instead of the one inverse_sqrt still has there."""
    step = max(step, 1)
    return peak_lr * max(0.0, min(step / warmup, 1.0 - spent))


def learning_rate(
    step: int,
    schedule: str,
    d_model: int,
    warmup: int,
    lr_scale: float,
    peak_lr: float,
    spent: float = 0.0,
) -> float:
    if schedule == "noam":
        return noam(step, d_model, warmup, lr_scale)
    if schedule == "linear":
        return linear(step, peak_lr, warmup, spent)
    return inverse_sqrt(step, peak_lr, warmup)
