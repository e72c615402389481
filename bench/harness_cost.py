"""Harness cost per candidate on the GEMM task: compile, correctness, timing, wall.

Run on a GPU machine:  python3 bench/harness_cost.py [--reps 5] [--json OUT.json]
The first evaluation builds the worker's caches (inputs, float32 references, the cuBLAS baseline,
the ceilings); the next `reps` evaluations run with caches warm, which is the cost a turn pays.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from ptxbench.tools.compile import compile_source
from ptxbench.tools.evaluate import LocalEvaluator
from ptxbench.tools.evaluator import EvalOptions
from ptxbench.tools.gpu.pool import GpuPool, PoolConfig

GEMM = "gemm_bf16_m8192_n7168_k5120"
ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    src = (ROOT / "workloads" / "solutions" / f"{GEMM}.cu").read_text()
    t0 = time.perf_counter()
    cold = compile_source(src, "cuda", "sm_90a", GEMM, use_cache=False)
    cold_compile = time.perf_counter() - t0
    t0 = time.perf_counter()
    pool = GpuPool(PoolConfig(spares=0)).start()
    pool_start = time.perf_counter() - t0
    ev = LocalEvaluator(pool)
    t0 = time.perf_counter()
    first = ev.evaluate(GEMM, src, EvalOptions())
    first_wall = time.perf_counter() - t0
    rows = []
    for _ in range(args.reps):
        t0 = time.perf_counter()
        r = ev.evaluate(GEMM, src, EvalOptions())
        wall = time.perf_counter() - t0
        assert r.status == "PASSED", r.message
        rows.append({"wall": wall, **r.seconds, "speedup": r.timing.speedup, "ci": r.timing.speedup_ci,
                     "cand_ms": r.timing.candidate.median_ms, "base_ms": r.timing.baselines["cublas"].median_ms})
    ev.close()
    med = {k: statistics.median(row[k] for row in rows) for k in rows[0] if k != "ci"}
    out = {"workload": GEMM, "cold_compile_s": cold_compile, "compile_status": cold.status, "pool_start_s": pool_start,
           "first_eval_s": first_wall, "first_status": first.status, "first_seconds": first.seconds,
           "warm_median": med, "warm_runs": rows}
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    print(f"pool start {pool_start:.2f} s; first evaluation (caches cold) {first_wall:.2f} s ({first.status}); "
          f"cold compile {cold_compile:.2f} s")
    print("| phase (warm caches, median of %d) | seconds |" % len(rows))
    print("|---|---|")
    for k in ("parse", "compile", "gpu.correctness", "gpu.timing", "gpu.audit", "gpu.final_checks", "gpu.gpu_total", "gpu",
              "wall"):
        if k in med:
            print(f"| {k} | {med[k]:.3f} |")
    print(f"| wall with a cold compile (wall - cached compile + cold compile) | "
          f"{med['wall'] - med.get('compile', 0) + cold_compile:.3f} |")
    print(f"speedups: {[round(r['speedup'], 4) for r in rows]}  candidate {med['cand_ms']:.4f} ms, cuBLAS {med['base_ms']:.4f} ms")


if __name__ == "__main__":
    main()
