"""The watchdog's limits for a candidate's own GPU work, adapted to the workload and to what the kernel showed.

A fixed limit (the job's `timeout_s`, 60 s by default) makes every hanging kernel cost a minute per evaluation,
while no honest kernel of these workloads needs more than a few seconds a call. So the worker asks for less:

  first checked call (the probe):  max(FLOOR_S, PROBE_ROOFLINE_FACTOR x the workload's roofline time)
  later checked calls:             max(FLOOR_S, CALL_FACTOR x the probe's wall time)
  each timing chunk:               max(FLOOR_S, TIMING_FACTOR x its paired calls x the measured time of a pair)

each capped at `timeout_s`, which stays the upper bound of every limit (and the pool never goes below
pool.MIN_CANDIDATE_LIMIT_S). The roofline time is known before anything runs (the workload's FLOPs and minimum
bytes over the GPU's measured ceilings, else its datasheet peak); a kernel 2000x slower than the roof (0.05% of
it: slower than any CUDA-core kernel of these sizes) still finishes its probe, and a slow but honest kernel
(the fp32 attention backward at ~15 ms a call) is timed in full, its later limits scaled from its own probe.
Pure logic: no torch, no CUDA (tested on the CPU: tests/tools/test_watchdog.py).
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from .ceilings import datasheet_peak, roofline_ms

# Faults the H200 reports late (0.5-1 s) and a worker's host-side hiccups stay far inside this.
FLOOR_S = 5.0
# The probe may take this many roofline times: 0.05% of the roof. GEMM 8192x7168x5120: 1.2 s -> the floor;
# attention backward d128: 8.3 s.
PROBE_ROOFLINE_FACTOR = 2000.0
# Every input set has the same shapes and distribution: a later call 10x slower than the first is a hang.
CALL_FACTOR = 10.0
# A timing chunk's calls were just measured (the probe pairs): 5x what they should take.
TIMING_FACTOR = 5.0

Phase = Callable[..., None]  # phase(name, limit_s, why): the worker's message to the watchdog


@dataclass(frozen=True)
class Limit:
    seconds: float
    why: str  # how the limit was reached, for the TIMEOUT message


def _bounded(scaled_s: float, cap_s: float, rule: str) -> Limit:
    seconds = min(cap_s, max(FLOOR_S, scaled_s))
    if seconds == cap_s and scaled_s > cap_s:
        return Limit(seconds, f"{rule} = {scaled_s:.3g} s, capped at the {cap_s:g} s timeout")
    if seconds == cap_s and cap_s < FLOOR_S:
        return Limit(seconds, f"the {cap_s:g} s timeout asked for")
    return Limit(seconds, f"{rule}" if seconds == scaled_s else f"the {FLOOR_S:g} s floor ({rule} = {scaled_s:.3g} s)")


def workload_roofline_ms(flops: float, min_bytes: float, ceilings: dict[str, float] | None, gpu_name: str) -> float | None:
    """The workload's roofline time on this GPU: the measured ceilings when the worker has them, else the datasheet's
    (a higher peak, so a shorter time and a tighter limit: never looser than the measured one would be)."""
    if ceilings and ceilings.get("tflops_bf16") and ceilings.get("hbm_gbps"):
        return roofline_ms(flops, min_bytes, ceilings)
    peak = datasheet_peak(gpu_name)
    if peak is None:
        return None
    return roofline_ms(flops, min_bytes, {"tflops_bf16": peak[0], "hbm_gbps": peak[1]})


def probe_limit(roofline: float | None, cap_s: float) -> Limit:
    if roofline is None:  # an unknown GPU: the floor is all we can say before the kernel ran
        return Limit(min(cap_s, FLOOR_S), f"the {min(cap_s, FLOOR_S):g} s floor: no roofline is known for this GPU")
    return _bounded(PROBE_ROOFLINE_FACTOR * roofline / 1000, cap_s,
                    f"{PROBE_ROOFLINE_FACTOR:g} x the workload's {roofline:.3g} ms roofline time")


def call_limit(probe_s: float, cap_s: float) -> Limit:
    return _bounded(CALL_FACTOR * probe_s, cap_s, f"{CALL_FACTOR:g} x the {probe_s:.3g} s the first call took")


def timing_limit(pairs: int, per_pair_ms: float, cap_s: float) -> Limit:
    expected_s = pairs * per_pair_ms / 1000
    return _bounded(TIMING_FACTOR * expected_s, cap_s,
                    f"{TIMING_FACTOR:g} x {pairs} paired calls at the measured {per_pair_ms:.3g} ms a pair")


class CandidateWatch:
    """Tells the watchdog, before each piece of a candidate's GPU work, how long it may take (one per evaluation)."""

    def __init__(self, phase: Phase, cap_s: float, roofline: float | None, clock: Callable[[], float] = time.perf_counter):
        self.phase, self.cap_s, self.roofline, self.clock = phase, cap_s, roofline, clock
        self.probe_s: float | None = None  # wall time of the first checked call, harness work around it included
        self.checked = 0
        self._started: float | None = None
        self.inputs = ""  # set while a checked call runs on inputs not the evaluation's own: said in the phase text

    def before_checked_call(self) -> Limit:
        self.checked += 1
        if self.probe_s is None:
            lim, what = probe_limit(self.roofline, self.cap_s), "the first call"
        else:
            lim, what = call_limit(self.probe_s, self.cap_s), f"checked call {self.checked}"
        self.phase("run", lim.seconds, f"{what}; its limit: {lim.why}" + (f"; {self.inputs}" if self.inputs else ""))
        self._started = self.clock()
        return lim

    def after_checked_call(self) -> None:
        if self.probe_s is None and self._started is not None:
            self.probe_s = self.clock() - self._started

    def before_timing(self, what: str, pairs: int, per_pair_ms: float | None) -> Limit:
        """A chunk of timed calls: `pairs` candidate + library pairs at `per_pair_ms` (None before any pair was timed:
        the probe's wall time stands in for a pair)."""
        if per_pair_ms is None:
            per_pair_ms = 2 * 1000 * (self.probe_s or FLOOR_S / CALL_FACTOR)
        lim = timing_limit(pairs, per_pair_ms, self.cap_s)
        self.phase("timing", lim.seconds, f"{what}; its limit: {lim.why}")
        return lim
