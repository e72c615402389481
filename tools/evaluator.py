"""The evaluator seam: what the agent calls to judge a solution file.

`evaluate(workload_id, source, options)` runs: parse the solution and its plan -> compile -> SASS
scan -> (GPU) correctness -> timing -> (optional) profile and sanitizer, and returns an EvalResult.
Any failure of the kernel is a status in the result; exceptions mean a harness bug.
Implementations: tools/evaluate.py (local: compile here, GPU work in the worker pool of
tools/gpu/pool.py) and the Ray backend (agent/bench). `no_gpu` stops after compile + SASS.
"""
from __future__ import annotations

from ptxbench.workloads.arch import DEFAULT_ARCH
from typing import Protocol

from pydantic import BaseModel, Field

from .results import EvalResult


class EvalOptions(BaseModel):
    arch: str = DEFAULT_ARCH
    trials: int | None = Field(None, description="correctness trials; None = the workload's default")
    dist: str = "normal"
    time: bool = True
    profile: bool = Field(False, description="take an Nsight Compute profile (runtime target verdict + feedback)")
    profile_on_pass: bool = Field(True, description="verify target instructions at runtime whenever the kernel passes")
    sanitize: list[str] = Field(default_factory=list, description="compute-sanitizer tools: memcheck, racecheck, synccheck, initcheck")
    no_gpu: bool = False
    timeout_s: float = Field(60.0, description="watchdog limit for one candidate's GPU work")
    seed: int | None = None
    warmup: int | None = Field(None, description="timing warm-up calls; None = 10")
    iters: int | None = Field(None, description="timed iterations per timing trial; None = 50")
    timing_trials: int | None = Field(None, description="timing trials; None = 3")


class Evaluator(Protocol):
    def evaluate(self, workload_id: str, source: str, options: EvalOptions) -> EvalResult: ...

    def close(self) -> None: ...
