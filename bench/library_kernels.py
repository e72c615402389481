"""Which kernels cuBLAS runs for a bf16 GEMM C = A @ B^T (the baseline of the gemm_* workloads), with their launch:
torch's profiler records one `torch.matmul` after three warm-up calls, and each kernel's name (cuBLAS names its
kernels by tile, cluster and stage count), time, grid, block, registers and shared memory are printed as JSON lines.

    source bench/gpu_env.sh && python3 bench/library_kernels.py --m 8192 --n 7168 --k 5120 [--json F]   # GPU
"""
from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

FIELDS = ("grid", "block", "registers per thread", "shared memory", "blocks per SM", "est. achieved occupancy %")


def kernels_of(trace: dict) -> list[dict]:
    """The kernel events of a chrome trace (torch.profiler's export): name, duration (us) and launch fields."""
    return [{"name": e["name"], "dur_us": e.get("dur"), **{k: e.get("args", {}).get(k) for k in FIELDS}}
            for e in trace.get("traceEvents", []) if e.get("cat") == "kernel"]


def main() -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile

    ap = argparse.ArgumentParser()
    ap.add_argument("--m", type=int, default=8192)
    ap.add_argument("--n", type=int, default=7168)
    ap.add_argument("--k", type=int, default=5120)
    ap.add_argument("--json")
    a = ap.parse_args()
    x = torch.randn(a.m, a.k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(a.n, a.k, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(a.m, a.n, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        torch.matmul(x, w.T, out=c)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        torch.matmul(x, w.T, out=c)
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(trace))
        kernels = kernels_of(json.loads(trace.read_text()))
    out = {"shape": [a.m, a.n, a.k], "torch": torch.__version__, "cuda": torch.version.cuda,
           "device": torch.cuda.get_device_name(0), "kernels": kernels}
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1))
    for k in kernels:
        print(json.dumps(k))


if __name__ == "__main__":
    main()
