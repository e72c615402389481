"""Timing: CUDA events around each call, a cold L2 before each call, candidate and baseline interleaved.

Each call is a `Side`: a preparation and a check outside the measured interval (for the candidate: every buffer
put back to the state a checked call sees, and the output verified; docs/timing-integrity.md). Each iteration flushes L2 (writes a buffer of at least twice its size, or reads it: `L2Flush`), then times one call of each
function, alternating the order every iteration (ABBA...) so neither side always follows the
flush; clock drift and thermal state therefore hit both sides alike. Statistics: the median and a
bootstrap 95% interval; the speedup's interval resamples the iterations as pairs.
"""
from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..results import DEFAULT_L2_FLUSH, L2_FLUSH_MODES, TimingStat

BOOTSTRAP_RESAMPLES = 2000
# A candidate this many times slower than the library gets a short timing (SLOW_ITERS paired calls, 1 trial)
# and the flag "slow_candidate": its speedup is far below 1 whatever the last percent, and a bench should not
# spend half a minute per turn timing a kernel at 0.02x (the CUDA-core attention reference at full size).
SLOW_FACTOR = 20.0
SLOW_ITERS = 15


@dataclass(frozen=True)
class L2Flush:
    """How every call finds L2 cold: a buffer of `bytes` (at least twice the L2) read ("read", the default: cold, with
    clean lines) or written ("write": the field's usual fill, which leaves the L2 full of dirty lines whose write-back
    the next call pays, about 50 MB on the H200: 19-26% of a decode GEMM's time, and less for a kernel whose eviction
    hints spare those lines: bench/results/gemm_sweep.md rounds 30 and 33)."""

    bytes: int
    mode: str = DEFAULT_L2_FLUSH

    def __post_init__(self) -> None:
        if self.mode not in L2_FLUSH_MODES:
            raise ValueError(f"L2 flush mode {self.mode!r}: expected one of {', '.join(L2_FLUSH_MODES)}")


def no_persisting_l2(cu=None) -> None:
    """No part of L2 set aside for persisting accesses, and no line held as one. A kernel's evict_last loads are
    persisting accesses, which keep the set-aside share of L2 from ordinary traffic (the CUDA programming guide, L2
    cache control): with no share, the flush's reads reach every line. Only host code sets the share, never a kernel;
    a library might, so every evaluation starts here (evaluation_flush). Where the share cannot be set (MPS, MIG) it
    must read 0."""
    if cu is None:
        from cuda.bindings import driver as cu

    limit = cu.CUlimit.CU_LIMIT_PERSISTING_L2_CACHE_SIZE
    cu.cuCtxSetLimit(limit, 0)  # refused where the share is fixed: what it reads is what counts
    err, share = cu.cuCtxGetLimit(limit)
    if err != cu.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"cuCtxGetLimit(CU_LIMIT_PERSISTING_L2_CACHE_SIZE) failed: {err}")
    if share:
        raise RuntimeError(f"{share} bytes of L2 are set aside for persisting accesses and cannot be released: lines a "
                           "kernel loads evict_last could outlast the L2 flush between timed calls")
    cu.cuCtxResetPersistingL2Cache()  # with no share there are none to reset: its result does not matter


MIN_FLUSH_BYTES = 64 * 2**20


def evaluation_flush(l2_bytes: int, mode: str = DEFAULT_L2_FLUSH) -> L2Flush:
    """The flush every call of an evaluation starts from: a buffer twice the L2 (at least MIN_FLUSH_BYTES), once the
    L2 set aside for persisting accesses is released (no_persisting_l2: driver calls made once per evaluation, not
    per call)."""
    no_persisting_l2()
    return L2Flush(max(2 * l2_bytes, MIN_FLUSH_BYTES), mode)


def bootstrap_median_ci(samples, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0) -> tuple[float, float]:
    x = np.asarray(samples, dtype=np.float64)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(x), size=(resamples, len(x)))
    meds = np.median(x[idx], axis=1)
    return float(np.percentile(meds, 2.5)), float(np.percentile(meds, 97.5))


def bootstrap_ratio_ci(numerator, denominator, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 1) -> tuple[float, float]:
    """95% interval of median(numerator) / median(denominator), resampling paired iterations."""
    a = np.asarray(numerator, dtype=np.float64)
    b = np.asarray(denominator, dtype=np.float64)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, min(len(a), len(b)), size=(resamples, min(len(a), len(b))))
    ratios = np.median(a[idx], axis=1) / np.median(b[idx], axis=1)
    return float(np.percentile(ratios, 2.5)), float(np.percentile(ratios, 97.5))


def summarize(samples) -> TimingStat:
    lo, hi = bootstrap_median_ci(samples)
    x = np.asarray(samples, dtype=np.float64)
    return TimingStat(median_ms=float(np.median(x)), ci_low_ms=lo, ci_high_ms=hi, n=len(x),
                      min_ms=float(x.min()), max_ms=float(x.max()))


def speedup(baseline_ms, candidate_ms) -> tuple[float, tuple[float, float]]:
    s = float(np.median(baseline_ms) / np.median(candidate_ms))
    return s, bootstrap_ratio_ci(baseline_ms, candidate_ms)


def event_times(fn: Callable[[], object], calls: int) -> list[float]:
    """Milliseconds of `calls` back-to-back calls, each between its own CUDA events (no L2 flush)."""
    import torch

    times = []
    for _ in range(calls):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return times


def probe_ms(fn: Callable[[], object], calls: int = 2) -> float:
    """Median milliseconds of a few back-to-back warm calls: a rough per-call cost to plan the real timing."""
    return float(np.median(event_times(fn, calls)))


@dataclass
class Side:
    """One timed side: `call` is measured; `prepare` (before the L2 flush) and `check` (after the call has finished)
    run outside the measured interval. Every call, warm-up included, goes through all three."""

    call: Callable[[], object]
    prepare: Callable[[], None] = lambda: None
    check: Callable[[object], None] = lambda _out: None


class FlushBuffer:
    """The buffer every call's L2 flush goes through, for one time_sides run.

    Written ("write"), its contents are replaced before every call. Read ("read"), they would outlive every call
    untouched: a kernel that found the buffer could keep a result there for its next call. So it starts as zeros and
    each flush is a reduction that reads every line and also says whether any of them is no longer zero; the answers
    are read back once, at the end of the run (`check`).

    The answers are kept where a kernel cannot undo them: each flush that finds the buffer clean adds a key drawn on
    the host for that flush alone (passed by value to the adding kernel, never stored in device memory) to a device
    sum, and the host adds the same keys. A kernel that left a result in the buffer finds the sum short of one key
    it never saw; a yes/no flag it could simply have reset."""

    def __init__(self, flush: L2Flush, device="cuda"):
        import torch

        self.mode = flush.mode
        self.data = torch.zeros(flush.bytes // 4, dtype=torch.int32, device=device)
        self.clean_keys = torch.zeros((), dtype=torch.int64, device=device)
        self.expected = 0  # the sum of every flush's key, on the host (mod 2**64)

    def flush(self, fill: int) -> None:
        if self.mode == "read":
            key = secrets.randbits(62) + 1
            self.expected = (self.expected + key) % 2**64
            self.clean_keys.add_((~self.data.any()).long() * key)  # every line read: L2 cold and clean
        else:
            self.data.fill_(fill)

    def check(self) -> None:
        """Raise RUNTIME_ERROR (OUT_OF_BOUNDS_WRITE) when any read flush found the buffer written."""
        if self.mode == "read" and int(self.clean_keys) % 2**64 != self.expected:
            from .verdict import Failed

            raise Failed("RUNTIME_ERROR", "out-of-bounds write: a kernel wrote into the harness's L2 flush buffer, "
                                          "memory no buffer of the plan owns, between two calls",
                         runtime_error="OUT_OF_BOUNDS_WRITE: L2 flush buffer")


def time_sides(sides: list[Side], *, flush: L2Flush, warmup: int = 10, iters: int = 50, trials: int = 3,
               on_trial: Callable[[int], None] | None = None,
               audit: tuple[int, Callable[[], None]] | None = None,
               report: dict | None = None) -> list[list[float]]:
    """Milliseconds per call of each side: `trials` rounds of `iters` interleaved (ABBA), cold-L2 iterations.

    Each call: prepare -> flush L2 -> launch gate -> start event -> call -> end event -> gate opened -> wait for it ->
    check. The gate (gate.py) holds the GPU until the host has enqueued the call, so the host's launch latency is
    never inside the interval, however loaded the host; waiting for each call before the next lets `check` verify
    its output before anything else runs; the events time the GPU only. `report`, when given, gets "gate_stalls":
    the timed calls (both sides; warm-up calls, whose durations are thrown away, not counted) whose gate gave up
    waiting for the host (their interval may hold its latency).
    `audit` = (n, fn): fn runs after the check of call n (counting from 0 over warm-up and trials, both sides), outside
    every timed interval; the caller draws n, so a kernel cannot tell when it comes. The flush buffer is checked last
    (FlushBuffer)."""
    import torch

    from .gate import launch_gate

    buffer = FlushBuffer(flush)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    gate, stream = launch_gate(), torch.cuda.current_stream().cuda_stream
    done = 0

    def one(side: Side, fill: int) -> float:
        nonlocal done
        side.prepare()
        buffer.flush(fill)
        ticket = gate.close(stream)
        start.record()
        out = side.call()
        end.record()
        gate.open(ticket)
        end.synchronize()
        side.check(out)
        ms = start.elapsed_time(end)
        if audit is not None and done == audit[0]:
            audit[1]()
        done += 1
        return ms

    for it in range(warmup):
        for side in sides:
            one(side, it & 0xFF)
    # Counted from here: a warm-up call's gate that gave up (a first call's lazy setup) leaves no duration behind.
    stalls_before = gate.stalls()
    times: list[list[float]] = [[] for _ in sides]
    for trial in range(trials):
        for it in range(iters):
            order = range(len(sides)) if (it + trial) % 2 == 0 else reversed(range(len(sides)))
            for k in order:
                times[k].append(one(sides[k], it & 0xFF))
        if on_trial:
            on_trial(trial)
    buffer.check()
    if report is not None:
        report["gate_stalls"] = gate.stalls() - stalls_before
    return times


def time_interleaved(fns: list[Callable[[], object]], *, flush: L2Flush, warmup: int = 10, iters: int = 50,
                     trials: int = 3, on_trial: Callable[[int], None] | None = None) -> list[list[float]]:
    """time_sides for plain functions (library baselines timed on their own)."""
    return time_sides([Side(fn) for fn in fns], flush=flush, warmup=warmup, iters=iters, trials=trials,
                      on_trial=on_trial)


def plan_iterations(job, per_call_ms: float, slow: bool = False) -> tuple[int, int, int, bool]:
    """Warm-up, iterations and trials (from a messages.GpuJob) that fit in the watchdog's time; fewer for very slow
    candidates."""
    warmup, iters, trials = job.warmup, job.iters, job.timing_trials
    if slow:
        warmup, iters, trials = min(warmup, 2), min(iters, SLOW_ITERS), 1
    budget_ms = 0.6 * job.timeout_s * 1000
    needed = (warmup + iters * trials) * per_call_ms
    if needed <= budget_ms:
        return warmup, iters, trials, slow
    iters = max(5, int(budget_ms / per_call_ms / trials) - 2)
    return min(warmup, 2), iters, trials, True
