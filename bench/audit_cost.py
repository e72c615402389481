"""What the audit of cached library instances costs as a worker's cache fills with workloads.

Run on a GPU machine (repository root, after `source bench/gpu_env.sh`):

    python3 bench/audit_cost.py [--workloads W1,W2 | --all] [--instances 3] [--reps 7] [--json F]

An evaluation audits twice (runner.audit: at a drawn call of its timing and after it), and each audit draws the inputs
of every cached library instance of every workload again from its seed and compares them, live and pristine copies,
bit for bit (WorkerState.tampered_baselines). This fills one WorkerState's cache as a bench over many workloads
would (the primary library's instances, `--instances` each, as an evaluation with that many input sets attaches),
releases their calls as the timing of another evaluation does (`release_idle`: the inputs stay), then times
`tampered_baselines()` at each fill level: median and range over `--reps`, with the bytes compared.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

DEFAULT = ["gemm_bf16_m8192_n7168_k5120", "gemm_bf16_m64_n7168_k5120", "gemm_bf16_m128_n7168_k5120",
           "gemm_bf16_m4096_n4096_k4096", "mha_fwd_d128", "mha_fwd_d128_causal", "mha_bwd_d128"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", default=",".join(DEFAULT))
    ap.add_argument("--all", action="store_true", help="every non-smoke workload the registry has")
    ap.add_argument("--instances", type=int, default=3)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--json", default="")
    args = ap.parse_args()

    import torch
    from cuda.bindings import driver as cu

    from ptxbench.tools.gpu.state import WorkerState
    from ptxbench.tools.gpu.worker import read_limits
    from ptxbench.workloads.registry import get_workload, list_workloads

    torch.cuda.set_device(0)
    torch.zeros(1, device="cuda")
    cu.cuInit(0)
    state = WorkerState(0, read_limits(0))
    ids = ([w.id for w in list_workloads() if "smoke" not in w.tags] if args.all else args.workloads.split(","))

    def timed() -> tuple[list[float], int]:
        times = []
        for _ in range(args.reps):
            torch.cuda.synchronize()
            start = time.perf_counter()
            bad = state.tampered_baselines()
            torch.cuda.empty_cache()  # as runner.audit does after it
            torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
            assert not bad, bad  # nothing wrote into them here
        return times, len([k for k in state.cache.keys() if k[0] == "baseline"])

    rows = []
    for n, wid in enumerate(ids, 1):
        wl = get_workload(wid)
        start = time.perf_counter()
        for i in range(args.instances):
            state.baseline(wl, wl.primary_baseline.name, "normal", i)
        made = time.perf_counter() - start
        state.release_idle()  # as before any timing: instances of other evaluations keep their inputs only
        times, cached = timed()
        compared = sum(2 * t.numel() * t.element_size() for k in state.cache.keys() if k[0] == "baseline"
                       for t in state.cache.peek(k).inputs.values())
        row = {"workloads": n, "added": wid, "instances_cached": cached, "bytes_compared": compared,
               "made_s": round(made, 3), "median_s": statistics.median(times), "min_s": min(times), "max_s": max(times),
               "evicted": n * args.instances - cached}
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"device": torch.cuda.get_device_name(0), "instances": args.instances,
                                               "reps": args.reps, "rows": rows}, indent=1))
    print("| workloads cached | + | instances | GB compared (live + pristine) | audit s, median [min, max] | "
          "per evaluation (2 audits) |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['workloads']} | {r['added']} | {r['instances_cached']} | {r['bytes_compared'] / 1e9:.2f} | "
              f"{r['median_s']:.3f} [{r['min_s']:.3f}, {r['max_s']:.3f}] | {2 * r['median_s']:.3f} s |")


if __name__ == "__main__":
    main()
