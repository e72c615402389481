"""From timed calls to the published timing record: the durations kept, the medians and intervals, the speedup,
%SOL and the flags. Pure arithmetic on lists of milliseconds (no CUDA), so every rule here is tested on the CPU.

The pairing is the one time_sides makes: index i of the candidate's list and of the library's is one iteration
(both calls between the same two flushes' worth of GPU history), so anything dropped is dropped as a pair and the
speedup's interval resamples pairs (timing.bootstrap_ratio_ci).
"""
from __future__ import annotations

import math

import numpy as np

from . import ceilings as roofline
from .timing import speedup, summarize

# Timing.flags: a pair was left out because one of its durations was not a positive finite number (an event pair
# that read 0, negative or NaN: a clock glitch, never a kernel's time). The rest of the pairs are the timing.
INVALID_DURATIONS = "invalid_durations"


def is_duration(ms: float) -> bool:
    return math.isfinite(ms) and ms > 0.0


def valid_durations(samples) -> np.ndarray:
    """The samples that are positive finite milliseconds. None left is the harness's fault, never a kernel's timing:
    ValueError (a NaN median would be written as JSON null, which no reader takes back as a TimingStat)."""
    x = np.asarray(samples, dtype=np.float64)
    kept = x[np.isfinite(x) & (x > 0.0)]
    if kept.size == 0:
        raise ValueError(f"no valid duration among {x.size} timed calls (each was zero, negative or not a number)")
    return kept


def valid_pairs(candidate_ms, baseline_ms) -> tuple[np.ndarray, np.ndarray, int]:
    """(candidate, baseline, pairs dropped): the iterations whose two durations are both positive and finite. A glitch
    on one side drops its partner too, so the lists stay paired."""
    c = np.asarray(candidate_ms, dtype=np.float64)
    b = np.asarray(baseline_ms, dtype=np.float64)
    if c.size != b.size:
        raise ValueError(f"unpaired timing: {c.size} candidate calls against {b.size} library calls")
    ok = np.isfinite(c) & (c > 0.0) & np.isfinite(b) & (b > 0.0)
    if not ok.any():
        raise ValueError(f"no valid pair among {c.size} timed iterations (a duration zero, negative or not a number "
                         f"in each)")
    return c[ok], b[ok], int(c.size - ok.sum())


def note_host_stalls(record: dict, stalls: int) -> dict:
    """`record` with how many of its timed calls' launch gates gave up waiting for the host (time_sides'
    "gate_stalls"; gate.py), and the flag when any did: a reader sees whether one call of the hundreds may hold the
    host's latency or most did. In place; returned for chaining."""
    record["host_stalls"] = int(stalls)
    if stalls:
        record["flags"].append("host_stalls")
    return record


def summarize_durations(samples) -> dict:
    """The TimingStat fields of one side timed on its own (the other baselines), invalid durations left out."""
    return summarize(valid_durations(samples)).model_dump()


def timing_record(wl, cand_ms, base_ms, primary: str, others: dict, ceil: dict, gpu: str, reduced: bool,
                  slow: bool = False) -> dict:
    """The Timing fields of one paired timing: `cand_ms` and `base_ms` from time_sides (the same iterations)."""
    cand, base, dropped = valid_pairs(cand_ms, base_ms)
    cstat = summarize(cand)
    sp, sp_ci = speedup(base, cand)
    flags = roofline.flags(sp, wl.flops, wl.min_bytes, cstat.median_ms, ceil, gpu)
    if slow:
        flags.append("slow_candidate")
    if reduced:
        flags.append("reduced_iterations")
    if dropped:
        flags.append(INVALID_DURATIONS)
    return {
        "candidate": cstat.model_dump(),
        "baselines": {primary: summarize(base).model_dump(), **others},
        "primary_baseline": primary,
        "speedup": sp,
        "speedup_ci": sp_ci,
        "tflops": wl.flops / cstat.median_ms / 1e9,
        "sol_pct": roofline.sol_pct(wl.flops, wl.min_bytes, cstat.median_ms, ceil),
        "ceilings": ceil,
        "flags": flags,
        "invalid_pairs": int(dropped),
    }
