"""What one evaluation said, reduced to the figures a built-in model reasons with.

`evidence_from(result)` turns an EvalResult into an `Evidence` (plain data, kept in each TurnOutcome,
so it survives checkpoints and resume). Every figure is optional: a turn that was not profiled
(the runtime verdict and the timing only) still carries its timing, its roof share and its compile
resources; a failed turn carries its problems. builtin/tuner (agent/models/tuner_rules.py) reads it.
"""
from __future__ import annotations

import re

from pydantic import BaseModel, Field

# The profile feedback's headroom line (tools/profile: "It is within 1% of its roof").
WITHIN_ROOF = re.compile(r"within (\d+(?:\.\d+)?)% of its roof")
PAST_ROOF = "at or past its roof"  # the same line when the kernel beats the measured ceilings: no headroom
MAX_HOT_LINES = 8


class HotSpot(BaseModel):
    """One solution line where the warps waited (the profile's per-line stall samples)."""

    line: int
    text: str = ""
    share_pct: float = Field(0.0, description="share of the kernel's stall samples")
    reason: str = Field("", description="the dominant waiting reason at this line")


class Evidence(BaseModel):
    status: str = ""
    speedup: float | None = None
    sol_pct: float | None = Field(None, description="percent of the workload's roofline the timing reached")
    kernel_ms: float | None = Field(None, description="the candidate's median time in the timing (ms)")
    headroom_pct: float | None = Field(None, description="how far from its roof: 100 - sol_pct; without a timing, "
                                                         "the feedback's 'within N%' figure")
    profiled: bool = Field(False, description="a full Nsight Compute profile was taken on this turn")
    bottleneck: str = Field("unknown", description="compute | memory | latency | unknown (speed-of-light shares)")
    compute_sol_pct: float | None = None
    memory_sol_pct: float | None = None
    dram_sol_pct: float | None = Field(None, description="DRAM throughput, % of its peak (a busy DRAM makes excess "
                                                         "bytes cost time; an idle one serves them under the math)")
    l1_sol_pct: float | None = Field(None, description="L1/shared memory throughput, % of its peak")
    l2_sol_pct: float | None = Field(None, description="L2 throughput, % of its peak")
    tensor_pipe_pct: float | None = None
    sm_mhz: float | None = Field(None, description="the SMs' clock over the profiled pass (ncu, clocks not pinned): "
                                 "KernelProfile.clock_mhz, its elapsed cycles over its duration")
    top_mhz: float | None = Field(None, description="the GPU's top SM clock (tools/gpu/ceilings.MAX_SM_MHZ), None "
                                                    "when the GPU is not in that table")
    l2_hit_pct: float | None = None
    dram_over_min: float | None = Field(None, description="DRAM bytes moved / the workload's minimum bytes")
    stall_shares: dict[str, float] = Field(default_factory=dict, description="stall reason -> share of all "
                                           "stall cycles (0-1), largest first")
    hot_lines: list[HotSpot] = Field(default_factory=list)
    registers: int | None = None
    spills: int = Field(0, description="spill stores + loads (ptxas)")
    smem_bytes: float | None = None
    occupancy_limiter: str = ""
    targets: dict[str, str] = Field(default_factory=dict, description="target family -> runtime verdict")
    problems: list[str] = Field(default_factory=list, description="compile, plan and runtime errors (first few)")

    @property
    def power_limited(self) -> bool:
        """Compute-bound at a clock the power limit set (tools/profile/summary.power_limited)."""
        from ptxbench.tools.profile.summary import power_limited

        return power_limited(self.bottleneck, self.sm_mhz, self.top_mhz)

    @property
    def dram_idle_memory_bound(self) -> bool:
        """Memory-bound with DRAM under DRAM_BUSY_PCT busy: L1/shared memory or L2 is the limit, so DRAM bytes over the
        minimum are worth little (the profile feedback's traffic_dram_idle)."""
        from ptxbench.tools.profile.summary import DRAM_BUSY_PCT

        return self.bottleneck == "memory" and self.dram_sol_pct is not None and self.dram_sol_pct < DRAM_BUSY_PCT

    def busiest_memory(self) -> str:
        """The memory unit with the highest throughput share, named as the profile feedback names it."""
        from ptxbench.tools.profile.feedback import busiest_memory

        return busiest_memory(self)[0]

    def share_of(self, patterns: tuple[str, ...]) -> float:
        """Summed stall share (percent) of the hot lines whose text contains any of `patterns`."""
        return sum(h.share_pct for h in self.hot_lines if any(p in h.text for p in patterns))


def _min_bytes(workload_id: str) -> float | None:
    try:
        from ptxbench.workloads.registry import get_workload

        return get_workload(workload_id).min_bytes or None
    except KeyError:
        return None


def evidence_from(result) -> Evidence:
    """The Evidence of one EvalResult (ptxbench.tools.results)."""
    ev = Evidence(status=result.status, speedup=result.speedup if result.passed else None,
                  targets={name: t.verdict for name, t in result.targets_runtime.items()})
    comp = result.compile
    if comp is not None:
        ev.problems += [e.message for e in comp.errors[:3]]
        kernels = list(comp.kernels.values())
        if kernels:
            ev.registers = max(k.registers for k in kernels)
            ev.spills = sum(k.spill_stores + k.spill_loads for k in kernels)
    ev.problems += [*result.plan_errors[:3], *([result.runtime_error] if result.runtime_error else [])]
    if result.timing is not None:
        ev.sol_pct = result.timing.sol_pct
        ev.kernel_ms = result.timing.candidate.median_ms if result.passed else None
    # From the timing's own figure: the feedback's "within N%" line is the same number, but the feedback also quotes
    # the kernel's hot source lines, so a comment there ("// within 1% of its roof") could set it. The text is read
    # only for a result without a timing.
    feedback = result.feedback or ""
    if ev.sol_pct is not None:
        ev.headroom_pct = max(0.0, 100.0 - ev.sol_pct)
    elif within := WITHIN_ROOF.search(feedback):
        ev.headroom_pct = float(within.group(1))
    elif PAST_ROOF in feedback:
        ev.headroom_pct = 0.0
    _profile_figures(ev, result)
    return ev


def _profile_figures(ev: Evidence, result) -> None:
    if not result.profile:
        return
    from ptxbench.tools.gpu.ceilings import max_sm_mhz
    from ptxbench.tools.profile.summary import ProfileSummary

    summary = ProfileSummary.model_validate(result.profile)
    k = summary.main_kernel()
    if not summary.ok or summary.mode != "full" or k is None:
        return
    ev.profiled = True
    ev.bottleneck = k.bottleneck
    ev.compute_sol_pct, ev.memory_sol_pct, ev.dram_sol_pct = k.compute_sol_pct, k.memory_sol_pct, k.dram_sol_pct
    ev.tensor_pipe_pct, ev.l2_hit_pct = k.tensor_pipe_pct, k.l2_hit_pct
    ev.l1_sol_pct, ev.l2_sol_pct = k.l1_sol_pct, k.l2_sol_pct
    ev.sm_mhz, ev.top_mhz = k.clock_mhz, max_sm_mhz(summary.gpu)  # the clock the profile feedback quotes
    ev.registers = k.registers if k.registers is not None else ev.registers
    ev.smem_bytes, ev.occupancy_limiter = k.smem_per_block, k.occupancy_limiter
    if k.local_spill_requests:
        ev.spills = max(ev.spills, int(k.local_spill_requests))
    dram = sum(x.dram_bytes for x in summary.kernels if x.dram_bytes is not None)
    least = _min_bytes(result.workload)
    if dram and least:
        ev.dram_over_min = dram / least
    total = sum(k.stalls.values())
    if total > 0:
        ev.stall_shares = {r: v / total for r, v in k.stalls.items()}
    ev.hot_lines = [HotSpot(line=h.line, text=h.text, share_pct=h.share_pct, reason=h.dominant)
                    for h in k.hot_lines[:MAX_HOT_LINES]]
