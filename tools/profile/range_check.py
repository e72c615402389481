"""The target verdict held against the plan's launches run back to back: Nsight Compute's range replay.

The verdict's profile (kernel replay) runs each launch of a plan on its own, milliseconds apart; an evaluated call
runs them back to back. A kernel that times the gap between its launches can tell the two apart and run its target
instructions only when profiled, with the right output both ways (tests/data/cheats/attacks/profiled_tma_only.cu).
Range replay (`ncu --replay-mode range` over the replay's NVTX range) runs the plan's launches back to back, as an
evaluated call does, and reads the range's counters as one. On an H100 with ncu 2025.3 it reads the families' work
counters (wgmma's bf16 operations, TMA's bytes) equal to the kernel replay's sum to the unit, and refuses the TMA
instruction counts and the CUDA-core FLOPs (bench/results/gpu_evaluator.md, run 36: bench/ncu_range_probe.py). So for
a plan of two launches or more, each family credited `executed` must show at least RANGE_SHARE of its kernel-replay
work in the range; one that shows less ran its target path only launch by launch, and the verdicts are not credited
(candidate.py, flag `profile_range_short`).

A range profile that cannot be read (ncu refused the range, a counter went missing) leaves the verdicts as the kernel
replay gave them, with the reason in `RangeCheck.error`: the harness's gap, not the kernel's fault. The bounds on the
profiled call's time (SLOWER_UNDER_PROFILER, FASTER_UNDER_PROFILER) still apply then.
"""
from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field

from ptxbench.tools.results import RuntimeTarget
from ptxbench.workloads.arch import ArchProfile

from .summary import ProfileSummary

# Honest plans read the same work in both replays (run 36: equal to the unit); a kernel that runs its target path only
# when its launches are far apart reads almost none back to back. Half leaves room for a kernel whose work depends on
# timing by design (a split whose share a launch picks up as it finds it) without letting most of the work hide.
RANGE_SHARE = 0.5


class RangeCheck(BaseModel):
    """What the range replay read for each checked family, beside the kernel replay's sum."""

    ok: bool = Field(description="the range was profiled and every checked family's work counter read")
    error: str = Field("", description="why the range could not be read (then nothing is withheld)")
    launches: int = Field(0, description="the plan's launches the kernel replay profiled")
    counters: dict[str, str] = Field(default_factory=dict, description="family -> its work counter")
    kernel_sums: dict[str, float] = Field(default_factory=dict, description="family -> the kernel replay's sum")
    range_values: dict[str, float] = Field(default_factory=dict, description="family -> the range replay's reading")
    short: list[str] = Field(default_factory=list, description="families under RANGE_SHARE of their kernel-replay work")
    range_us: float | None = Field(None, description="the range's duration under range replay (launches back to back)")
    seconds: float = 0.0
    gpu_held_s: float | None = None

    def share(self, family: str) -> float | None:
        kernel, ranged = self.kernel_sums.get(family), self.range_values.get(family)
        return ranged / kernel if kernel and ranged is not None else None

    def reason(self) -> str:
        """Why the verdicts are withheld, one line (empty when nothing is short)."""
        parts = [f"{f}'s {self.counters[f]} read {self.range_values[f]:,.0f} with the plan's {self.launches} launches "
                 f"back to back against {self.kernel_sums[f]:,.0f} launch by launch ({100 * (self.share(f) or 0):.3g}%)"
                 for f in self.short]
        return "; ".join(parts)


def checked_families(arch: ArchProfile, summary: ProfileSummary, verdicts: dict[str, RuntimeTarget]) -> dict[str, str]:
    """family -> work counter, for each family credited `executed` with a kernel-replay reading of its work counter,
    when the plan has two launches or more (one launch has no gap to time); empty: nothing to check."""
    if not summary.ok or len(summary.kernels) < 2:
        return {}
    out = {}
    for name, verdict in verdicts.items():
        counter = arch.family(name).work_counter
        if verdict.verdict == "executed" and counter and verdict.counter_values.get(counter):
            out[name] = counter
    return out


def judge_range(checked: dict[str, str], verdicts: dict[str, RuntimeTarget], ranged: ProfileSummary,
                launches: int) -> RangeCheck:
    """The range's readings against the kernel replay's sums (`verdicts[f].counter_values`)."""
    base = dict(launches=launches, counters=checked,
                kernel_sums={f: float(verdicts[f].counter_values[c]) for f, c in checked.items()},
                seconds=round(ranged.seconds, 3), gpu_held_s=ranged.gpu_held_s)
    if not ranged.ok:
        return RangeCheck(ok=False, error=ranged.error or "range replay gave no result", **base)
    if len(ranged.kernels) != 1:
        return RangeCheck(ok=False, error=f"range replay gave {len(ranged.kernels)} rows, not one for the range", **base)
    row = ranged.kernels[0]
    values = {f: v for f, c in checked.items() if (v := row.counters.get(c)) is not None}
    missing = [checked[f] for f in checked if f not in values]
    if missing:
        return RangeCheck(ok=False, error=f"range replay read no {', '.join(missing)}", range_values=values,
                          range_us=row.duration_us, **base)
    short = [f for f in checked if values[f] < RANGE_SHARE * base["kernel_sums"][f]]
    return RangeCheck(ok=True, range_values=values, short=short, range_us=row.duration_us, **base)


def range_check(checked: dict[str, str], verdicts: dict[str, RuntimeTarget], launches: int, argv: list[str], *,
                workdir: Path, env: dict | None, hold=None, timeout_s: float = 120.0) -> RangeCheck:
    """Profile the replay program `argv` under range replay with the `checked` families' work counters
    (checked_families) and judge the readings."""
    from .runner import profile_command

    ranged = profile_command(argv, counters=list(dict.fromkeys(checked.values())), full=False, timeout_s=timeout_s,
                             workdir=workdir, env=env, hold=hold, replay="range")
    return judge_range(checked, verdicts, ranged, launches)
