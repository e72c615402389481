"""The evaluator seam: what the agent calls to judge a solution file.

`evaluate(workload_id, source, options)` runs: parse the solution and its plan -> compile -> SASS
scan -> (GPU) correctness -> timing -> (optional) profile and sanitizer, and returns an EvalResult.
Any failure of the kernel is a status in the result; exceptions mean a harness bug.
Implementations: tools/evaluate.py (local: compile here, GPU work in the worker pool of
tools/gpu/pool.py) and the Ray backend (agent/bench). `no_gpu` stops after compile + SASS.
"""
from __future__ import annotations

from ptxbench.workloads.arch import DEFAULT_ARCH
from typing import Literal, Protocol

from pydantic import BaseModel, Field, field_validator

from .results import DEFAULT_L2_FLUSH, MAX_TRIALS, EvalResult, L2FlushMode


# What Nsight Compute takes of a candidate, cheapest first: nothing; `verdict`: one ncu run with the counters
# the runtime target verdict needs; `full`: the sections, rules and source page (feedback, hot lines).
ProfileLevel = Literal["none", "verdict", "full"]
PROFILE_LEVELS: tuple[str, ...] = ("none", "verdict", "full")
# On a pass, `new_best` takes the full profile when the kernel beats the best so far (or none passed yet), else the verdict:
# by its own median time against `best_kernel_ms` when both are known (the library's time moves between evaluations
# by more than a kernel's: bench/results/timing_integrity.md), else by `best_speedup`.
OnPass = Literal["none", "verdict", "full", "new_best"]


def stronger(a: str, b: str) -> str:
    """The larger of two profile levels."""
    return max(a, b, key=PROFILE_LEVELS.index)


def serves(have: str, want: str) -> bool:
    """A profile taken at level `have` answers one asked for at `want` (the same level or a weaker one)."""
    return stronger(have, want) == have


class EvalOptions(BaseModel):
    arch: str = DEFAULT_ARCH
    trials: int | None = Field(None, ge=1, le=MAX_TRIALS, description="correctness trials; None = the workload's default")
    dist: str = "normal"
    time: bool = True
    profile: ProfileLevel = Field("none", description="profile taken whatever the status (true = full, as before)")
    profile_on_pass: OnPass = Field("verdict", description="profile taken when the kernel passes (true = verdict: the "
                                    "runtime target check; false = none)")
    best_speedup: float | None = Field(None, description="with profile_on_pass=new_best: the best speedup so far")
    best_kernel_ms: float | None = Field(None, description="with profile_on_pass=new_best: the best passing kernel's "
                                         "median time so far (the same workload); when set, a new best is a shorter time")
    profile_reason: str = Field("", description="why the caller asked for this level (recorded with the result)")
    sanitize: list[str] = Field(default_factory=list, description="compute-sanitizer tools: memcheck, racecheck, synccheck, initcheck")
    no_gpu: bool = False
    timeout_s: float = Field(60.0, description="upper bound of the watchdog's limits for one candidate's GPU work "
                             "(each phase gets less, from the workload and the kernel's first call: tools/gpu/watchdog.py)")
    seed: int | None = None
    warmup: int | None = Field(None, description="timing warm-up calls; None = 10")
    iters: int | None = Field(None, description="timed iterations per timing trial; None = 50")
    timing_trials: int | None = Field(None, description="timing trials; None = 3")
    l2_flush: L2FlushMode = Field(DEFAULT_L2_FLUSH, description="how each timed and checked call finds L2 cold: a "
                                  "buffer twice its size read (clean lines, the default) or written (the field's usual "
                                  "practice: the call pays the write-back of its dirty lines, 19-26% of a decode GEMM's "
                                  "time on the H200, less for a kernel whose cache hints spare them)")
    turn: int | None = Field(None, description="the caller's turn (0: a start kernel), for the record only (a "
                             "remembered TIMEOUT names no turn: it may be another trajectory's); never part of a cache key")
    turns_left: int | None = Field(None, description="the trajectory's turns after this one: a queue priority only "
                                   "(tools/gpu/priority.py: the GPUs serve first the evaluations with the most GPU work "
                                   "behind them); never part of a cache key, never a measurement")

    @field_validator("profile", mode="before")
    @classmethod
    def _profile_bool(cls, v):
        return {True: "full", False: "none"}.get(v, v) if isinstance(v, bool) else v

    @field_validator("profile_on_pass", mode="before")
    @classmethod
    def _on_pass_bool(cls, v):
        return {True: "verdict", False: "none"}.get(v, v) if isinstance(v, bool) else v

    def profile_level(self, passed: bool, speedup: float | None = None,
                      kernel_ms: float | None = None) -> tuple[ProfileLevel, str]:
        """The profile to take of an evaluated kernel, and why (the reason is shown to the model). `kernel_ms`: the
        kernel's own median time, which decides a new best when `best_kernel_ms` is known (builtin/tuner picks its
        base the same way, so the turn it builds on has its own profile)."""
        level, why = self.profile, self.profile_reason or ("a full profile was asked for" if self.profile == "full" else "")
        if not passed or self.profile_on_pass == "none":
            return level, why
        on = self.profile_on_pass
        if on == "new_best":
            best = self.best_speedup
            best_ms = self.best_kernel_ms
            if best_ms is not None and kernel_ms is not None:
                if kernel_ms < best_ms:
                    on, note = "full", f"a new best: {kernel_ms:.4f} ms, under the best so far ({best_ms:.4f} ms)"
                else:
                    on, note = "verdict", f"not a new best ({kernel_ms:.4f} ms, best so far {best_ms:.4f} ms)"
            elif best is None:
                on, note = "full", "the first passing kernel of this run"
            elif speedup is not None and speedup > best:
                on, note = "full", f"a new best speedup ({speedup:.3f}x over {best:.3f}x)"
            else:
                shown = f"{speedup:.3f}x" if speedup is not None else "no speedup"
                on, note = "verdict", f"not a new best ({shown}, best so far {best:.3f}x)"
        else:
            note = self.profile_reason or ("only the runtime target check is taken of a passing kernel" if on == "verdict"
                                           else "a full profile was asked for")
        if on == level or stronger(on, level) == level:
            return level, why or note
        return on, note  # type: ignore[return-value]


class Evaluator(Protocol):
    def evaluate(self, workload_id: str, source: str, options: EvalOptions) -> EvalResult: ...

    def close(self) -> None: ...
