"""Result records of the tools: compile, SASS scan, correctness, timing, profile, and the EvalResult
that carries them. A failed kernel is a record with a status and its log, never an exception.

Plain data (pydantic v2, JSON on disk); no torch or CUDA import, so scoring and export read them anywhere.
"""
from __future__ import annotations

from typing import Literal, get_args

from pydantic import BaseModel, Field

# 2: COMPILED added; PASSED now always means it ran on a GPU (version 1 also wrote PASSED for a no-GPU success)
# 3: TIMING_SUSPECT added; input_seed recorded (inputs are drawn per evaluation)
SCHEMA_VERSION = 3

# PASSED: correct on the GPU (and timed when asked). COMPILED: parsed, compiled and assembled, SASS read, but
# not run on a GPU (--no-gpu, the agent's compile / sass tools): correctness unknown, so never counted as correct.
# The rest are failures: the model's (MODEL_FAILURES) or the harness's (INFRA_ERROR).
Status = Literal[
    "PASSED",
    "COMPILED",
    "COMPILE_ERROR",
    "PLAN_ERROR",
    "RUNTIME_ERROR",
    "TIMEOUT",
    "INCORRECT_NUMERICAL",
    "INCORRECT_NAN",
    "TIMING_SUSPECT",
    "INFRA_ERROR",
]
# A turn that handed in no kernel file (an empty reply, no code block, a block that is not a kernel, a tools-mode
# turn that never called submit) has the turn status FORMAT_ERROR, in tables, feedback, reports and docs alike.
# Runs recorded before this vocabulary called some of those turns NO_SUBMISSION: read as FORMAT_ERROR.
FORMAT_ERROR = "FORMAT_ERROR"
OLD_TURN_STATUSES = {"NO_SUBMISSION": FORMAT_ERROR}
# The model's failures (what scoring's repair statistics track); INFRA_ERROR is the harness's.
# TIMING_SUSPECT: correct whenever checked, but timed faster than the device can go (above the measured roofline,
# or an implausible speedup) and still so when timed again under a changed schedule: never counted as correct.
MODEL_FAILURES = ("COMPILE_ERROR", "PLAN_ERROR", "RUNTIME_ERROR", "TIMEOUT", "INCORRECT_NUMERICAL", "INCORRECT_NAN",
                  "TIMING_SUSPECT")


class CompileIssue(BaseModel):
    line: int | None = Field(None, description="1-based line in the solution file the model wrote")
    message: str
    text: str = Field("", description="that line as the solution has it (stripped, cut at compile_log.QUOTE_CHARS), "
                      "for the feedback: the model reads what the error points at instead of counting lines")
    severity: Literal["error", "warning"] = "error"


class KernelResources(BaseModel):
    """ptxas -v figures for one entry, plus its SASS opcode histogram."""

    name: str
    registers: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    smem_static: int = 0
    stack: int = 0
    barriers: int = Field(0, description="named barriers ptxas reserved (`used N barriers`); 16 when an id is a register")
    cmem: dict[str, int] = Field(default_factory=dict)
    sass_opcodes: dict[str, int] = Field(default_factory=dict, description="opcode (first dotted part, e.g. HGMMA) -> static count")
    sass_lines: list[int | None] = Field(default_factory=list, description="the solution-file line of each SASS "
                                         "instruction, in address order (16 bytes each); None where the line table is silent")
    sass_features: list[str] = Field(default_factory=list, description="what the SASS does (tools/sass_features.py): "
                                     "wgmma, tma_load, tma_store, tma_multicast, mbarrier_wait, setmaxnreg, cluster, ...")
    setmaxnreg_dec: list[int] = Field(default_factory=list, description="the register counts setmaxnreg.dec releases to")
    setmaxnreg_inc: list[int] = Field(default_factory=list, description="the register counts setmaxnreg.inc asks for")
    spills_after_dec: int = Field(0, description="local-memory accesses (STL / LDL) in the code after a setmaxnreg.dec: "
                                  "spills in the warpgroup that gave registers back (tools/regpool.py)")
    spills_after_inc: int = Field(0, description="local-memory accesses in the code after a setmaxnreg.inc")


class TargetPresence(BaseModel):
    in_ptx: bool
    in_sass: bool
    sass_count: int = 0


class CompileResult(BaseModel):
    status: Literal["ok", "error"]
    arch: str
    language: Literal["ptx", "cuda"] = "ptx"
    errors: list[CompileIssue] = Field(default_factory=list)
    warnings: list[CompileIssue] = Field(default_factory=list)
    log: str = ""
    kernels: dict[str, KernelResources] = Field(default_factory=dict)
    targets: dict[str, TargetPresence] = Field(default_factory=dict)
    sass_by_line: dict[int, dict[str, int]] = Field(default_factory=dict, description="solution-file line -> SASS "
                                                    "opcode (first dotted part) -> static count, over every kernel")
    ptx_sha256: str = ""
    cubin_path: str | None = Field(None, description="the cached cubin (content-addressed)")
    tools: dict[str, str] = Field(default_factory=dict, description="tool -> 'path (version)'")
    seconds: float = 0.0
    cached: bool = False
    jail: str = Field("", description="how the compilers were confined (tools/jail.py): bwrap | unshare | limits")


class TrialStats(BaseModel):
    """Correctness of one output tensor in one trial."""

    trial: int
    tensor: str
    dist: str = "normal"
    passed: bool
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    rel_fro_err: float | None = None
    frac_matched: float | None = None
    n_nan: int = 0
    n_inf: int = 0
    worst_index: list[int] | None = None
    worst_value: float | None = None
    worst_expected: float | None = None
    note: str = ""
    # Which rule decided: "element" (PTXBench's element rule + Frobenius bound), or "library_x2" when the primary
    # library itself missed (or nearly missed) the element rule on these inputs and the bar was 2x its own error
    # (Tolerance.library_factor; tools/gpu/correctness.py).
    rule: str = "element"
    library_max_abs_err: float | None = Field(None, description="the primary library's max abs error on this tensor, "
                                                                "when it was measured (the strict rule had failed)")
    library_rel_fro_err: float | None = Field(None, description="the primary library's relative Frobenius error, likewise")


# How each call finds L2 cold (tools/gpu/timing.L2Flush): its flush buffer written (dirty lines) or read (clean lines).
L2FlushMode = Literal["write", "read"]
L2_FLUSH_MODES: tuple[str, ...] = get_args(L2FlushMode)
# A new evaluation's flush: read. After a written flush a memory-bound call pays the write-back of the flush's dirty
# lines (19-26% of a decode GEMM's time on the H200), and how much of it depends on the kernel's own cache hints: B's
# loads marked evict_first took 11-12% off the decode GEMMs that way and nothing from clean lines
# (bench/results/gemm_sweep.md rounds 30 and 33), a score a hint could move without less work.
DEFAULT_L2_FLUSH: L2FlushMode = "read"
# What a record, or a run's config, written before the mode existed (2026-12-04) was measured under.
LEGACY_L2_FLUSH: L2FlushMode = "write"
# Correctness trials of one evaluation: each is a fresh input set held on the GPU for the timed calls to rotate among,
# so a mistyped 100000 asked for 100000 sets (a PLAN_ERROR from the memory check, blamed on the kernel) or hours.
MAX_TRIALS = 32


class TimingStat(BaseModel):
    median_ms: float
    ci_low_ms: float
    ci_high_ms: float
    n: int
    min_ms: float | None = None
    max_ms: float | None = None


class Timing(BaseModel):
    candidate: TimingStat
    baselines: dict[str, TimingStat] = Field(default_factory=dict)
    primary_baseline: str = ""
    speedup: float | None = None
    speedup_ci: tuple[float, float] | None = None
    tflops: float | None = None
    sol_pct: float | None = Field(None, description="percent of the roofline from FLOPs and min bytes at measured ceilings")
    ceilings: dict[str, float] = Field(default_factory=dict, description="tflops_bf16, hbm_gbps measured on the device")
    flags: list[str] = Field(default_factory=list, description="e.g. 'implausible_speedup', 'above_roofline', 'slow_candidate', 'reduced_iterations', "
                             "'rechecked' (this is the re-check's timing: the first was implausible), "
                             "'invalid_durations' (pairs with a zero, negative or NaN duration left out: "
                             "tools/gpu/timing_stats.py), "
                             "'host_stalls' (a timed call's launch gate gave up waiting for the host: "
                             "tools/gpu/gate.py; how many in `host_stalls`), "
                             "'profile_output_wrong' (the profiled call's output failed the rule the evaluated calls "
                             "passed: tools/profile/candidate.py), 'profile_slower' (the profiled call's kernels took "
                             "over SLOWER_UNDER_PROFILER times the timed calls' median: tools/profile/candidate.py), 'profile_faster' (under "
                             "FASTER_UNDER_PROFILER times a timed median of 50 us or more: another, faster path "
                             "under the profiler)")
    host_stalls: int | None = Field(None, description="timed calls (the candidate's and the library's together; warm-up "
                                    "calls not counted) whose launch gate gave up waiting for the host, so their "
                                    "intervals may hold the host's latency (the flag 'host_stalls' when any did); None "
                                    "in records written before the count existed")
    invalid_pairs: int | None = Field(None, description="timed pairs left out because a duration was zero, negative or "
                                      "not a number (the flag 'invalid_durations' when any was); None in records "
                                      "written before the count existed")
    input_sets: int = Field(0, description="input sets the timed calls rotated among (each verified on the GPU first)")
    verified_calls: int = Field(0, description="timed and warm-up calls whose outputs were checked against the verified "
                                               "output of the same inputs")
    recheck_speedup: float | None = Field(None, description="speedup measured again under a changed schedule, when the "
                                                            "first one was physically implausible")
    recheck_speedup_ci: tuple[float, float] | None = None
    l2_flush: L2FlushMode = Field(LEGACY_L2_FLUSH, description="how each call found L2 cold: its flush buffer written "
                                  "(dirty lines) or read (clean lines): EvalOptions.l2_flush; absent in records written "
                                  "before the mode existed, which were all written")

    def flag_labels(self) -> list[str]:
        """The flags as a report shows them (flag_label)."""
        return [flag_label(f, self.host_stalls, self.invalid_pairs) for f in self.flags]


def flag_label(flag: str, host_stalls: int | None, invalid_pairs: int | None = None) -> str:
    """A timing flag as a report shows it: 'host_stalls' with how many timed calls it counts and 'invalid_durations'
    with how many pairs it left out, where the record has the count (Timing.host_stalls, Timing.invalid_pairs), so one
    call in hundreds reads apart from most of them."""
    if flag == "host_stalls" and host_stalls:
        return f"host_stalls ({host_stalls} timed call{'s' * (host_stalls != 1)})"
    if flag == "invalid_durations" and invalid_pairs:
        return f"invalid_durations ({invalid_pairs} pair{'s' * (invalid_pairs != 1)} left out)"
    return flag


PROFILE_OUTPUT_WRONG = "profile_output_wrong"  # Timing.flags: the profiled call's output failed the rule (not credited)
PROFILE_SLOWER = "profile_slower"  # Timing.flags: the profiled call's kernels ran far longer than the timed calls (not credited)
PROFILE_FASTER = "profile_faster"  # Timing.flags: the profiled call's kernels ran far shorter than the timed calls (not credited)
PROFILE_RANGE_SHORT = "profile_range_short"  # Timing.flags: run back to back, the plan's launches did a fraction of the
# target work they did profiled one by one (tools/profile/range_check.py; not credited)
UNCREDITED_FLAGS = (PROFILE_OUTPUT_WRONG, PROFILE_SLOWER, PROFILE_FASTER, PROFILE_RANGE_SHORT)

TargetVerdict = Literal["executed", "token", "present_not_executed", "absent", "unknown"]


class RuntimeTarget(BaseModel):
    verdict: TargetVerdict
    executed_warp_insts: int | None = None
    executed_thread_insts_true: int | None = None
    counter_values: dict[str, float] = Field(default_factory=dict)
    work_share: float | None = Field(None, description="the family's counted work over the workload's (FLOPs on the "
                                     "tensor path, bytes loaded by TMA over the inputs' bytes); None: not measured")
    elsewhere_share: float | None = Field(None, description="the same work counted another way (the family's "
                                          "`elsewhere` counters: CUDA-core FLOPs beside wgmma, bytes of plain loads "
                                          "and cp.async beside TMA) over the workload's; "
                                          "None: not measured")
    reason: str = ""


class SanitizerFinding(BaseModel):
    tool: str
    kind: str
    kernel: str = ""
    message: str
    ptx_line: int | None = None


class Fingerprint(BaseModel):
    gpu: str = ""
    sm_count: int | None = None
    driver: str = ""
    cuda_runtime: str = ""
    torch: str = ""
    cudnn: str = ""
    ptxas: str = ""
    host: str = ""
    jail: str = Field("", description="how the compilers were confined for this result: bwrap | unshare | limits")
    pageable_memory_access: bool | None = Field(None, description="the GPU reaches its process's pageable host memory "
                                                "by address (HMM / ATS; DeviceLimits.pageable_memory_access)")


class EvalResult(BaseModel):
    schema_version: int = SCHEMA_VERSION
    workload: str
    status: Status
    message: str = Field("", description="one paragraph for the model: what went wrong or how it did")
    compile: CompileResult | None = None
    launched: list[str] = Field(default_factory=list, description="the kernels the plan launches, in launch order "
                                "(a module may hold more entry points than it runs)")
    plan_errors: list[str] = Field(default_factory=list)
    runtime_error: str = Field("", description="CUDA error name and text, or the watchdog's note")
    correctness: list[TrialStats] = Field(default_factory=list)
    timing: Timing | None = None
    targets_static: dict[str, TargetPresence] = Field(default_factory=dict)
    targets_runtime: dict[str, RuntimeTarget] = Field(default_factory=dict)
    profile: dict | None = Field(None, description="profile summary (tools/profile) when one was taken")
    feedback: str = Field("", description="the profile-derived feedback text shown to the model")
    profile_level: str = Field("none", description="the Nsight Compute profile this evaluation got: none | verdict (the "
                               "runtime target counters only) | full (sections, source page: per-line feedback)")
    profile_reason: str = Field("", description="why it got that level (first pass, new best, asked through a tool...)")
    sanitizer: list[SanitizerFinding] = Field(default_factory=list)
    fingerprint: Fingerprint = Fingerprint()
    gpu_evaluated: bool = Field(False, description="False when only compile and SASS ran (--no-gpu); kept for old "
                                                   "readers: status COMPILED says the same")
    seconds: dict[str, float] = Field(default_factory=dict, description="phase -> wall seconds")
    input_seed: int | None = Field(None, description="seed of this evaluation's inputs (drawn per evaluation unless "
                                                     "given): `ptxbench eval --seed` with it replays the verdict")

    @property
    def passed(self) -> bool:
        """Correct on a GPU; a COMPILED kernel never ran, so it has not passed."""
        return self.status == "PASSED"

    @property
    def speedup(self) -> float | None:
        return self.timing.speedup if self.timing else None

    @property
    def kernel_ms(self) -> float | None:
        """The candidate's own median time (None when it was not timed)."""
        return self.timing.candidate.median_ms if self.timing else None

    @property
    def target_executed(self) -> bool | None:
        """True when every target family executed; False when one did not (token, present but not executed, absent)
        or the profiled call computed a wrong output or ran far slower than the timed calls (flags profile_output_wrong,
        profile_slower, profile_faster: its counters are not credited), or its launches run back to back did a
        fraction of that work (profile_range_short);
        None when it was not measured: no profile, or one that could not tell (ncu missing, counters refused: every
        family not `executed` is `unknown`), which is the harness's gap, not a verdict on the kernel."""
        if not self.targets_runtime:
            return None
        if self.timing is not None and any(flag in self.timing.flags for flag in UNCREDITED_FLAGS):
            return False
        verdicts = [t.verdict for t in self.targets_runtime.values()]
        if all(v == "executed" for v in verdicts):
            return True
        return False if any(v not in ("executed", "unknown") for v in verdicts) else None
