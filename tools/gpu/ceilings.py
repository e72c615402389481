"""Roofline ceilings measured on the device (once per GPU) and the %SOL and plausibility flags.

Ceilings: the bf16 tensor-core rate of a large cuBLAS matmul and the bandwidth of a large device
copy. %SOL = the roofline time (max of FLOPs / rate and bytes / bandwidth) over the measured time.
Flags: a speedup above IMPLAUSIBLE_SPEEDUP over the library, or a rate above the datasheet peak
(or above the measured ceilings by ABOVE_ROOFLINE_MARGIN when the GPU is not in the table).
An implausible speedup over a library that itself runs below LIBRARY_OVERHEAD_SOL_PCT of the roofline
also gets `library_overhead_bound`: at tiny shapes the library's fixed cost makes large speedups honest.
"""
from __future__ import annotations

IMPLAUSIBLE_SPEEDUP = 1.5
# Below this %SOL the library's time is mostly fixed cost (launch, set-up: cuDNN at the smoke shapes runs at
# 0.1%), so beating it by more than IMPLAUSIBLE_SPEEDUP can be honest: flagged as such next to the speedup.
LIBRARY_OVERHEAD_SOL_PCT = 5.0
ABOVE_ROOFLINE_MARGIN = 1.3
# Dense bf16 TFLOP/s and HBM GB/s from the datasheets. A device name is matched to the first key it contains, so
# the parts whose name holds another's come first: an H100 NVL has 3.9 TB/s, not the SXM part's 3.35 (read as the
# SXM, an honest memory-bound kernel on it was above the roofline), an H100 PCIe 2.0; a GH200 up to 4.9 (its HBM3e
# part; the HBM3 one 4.0), a GB200 2.5 PFLOP/s. The plain names are the SXM parts.
DATASHEET = {"H100 NVL": (835.0, 3900.0), "H100 PCIe": (756.0, 2000.0), "GH200": (989.0, 4900.0),
             "H200 NVL": (835.0, 4800.0), "GB200": (2500.0, 8000.0),
             "H100": (989.0, 3350.0), "H200": (989.0, 4800.0), "B200": (2250.0, 8000.0)}
# The SMs' top clock (MHz; nvidia-smi's clocks.max.sm on the H200, the SXM parts' boost), against which a profiled
# kernel's own clock shows the power limit at work (the H200's main GEMM: 1,600-1,640 MHz on randn values,
# bench/results/gemm_sweep.md rounds 27-28).
MAX_SM_MHZ = {"H100": 1980.0, "H200": 1980.0}


def _row(table: dict, gpu_name: str):
    """The value of the first key of `table` that the device name contains ('NVIDIA H200' -> 'H200'), or None."""
    return next((value for key, value in table.items() if key in gpu_name), None)


def max_sm_mhz(gpu_name: str) -> float | None:
    return _row(MAX_SM_MHZ, gpu_name)


def datasheet_peak(gpu_name: str) -> tuple[float, float] | None:
    return _row(DATASHEET, gpu_name)


def measure(matmul_n: int = 8192, copy_bytes: int = 1 << 30, reps: int = 10) -> dict[str, float]:
    """{'tflops_bf16', 'hbm_gbps'}: best of `reps` timed calls (the ceiling is what the device can do)."""
    import torch

    from .timing import event_times

    a = torch.randn(matmul_n, matmul_n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(matmul_n, matmul_n, device="cuda", dtype=torch.bfloat16)
    c = torch.empty_like(a)
    src = torch.empty(copy_bytes // 4, device="cuda", dtype=torch.float32).fill_(1.0)
    dst = torch.empty_like(src)

    def best(fn) -> float:
        for _ in range(3):
            fn()
        return min(event_times(fn, reps))

    mm_ms = best(lambda: torch.matmul(a, b, out=c))
    copy_ms = best(lambda: dst.copy_(src))
    a = b = c = src = dst = None  # free the buffers before empty_cache()
    torch.cuda.empty_cache()
    return {"tflops_bf16": 2.0 * matmul_n**3 / mm_ms / 1e9, "hbm_gbps": 2.0 * copy_bytes / copy_ms / 1e6}


def roofline_ms(flops: float, min_bytes: float, ceilings: dict[str, float]) -> float:
    return max(flops / (ceilings["tflops_bf16"] * 1e9), min_bytes / (ceilings["hbm_gbps"] * 1e6))


def sol_pct(flops: float, min_bytes: float, ms: float, ceilings: dict[str, float]) -> float:
    return 100.0 * roofline_ms(flops, min_bytes, ceilings) / ms


def flags(speedup: float | None, flops: float, min_bytes: float, ms: float, ceilings: dict[str, float],
          gpu_name: str) -> list[str]:
    out = []
    if speedup is not None and speedup > IMPLAUSIBLE_SPEEDUP:
        out.append("implausible_speedup")
        library_ms = speedup * ms
        if ceilings and sol_pct(flops, min_bytes, library_ms, ceilings) < LIBRARY_OVERHEAD_SOL_PCT:
            out.append("library_overhead_bound")
    peak = datasheet_peak(gpu_name)
    limits = ({"tflops_bf16": peak[0], "hbm_gbps": peak[1]} if peak else
              {k: v * ABOVE_ROOFLINE_MARGIN for k, v in ceilings.items()})
    if limits and ms < roofline_ms(flops, min_bytes, limits):
        out.append("above_roofline")
    return out


def suspicious(flags: list[str]) -> bool:
    """Faster than the device can go, or implausibly faster than a library that is not overhead-bound: such a
    timing is checked again under a changed schedule, and if it stands the result is TIMING_SUSPECT."""
    return "above_roofline" in flags or ("implausible_speedup" in flags and "library_overhead_bound" not in flags)
