"""What crosses the worker pipe: the GPU job and its outcome, as typed models (no torch, no CUDA import).

The parent builds a `GpuJob`, the pool sends its fields as a dict (multiprocessing pickles plain data), the
worker validates them back into a `GpuJob`; the worker's `GpuOutcome` travels the same way. Every default is
written here once: the runner, the timing plan and the pool read these fields, never string keys.
"""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ..results import DEFAULT_L2_FLUSH, L2FlushMode, Status, Timing, TrialStats

DEFAULT_WARMUP = 10
DEFAULT_ITERS = 50
DEFAULT_TIMING_TRIALS = 3


class GpuJob(BaseModel):
    """One request to a GPU worker: evaluate a candidate, or time the library against itself (A/A)."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["evaluate", "aa"] = "evaluate"
    id: int = Field(0, description="set by the pool; the worker's phase and result messages carry it back")
    workload: str
    cubin: bytes = b""
    plan: dict = Field(default_factory=dict, description="the ResolvedPlan's fields (tools/solution/plan.py)")
    trials: int | None = Field(None, description="input sets checked in full; None = the workload's (at least 2 are used)")
    dist: str = "normal"
    seed: int | None = Field(None, description="seed of the first input set; None = drawn by the worker")
    seed_drawn: bool = Field(False, description="`seed` is the evaluator's fresh draw (tools/gpu/seeds.py), not one the "
                             "user gave: the hang memo ignores it")
    time: bool = True
    timeout_s: float = Field(60.0, description="watchdog limit for the candidate's own GPU work")
    prepare_timeout_s: float = Field(900.0, description="watchdog limit for the harness's preparation")
    warmup: int = DEFAULT_WARMUP
    iters: int = DEFAULT_ITERS
    timing_trials: int = DEFAULT_TIMING_TRIALS
    l2_flush: L2FlushMode = Field(DEFAULT_L2_FLUSH, description="how each call finds L2 cold: its flush buffer read "
                                  "(clean lines) or written (dirty lines, the field's usual practice)")
    ceilings: dict[str, float] = Field(default_factory=dict, description="ceilings the pool measured on this GPU before")


class GpuOutcome(BaseModel):
    """The fields of an EvalResult that the GPU decides."""

    status: Status
    message: str = ""
    correctness: list[TrialStats] = Field(default_factory=list)
    timing: Timing | None = None
    plan_errors: list[str] = Field(default_factory=list)
    runtime_error: str = ""
    seconds: dict[str, float] = Field(default_factory=dict)
    input_seed: int | None = None
    verified_sketch: dict | None = Field(None, description="the first input set's verified output sketch and the "
                                         "evaluation's sign key, {'key', 'values': {output: [SKETCH_FIELDS floats]}}: "
                                         "the profile's replay checks its own output against it (tools/profile/replay.py)")
