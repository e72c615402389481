"""Point estimates with bootstrap 95% intervals.

Every metric here is a ratio of per-trajectory sums (a mean is num/1, a pooled per-turn rate is
passes/turns, a geometric mean is exp(sum log / count)), so one resampling routine serves all:
trajectories are drawn with replacement (turns of one trajectory are not independent, so they are
resampled together), with a fixed seed so the same run always scores the same.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np
from pydantic import BaseModel, Field

BOOTSTRAP_SAMPLES = 2000
SEED = 0


class Estimate(BaseModel):
    value: float | None = Field(None, description="the point estimate; None when there is nothing to estimate from")
    ci_low: float | None = None
    ci_high: float | None = None
    n: int = Field(0, description="trajectories the estimate rests on")
    denom: float = Field(0.0, description="total of the denominator (turns, trajectories, correct trajectories)")

    def fmt(self, digits: int = 2, pct: bool = False) -> str:
        if self.value is None:
            return "–"
        scale, unit = (100.0, "%") if pct else (1.0, "")
        text = f"{self.value * scale:.{digits}f}{unit}"
        if self.ci_low is not None and self.ci_high is not None and self.n > 1:
            text += f" [{self.ci_low * scale:.{digits}f}, {self.ci_high * scale:.{digits}f}]"
        return text


def ratio_estimate(num: Sequence[float], den: Sequence[float], transform=None,
                   samples: int = BOOTSTRAP_SAMPLES, seed: int = SEED) -> Estimate:
    """sum(num) / sum(den) over trajectories, with a percentile bootstrap 95% interval.

    `transform` maps the ratio afterwards (math.exp for a geometric mean)."""
    num_a = np.asarray(num, dtype=float)
    den_a = np.asarray(den, dtype=float)
    n = len(num_a)
    total = float(den_a.sum()) if n else 0.0
    if n == 0 or total == 0:
        return Estimate(n=n, denom=total)
    value = float(num_a.sum() / total)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(samples, n))
    with np.errstate(invalid="ignore", divide="ignore"):
        ratios = num_a[idx].sum(axis=1) / den_a[idx].sum(axis=1)
    ratios = ratios[np.isfinite(ratios)]
    low, high = (float(np.percentile(ratios, 2.5)), float(np.percentile(ratios, 97.5))) if len(ratios) else (value, value)
    if transform is not None:
        value, low, high = transform(value), transform(low), transform(high)
    return Estimate(value=value, ci_low=low, ci_high=high, n=n, denom=total)


def mean_estimate(values: Sequence[float], **kw) -> Estimate:
    return ratio_estimate(values, [1.0] * len(values), **kw)


def geomean_estimate(values: Sequence[float | None], **kw) -> Estimate:
    """Geometric mean of the positive values; None or non-positive entries count as absent."""
    logs = [math.log(v) if v is not None and v > 0 else 0.0 for v in values]
    present = [1.0 if v is not None and v > 0 else 0.0 for v in values]
    return ratio_estimate(logs, present, transform=math.exp, **kw)
