"""Point estimates with 95% intervals.

Every metric here is a ratio of per-trajectory sums (a mean is num/1, a pooled per-turn rate is
passes/turns, a geometric mean is exp(sum log / count)), so one resampling routine serves all:
trajectories are drawn with replacement (turns of one trajectory are not independent, so they are
resampled together), with a fixed seed so the same run always scores the same.

Shares (a value between 0 and 1) need more than that: where every resample gives the same share (all or none,
or one trajectory) the percentile interval has no width, and ten of ten read as exactly 100%. So:
- a share of trajectories (`share_estimate`: one 0/1 outcome each) takes the Wilson score interval over them;
- a share pooled over turns (`ratio_estimate(..., share=True)`) keeps the bootstrap over trajectories, and
  where that interval has no width, takes the Wilson interval over the trajectories it rests on (the
  trajectories, not the turns: turns of one trajectory are not independent, so this errs wide).
A bootstrap interval's tails are those of Hesterberg's expanded percentile interval ("What teachers should know
about the bootstrap", 2015): the plain percentile interval is as narrow as mean +- 1.96 s/sqrt(n) with s over n,
not n - 1, and no Student t, so from few trajectories it covered the truth far less often than 95% (simulated
best speedups: 69% of the time from 3, 80% from 5, 89% from 12); its tails are set so that the interval is as wide
as a t interval would be (alpha' = 2 Phi(-sqrt(n / (n - 1)) t_{n-1, 0.975})). Below `MIN_BOOTSTRAP` trajectories no
resampling can give one: every resample's mean lies between the trajectories' extremes, and that range holds the
mean only half (two trajectories) to three quarters (three) of the time, so no interval, as from one trajectory.
Any other estimate from fewer than MIN_BOOTSTRAP trajectories, or whose resamples all agree (its trajectories' values are one,
as three trajectories that never got a correct turn have a best speedup of 0 each), has no interval (ci_low, ci_high
None): a percentile bootstrap of equal values has no width, and [0, 0] read as certain.

A model's figures over several workloads weigh each workload alike (KernelBench's fast_p is a share of tasks): each
trajectory carries the weight 1 / (its workload's trajectories), the bootstrap resamples within each workload
(`strata`; the workloads of one trajectory together, as one stratum), and a weighted share's Wilson interval is
taken at Kish's effective count (sum w)^2 / sum w^2. A workload of one trajectory that is the only one (beside workloads
of several) has nothing to be drawn with: every resample keeps its value, so the interval lacks that workload's
trajectory-to-trajectory spread. No data says how wide that is, so the interval is kept and marked
(`Estimate.ci_fixed_strata`, a dagger after it in fmt()), never passed off as covering it.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np
from pydantic import BaseModel, Field

from ptxbench.tools.figure_text import figure  # huge, tiny and non-finite figures short and named, never 300 digits

BOOTSTRAP_SAMPLES = 2000
SEED = 0
Z95 = 1.959963984540054  # the standard normal's 97.5% quantile
MIN_BOOTSTRAP = 4  # fewer trajectories: no bootstrap interval (their range covers the mean 50-75% of the time)
# Student's t 97.5% quantiles for 1..30 degrees of freedom (past 30, _t975's expansion is exact to 4 digits)
_T975 = (12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.3060, 2.2622, 2.2281, 2.2010, 2.1788, 2.1604,
         2.1448, 2.1314, 2.1199, 2.1098, 2.1009, 2.0930, 2.0860, 2.0796, 2.0739, 2.0687, 2.0639, 2.0595, 2.0555,
         2.0518, 2.0484, 2.0452, 2.0423)
FIXED_MARK = "†"  # after an interval that holds a stratum of one trajectory fixed (Estimate.ci_fixed_strata)


class Estimate(BaseModel):
    value: float | None = Field(None, description="the point estimate; None when there is nothing to estimate from")
    ci_low: float | None = None
    ci_high: float | None = None
    ci_method: str = Field("", description="how the interval was made: bootstrap (expanded percentile, over trajectories: "
                                           "expanded_tails), "
                                           "wilson (score interval); empty when there is none")
    ci_fixed_strata: int = Field(0, description="strata (a model's row: workloads) of a single trajectory that the "
                                 "bootstrap drew alone, so held at their value in every resample: the interval leaves "
                                 "out their trajectory-to-trajectory spread (narrower than it should be), and fmt() "
                                 "marks it with a dagger")
    n: int = Field(0, description="trajectories the estimate rests on (a ratio's: those with something in its "
                                  "denominator, so a regression rate's n is the trajectories that had a PASSED turn)")
    denom: float = Field(0.0, description="total of the denominator (turns, trajectories, correct trajectories)")

    def fmt(self, digits: int = 2, pct: bool = False) -> str:
        if self.value is None:
            return "–"
        scale, unit = (100.0, "%") if pct else (1.0, "")
        text = f"{figure(self.value * scale, digits)}{unit}"
        if self.ci_low is not None and self.ci_high is not None:
            text += (f" [{figure(self.ci_low * scale, digits)}, {figure(self.ci_high * scale, digits)}]"
                     + FIXED_MARK * bool(self.ci_fixed_strata))
        return text


def wilson_interval(share: float, n: float) -> tuple[float, float]:
    """The Wilson score 95% interval of a share seen over n independent units (n > 0): never of zero width, and
    inside [0, 1], at 0 and 1 too (Brown, Cai and DasGupta 2001)."""
    z2 = Z95 * Z95
    centre = (share + z2 / (2 * n)) / (1 + z2 / n)
    half = Z95 / (1 + z2 / n) * math.sqrt(max(share * (1 - share), 0.0) / n + z2 / (4 * n * n))
    low, high = max(0.0, centre - half), min(1.0, centre + half)
    # exactly 0 and 1 at the ends (the formula's own values there, less the rounding)
    return (0.0 if share <= 0 else low), (1.0 if share >= 1 else high)


def _t975(df: int) -> float:
    """Student's t 97.5% quantile: the table, then the Cornish-Fisher expansion in 1/df."""
    if df <= len(_T975):
        return _T975[df - 1]
    z = Z95
    return (z + (z ** 3 + z) / (4 * df) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * df ** 2)
            + (3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z) / (384 * df ** 3))


def expanded_tails(n: int) -> tuple[float, float]:
    """The percentiles (0-100) of the bootstrap distribution that bound Hesterberg's expanded 95% percentile interval
    from n trajectories: as wide as Student's t interval, where the plain 2.5 and 97.5 were as narrow as a z
    interval with the standard deviation over n."""
    tail = math.erfc(math.sqrt(n / (n - 1)) * _t975(n - 1) / math.sqrt(2))  # alpha' = 2 Phi(-w), both tails
    return 100 * tail / 2, 100 * (1 - tail / 2)


def _strata_groups(strata: Sequence[int]) -> list[np.ndarray]:
    """The positions of each stratum, the strata of one trajectory collapsed into one group when there are several."""
    groups = [np.flatnonzero(np.asarray(strata) == s) for s in sorted(set(strata))]
    if len(singles := [g for g in groups if len(g) == 1]) > 1:
        groups = [g for g in groups if len(g) > 1] + [np.concatenate(singles)]
    return groups


def fixed_strata(strata: Sequence[int] | None) -> int:
    """Strata the bootstrap cannot vary: a stratum of one trajectory left alone (the only such one, beside strata of
    several), which every resample draws as itself."""
    if strata is None:
        return 0
    groups = _strata_groups(strata)
    return sum(len(g) == 1 for g in groups) if len(groups) > 1 else 0


def _resample_indices(rng, n: int, samples: int, strata: Sequence[int] | None) -> np.ndarray:
    """samples x n positions drawn with replacement: over all n, or within each stratum (each keeps its size). The
    strata of one trajectory are drawn together, as one stratum (collapsed strata): alone, each would draw itself in
    every resample, and a model that ran one trajectory per workload had an interval of no width."""
    if strata is None:
        return rng.integers(0, n, size=(samples, n))
    groups = _strata_groups(strata)
    return np.concatenate([g[rng.integers(0, len(g), size=(samples, len(g)))] for g in groups], axis=1)


def ratio_estimate(num: Sequence[float], den: Sequence[float], transform=None,
                   samples: int = BOOTSTRAP_SAMPLES, seed: int = SEED, share: bool = False,
                   strata: Sequence[int] | None = None) -> Estimate:
    """sum(num) / sum(den) over trajectories, with a percentile bootstrap 95% interval.

    `transform` maps the ratio afterwards (math.exp for a geometric mean). `share`: the ratio is a share (0 <= num
    <= den per trajectory); where the bootstrap interval has no width, the Wilson interval over the trajectories
    with a non-zero denominator stands in. Otherwise no interval from fewer than
    MIN_BOOTSTRAP such trajectories. The interval's tails are expanded_tails' (as wide as a t interval). `strata`: one label per trajectory; resampling stays within each."""
    num_a = np.asarray(num, dtype=float)
    den_a = np.asarray(den, dtype=float)
    n = len(num_a)
    total = float(den_a.sum()) if n else 0.0
    if n == 0 or total == 0:
        return Estimate(denom=total)  # rests on no trajectory
    value = float(num_a.sum() / total)
    resting = int((den_a != 0).sum())  # the trajectories the ratio rests on
    low = high = None
    method = ""
    if resting >= MIN_BOOTSTRAP:
        rng = np.random.default_rng(seed)
        idx = _resample_indices(rng, n, samples, strata)
        with np.errstate(invalid="ignore", divide="ignore"):
            ratios = num_a[idx].sum(axis=1) / den_a[idx].sum(axis=1)
        ratios = ratios[np.isfinite(ratios)]
        if len(ratios):
            low, high = (float(v) for v in np.percentile(ratios, expanded_tails(resting)))
            method = "bootstrap"
    fixed = fixed_strata(strata) if method == "bootstrap" else 0
    if low is not None and math.isclose(low, high, rel_tol=1e-9, abs_tol=1e-12):
        # every resample agrees (the trajectories' values do, in each stratum): resampling them cannot show how far
        # another trajectory might fall, as from one trajectory; [v, v] read as certain
        low = high = None
        method, fixed = "", 0
    if share and low is None:
        (low, high), method, fixed = wilson_interval(value, resting), "wilson", 0
    if transform is not None:
        value = transform(value)
        low, high = (transform(low), transform(high)) if low is not None else (None, None)
    return Estimate(value=value, ci_low=low, ci_high=high, ci_method=method, ci_fixed_strata=fixed,
                    n=resting, denom=total)  # n: not the trajectories with nothing in the denominator (no turn left PASSED)


def effective_count(weights: Sequence[float]) -> float:
    """Kish's effective sample size of weighted units: n when the weights are equal, less when they differ."""
    total, squares = float(sum(weights)), float(sum(w * w for w in weights))
    return total * total / squares if squares else 0.0


def share_estimate(outcomes: Sequence[float], weights: Sequence[float] | None = None) -> Estimate:
    """The share of trajectories with an outcome (each 0 or 1), with the Wilson score 95% interval: trajectories
    are independent units, and unlike a percentile bootstrap it has width when all or none have it. With `weights`
    (one per trajectory), the weighted share, its interval at the effective count (`effective_count`)."""
    n = len(outcomes)
    if n == 0:
        return Estimate()
    w = [1.0] * n if weights is None else [float(x) for x in weights]
    value = sum(o * x for o, x in zip(outcomes, w)) / sum(w)
    low, high = wilson_interval(value, effective_count(w))
    return Estimate(value=value, ci_low=low, ci_high=high, ci_method="wilson", n=n, denom=float(n))


def mean_estimate(values: Sequence[float], weights: Sequence[float] | None = None, **kw) -> Estimate:
    """The (weighted) mean over trajectories, with its bootstrap interval."""
    if weights is None:
        return ratio_estimate(values, [1.0] * len(values), **kw)
    est = ratio_estimate([v * w for v, w in zip(values, weights)], list(weights), **kw)
    return est.model_copy(update={"denom": float(len(values))})


def geomean_estimate(values: Sequence[float | None], weights: Sequence[float] | None = None, **kw) -> Estimate:
    """Geometric mean of the positive values (weighted, with `weights`); None or non-positive entries count as
    absent."""
    w = [1.0] * len(values) if weights is None else weights
    logs = [x * math.log(v) if v is not None and v > 0 else 0.0 for v, x in zip(values, w)]
    present = [x if v is not None and v > 0 else 0.0 for v, x in zip(values, w)]
    est = ratio_estimate(logs, present, transform=math.exp, **kw)
    return est if weights is None else est.model_copy(update={"denom": float(sum(p > 0 for p in present))})
