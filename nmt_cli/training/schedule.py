"""Learning-rate schedules as pure functions of the update number (1-based)."""

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


def learning_rate(
    step: int, schedule: str, d_model: int, warmup: int, lr_scale: float, peak_lr: float
) -> float:
    if schedule == "noam":
        return noam(step, d_model, warmup, lr_scale)
    return inverse_sqrt(step, peak_lr, warmup)
