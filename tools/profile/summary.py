"""The profile summary: what one Nsight Compute run of a candidate says, as plain data.

Built from the three CSV pages (ncu_csv.py); stored in EvalResult.profile (as a dict) and turned into
feedback by feedback.py. Every figure is optional: a section ncu could not collect is None, not 0.
"""
from __future__ import annotations

import re

from pydantic import BaseModel, Field, PrivateAttr

from .lines import HotInstruction, HotLine
from .ncu_csv import DetailKernel, RawKernel, SourceKernel

SOL = "GPU Speed Of Light Throughput"
OCC = "Occupancy"
LAUNCH = "Launch Statistics"
WARP = "Warp State Statistics"
MEM = "Memory Workload Analysis"
COMPUTE = "Compute Workload Analysis"
# Occupancy limiters as the Occupancy section names them.
LIMITS = {"Block Limit Registers": "registers", "Block Limit Shared Mem": "shared memory",
          "Block Limit Warps": "threads per block (warps)", "Block Limit SM": "blocks per SM", "Block Limit Barriers": "barriers"}
OPCODE_METRIC = "sass__inst_executed_per_opcode"
OPCODE_TRUE_METRIC = "sass__thread_inst_executed_true_per_opcode"


class Rule(BaseModel):
    section: str
    name: str
    type: str = Field(description="OPT: an optimisation with an estimated gain; INF: information; WRN/ERR")
    message: str
    speedup_pct: float | None = Field(None, description="ncu's estimated speedup in percent of the kernel's time")
    speedup_type: str = ""


class KernelProfile(BaseModel):
    name: str
    grid: str = ""
    block: str = ""
    duration_us: float | None = None
    compute_sol_pct: float | None = None
    memory_sol_pct: float | None = None
    dram_sol_pct: float | None = None
    l1_sol_pct: float | None = None
    l2_sol_pct: float | None = None
    dram_bytes: float | None = Field(None, description="DRAM bytes read + written")
    top_pipes: dict[str, float] = Field(default_factory=dict, description="pipe -> % of peak over active cycles, top 3")
    tensor_pipe_pct: float | None = Field(None, description="tensor pipe busy, % of elapsed cycles (wgmma at full rate ~ 100)")
    sm_mhz: float | None = Field(None, description="ncu's SM Frequency: the GPCs' mean elapsed cycles over the profiled "
                                 "pass's duration (gpc__cycles_elapsed.avg.per_second; ncu runs with --clock-control "
                                 "none, so it is what the power limit allowed). The clock the feedback quotes is "
                                 "clock_mhz, which pairs with elapsed_cycles")
    elapsed_cycles: float | None = Field(None, description="SM cycles the profiled pass took: ncu's Elapsed Cycles, the "
                                         "most any GPC counted (gpc__cycles_elapsed.max)")
    registers: int | None = None
    smem_per_block: float | None = None
    theoretical_occupancy_pct: float | None = None
    achieved_occupancy_pct: float | None = None
    occupancy_limiter: str = ""
    waves_per_sm: float | None = None
    stalls: dict[str, float] = Field(default_factory=dict, description="stall reason -> cycles per issued instruction")
    cycles_per_issue: float | None = None
    l2_hit_pct: float | None = None
    local_spill_requests: float | None = None
    opcodes: dict[str, float] | None = Field(None, description="SASS opcode -> warp-level executed count (None: not measured)")
    opcodes_true: dict[str, float] | None = Field(None, description="SASS opcode -> predicate-true thread-level count")
    sass_present: list[str] | None = Field(None, description="opcodes in the profiled kernel's SASS (source page)")
    counters: dict[str, float | None] = Field(default_factory=dict, description="requested counter metrics")
    rules: list[Rule] = Field(default_factory=list)
    hot_lines: list[HotLine] = Field(default_factory=list, description="solution lines by warp-stall samples "
                                     "(Nsight's source counters folded on the compile's line of each instruction)")
    hot_sass: list[HotInstruction] = Field(default_factory=list, description="SASS instructions by warp-stall samples, "
                                           "each with its solution line (None: code the solution has no line for)")
    lines_note: str = Field("", description="why hot_lines is empty although a source page was collected")
    _source: SourceKernel | None = PrivateAttr(None)  # the per-instruction page, for attach_lines

    @property
    def bottleneck(self) -> str:
        return bottleneck(self.compute_sol_pct, self.memory_sol_pct)

    @property
    def clock_mhz(self) -> float | None:
        """The SMs' clock that goes with elapsed_cycles: those cycles over the kernel's duration, so the cycles over it
        are the time the kernel took. ncu's SM Frequency (sm_mhz) divides the GPCs' mean count instead, while its
        Elapsed Cycles is their largest: on the H200's main GEMM (GPCs at 1.171-1.202 M cycles) 1,202,211 cycles over
        1,654 MHz made 727 us of a kernel that ran 714.7 us, whose cycles over its time are 1,682 MHz. sm_mhz where
        either figure is missing."""
        if self.elapsed_cycles and self.duration_us:
            mhz = self.elapsed_cycles / self.duration_us  # cycles per microsecond
            if 100.0 < mhz < 10_000.0:
                return mhz
        return self.sm_mhz


class ProfileSummary(BaseModel):
    ok: bool
    mode: str = Field("full", description="full: sections + counters; verdict: executed-instruction counters only")
    error: str = Field("", description="why no profile could be taken (then every verdict is 'unknown')")
    kernels: list[KernelProfile] = Field(default_factory=list)
    gpu: str = Field("", description="device name as ncu reports it, e.g. 'NVIDIA H200'")
    ncu_version: str = ""
    command: list[str] = Field(default_factory=list)
    seconds: float = 0.0
    gpu_ready_s: float | None = Field(None, description="seconds from the replay's start to its ready (interpreter, imports, "
                                                       "CUDA context, cubin; gated runs only)")
    gpu_held_s: float | None = Field(None, description="seconds the GPU was held for the replay (gated runs only)")
    gpu_wait_s: float | None = Field(None, description="seconds the ready replay waited for the GPU (gated runs only)")
    output_passed: bool | None = Field(None, description="whether the profiled call's output passed the evaluation's rule "
                                       "(replay.py --judge); None: not judged")
    output_status: str = Field("", description="its status when judged (PASSED, INCORRECT_NUMERICAL, ...)")
    output_note: str = Field("", description="what was wrong with it, or why it was not judged")
    output_method: str = Field("", description="how it was judged: sketch (against the evaluation's verified sketch), "
                               "referee (against a reference computed after the call), guards (a write outside a buffer)")
    output_judge_s: float | None = Field(None, description="seconds that judgment took, inside the GPU-held window")

    @property
    def duration_us(self) -> float | None:
        times = [k.duration_us for k in self.kernels if k.duration_us is not None]
        return sum(times) if times else None

    def main_kernel(self) -> KernelProfile | None:
        """The launch that took longest: the one feedback is about."""
        if not self.kernels:
            return None
        return max(self.kernels, key=lambda k: k.duration_us or 0.0)


def bottleneck(compute_pct: float | None, memory_pct: float | None, busy: float = 60.0) -> str:
    """'memory' or 'compute' when that unit's speed-of-light share leads and is at least `busy`
    percent; 'latency' when neither is; 'unknown' without numbers."""
    if compute_pct is None and memory_pct is None:
        return "unknown"
    c, m = compute_pct or 0.0, memory_pct or 0.0
    if max(c, m) < busy:
        return "latency"
    return "memory" if m >= c else "compute"


# DRAM below this share of its peak in a compute-bound kernel serves the bytes over the minimum under the math: on the
# H200's main GEMM (compute 93%, DRAM 20-25% busy at 2.7-3.3x the minimum bytes) the moves that cut them gained at most
# 0.3% (group_m 16) or cost 1.5-2.3% (the 2-CTA cluster), while the deferred epilogue gained 1.1-1.2% (bench/results/
# gemm_sweep.md rounds 4-5 and 13, docs/examples/tuner-climb).
DRAM_BUSY_PCT = 40.0


def traffic_hidden(bottleneck_: str, dram_sol_pct: float | None) -> bool:
    """A compute-bound kernel whose DRAM is under DRAM_BUSY_PCT busy: its DRAM bytes move under the math."""
    return bottleneck_ == "compute" and dram_sol_pct is not None and dram_sol_pct < DRAM_BUSY_PCT


POWER_CLOCK_PCT = 90.0  # a compute-bound kernel's clock under this share of the SMs' top clock is the power limit's


def power_limited(bottleneck_: str, sm_mhz: float | None, top_mhz: float | None) -> bool:
    """A compute-bound kernel whose SMs ran under POWER_CLOCK_PCT of their top clock: the power limit set the clock,
    so its time is its cycles over that clock, and a change that spends less energy a cycle raises it (the H200's main
    GEMM: 1,600-1,650 of 1,980 MHz on randn, bench/results/gemm_sweep.md rounds 27-28). The feedback's and
    builtin/tuner's reading of the profiled clock."""
    return bottleneck_ == "compute" and bool(sm_mhz) and bool(top_mhz) and sm_mhz < POWER_CLOCK_PCT / 100 * top_mhz


def _stall_name(metric: str) -> str:
    """'Stall Long Scoreboard' -> 'long_scoreboard' (the keys of prompts/feedback_profile.md)."""
    return re.sub(r"^Stall ", "", metric).strip().lower().replace(" ", "_")


def build_kernel(raw: RawKernel | None, details: DetailKernel | None, source: SourceKernel | None,
                 counters: list[str]) -> KernelProfile:
    name = (raw.name if raw else "") or (details.name if details else "") or (source.name if source else "")
    k = KernelProfile(name=name, grid=raw.grid if raw else "", block=raw.block if raw else "")
    if raw is not None:
        dur = raw.number("gpu__time_duration.sum")
        k.duration_us = dur * 1e6 if dur is not None else None
        rd, wr = raw.number("dram__bytes_read.sum"), raw.number("dram__bytes_write.sum")
        k.dram_bytes = (rd or 0.0) + (wr or 0.0) if rd is not None or wr is not None else None
        k.opcodes = raw.instances(OPCODE_METRIC)
        k.opcodes_true = raw.instances(OPCODE_TRUE_METRIC)
        k.counters = {c: raw.number(c) for c in counters}
        regs = raw.number("launch__registers_per_thread")
        k.registers = int(regs) if regs is not None else None
    if details is not None:
        _fill_from_details(k, details)
    if source is not None and source.lines:
        k.sass_present = sorted(source.opcodes_present())
        k._source = source
    return k


def attach_lines(summary: "ProfileSummary", sass_lines: dict[str, list[int | None]], solution: str) -> None:
    """Fill each kernel's hot_lines from its source page and the compile's line of each instruction
    (`sass_lines`: kernel name -> KernelResources.sass_lines). In place."""
    from .lines import fold_lines, hot_instructions

    for k in summary.kernels:
        lines = sass_lines.get(k.name)
        if k._source is None:
            continue
        if not lines:
            k.lines_note = f"the compile has no line table for {k.name!r}"
            continue
        k.hot_lines = fold_lines(k._source, lines, solution)
        k.hot_sass = hot_instructions(k._source, lines)
        if not k.hot_lines:
            k.lines_note = (f"the source page has {len(k._source.lines)} instructions, the compile {len(lines)}"
                            if len(k._source.lines) != len(lines) else "no stall samples on the source page")


def _fill_from_details(k: KernelProfile, d: DetailKernel) -> None:
    sol = d.section(SOL, label="")
    k.compute_sol_pct = sol.get("Compute (SM) Throughput")
    k.memory_sol_pct = sol.get("Memory Throughput")
    k.dram_sol_pct = sol.get("DRAM Throughput")
    k.l1_sol_pct = sol.get("L1/TEX Cache Throughput")
    k.l2_sol_pct = sol.get("L2 Cache Throughput")
    if k.duration_us is None and sol.get("Duration") is not None:
        k.duration_us = sol["Duration"] * 1e6
    mhz = (sol.get("SM Frequency") or 0.0) / 1e6  # Hz once its unit (ncu's "Ghz") is applied
    k.sm_mhz = mhz if 100.0 < mhz < 10_000.0 else None  # an unscaled unit would read as a fraction of a hertz
    k.elapsed_cycles = sol.get("Elapsed Cycles")
    pipes = d.section(COMPUTE, label="Pipe Utilization (% of active cycles)")
    if "Tensor (All)" in pipes:  # the shared FP64+Tensor pipe is the tensor pipe while FP64 is idle
        pipes.pop("Shared (FP64+Tensor)", None)
    k.top_pipes = dict(sorted(((p, v) for p, v in pipes.items() if v > 0), key=lambda x: -x[1])[:3])
    k.tensor_pipe_pct = d.value(COMPUTE, "Tensor (All)", "Pipe Utilization (% of elapsed cycles)")
    occ = d.section(OCC, label="")
    k.theoretical_occupancy_pct = occ.get("Theoretical Occupancy")
    k.achieved_occupancy_pct = occ.get("Achieved Occupancy")
    limits = {LIMITS[n]: v for n, v in occ.items() if n in LIMITS}
    if limits:  # every limit at the lowest count: the main GEMM's 168 registers and 225 KB of shared memory both allow 1
        least = min(limits.values())
        k.occupancy_limiter = " and ".join(n for n, v in limits.items() if v == least)
    launch = d.section(LAUNCH, label="")
    if k.registers is None and launch.get("Registers Per Thread") is not None:
        k.registers = int(launch["Registers Per Thread"])
    smem = [launch.get("Dynamic Shared Memory Per Block"), launch.get("Static Shared Memory Per Block")]
    k.smem_per_block = sum(s for s in smem if s is not None) if any(s is not None for s in smem) else None
    k.waves_per_sm = launch.get("Waves Per SM")
    warp = d.section(WARP, label="Warp State (All Cycles)")
    k.stalls = {_stall_name(n): v for n, v in sorted(warp.items(), key=lambda x: -x[1]) if n.startswith("Stall") and v > 0}
    k.cycles_per_issue = d.value(WARP, "Warp Cycles Per Issued Instruction")
    k.l2_hit_pct = d.value(MEM, "L2 Hit Rate")
    k.local_spill_requests = d.value(MEM, "Local Memory Spilling Requests")
    k.rules = [Rule(section=r.section, name=r.name, type=r.type, message=r.description.strip(),
                    speedup_pct=r.speedup_pct, speedup_type=r.speedup_type) for r in d.rules]


def build_summary(raw: list[RawKernel], details: list[DetailKernel], source: list[SourceKernel],
                  counters: list[str], mode: str = "full") -> list[KernelProfile]:
    """Join the pages kernel by kernel (raw and details by ncu's ID; source pages by name, in order: a page
    missing for one launch of a multi-kernel plan shifts no other launch's page onto it)."""
    by_id = {d.id: d for d in details}
    pages: dict[str, list[SourceKernel]] = {}
    for s in source:
        pages.setdefault(s.name, []).append(s)
    out = []
    for r in raw:
        queue = pages.get(r.name) or []
        out.append(build_kernel(r, by_id.get(r.id), queue.pop(0) if queue else None, counters))
    return out
