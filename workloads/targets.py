"""The default target speedup of a workload, from how close the library already runs to the roof.

Asking for 1.2x the library is reasonable where the library leaves room, and impossible where it does not:
cuBLAS runs the main GEMM at about 80% of the bf16 peak on an H200, so 1.2x would be 97% of the peak. The
target asks for half of the headroom the roof leaves over the library, capped at MAX_TARGET, and the task
text says why. The library rates were measured on an H200 (bench/results: timing_integrity.md for the GEMM,
the attention rows from the library timings recorded with the project's facts); a workload without a measured
rate gets MAX_TARGET. `--target-speedup` overrides all of this.
"""
from __future__ import annotations

from dataclasses import dataclass

from .schema import Workload

MAX_TARGET = 1.2
HEADROOM_SHARE = 0.5
# Dense bf16 peak of the datasheet (TFLOP/s): the roof a kernel cannot pass.
PEAK_TFLOPS = {"sm_90a": 989.0}
# The primary library's rate on an H200 (TFLOP/s, FLOPs as the workload counts them).
LIBRARY_TFLOPS = {
    "gemm_bf16_m8192_n7168_k5120": 796.0,   # cuBLAS 0.755 ms (bench/results/timing_integrity.md, run 4)
    "mha_fwd_d128": 614.0,                  # cuDNN 2.688 ms
    "mha_fwd_d128_causal": 614.0,           # cuDNN 1.344 ms
    "mha_bwd_d128": 512.0,                  # cuDNN 8.056 ms
    "mha_bwd_d128_causal": 460.0,           # cuDNN 4.486 ms
}


@dataclass(frozen=True)
class Target:
    speedup: float
    reason: str


def default_target(workload: Workload, arch: str = "sm_90a") -> Target:
    rate, peak = LIBRARY_TFLOPS.get(workload.id), PEAK_TFLOPS.get(arch)
    if rate is None or peak is None:
        return Target(MAX_TARGET, f"no library rate is recorded for this workload, so the default {MAX_TARGET}x")
    roof = peak / rate
    speedup = round(min(MAX_TARGET, max(1.0, 1.0 + HEADROOM_SHARE * (roof - 1.0))), 2)
    return Target(speedup, f"the library runs at {100 * rate / peak:.0f}% of the {peak:.0f} TFLOP/s bf16 peak here, so "
                           f"the roof is {roof:.2f}x the library; the target asks for "
                           f"{'half of that headroom' if speedup < MAX_TARGET else f'{MAX_TARGET}x, well under it'}")
