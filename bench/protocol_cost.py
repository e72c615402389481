"""What one evaluation's GPU phases cost: the reference solutions of a few workloads evaluated in-process
(worker + referee, the full protocol of docs/timing-integrity.md, no profile), several times each. Run on a GPU
machine (repository root, after `source bench/gpu_env.sh`):

    python3 bench/protocol_cost.py [--reps 3] [--workloads gemm_bf16_m8192_n7168_k5120,mha_fwd_d128] [--json OUT]

Per workload: the median of each phase (correctness, timing, final checks, gpu_total: the time the GPU is held
for the evaluation), the calls the timing made, the time per timed call beside the kernel's own time (what the
restore and checks around each call add), and the speedups, so a change to the protocol shows its cost and
whether it moved the honest speedups.
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


def main() -> None:
    from ptxbench.agent.models.builtin import reference_source
    from ptxbench.tools.gpu.inprocess import in_process_worker, job_for
    from ptxbench.tools.gpu.runner import evaluate_job

    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--workloads", default="gemm_bf16_m8192_n7168_k5120,mha_fwd_d128")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    rows = []
    with in_process_worker() as state:
        for wid in args.workloads.split(","):
            job = job_for(reference_source(wid), wid, state, timeout_s=60, prepare_timeout_s=300)
            for rep in range(args.reps):
                out, _ = evaluate_job(state, job, lambda *_a: None)
                t = out.timing
                calls = 2 * (t.candidate.n + job.warmup) + 4 if t else 0  # timed, warm-up and the 2 probe pairs' calls
                row = {"workload": wid, "rep": rep, "status": out.status, "speedup": t.speedup if t else None,
                       "cand_ms": t.candidate.median_ms if t else None,
                       "lib_ms": t.baselines[t.primary_baseline].median_ms if t else None,
                       "timed_calls": calls, **{k: round(v, 3) for k, v in out.seconds.items()}}
                rows.append(row)
                print(json.dumps(row), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    print("\n| workload | status | speedup (each) | kernel ms | timing s | ms per call | of it the kernel | gpu_total s |")
    print("|---|---|---|---|---|---|---|---|")
    for wid in args.workloads.split(","):
        rs = [r for r in rows if r["workload"] == wid and r["speedup"]]
        if not rs:
            print(f"| {wid} | {[r['status'] for r in rows if r['workload'] == wid]} | - | - | - | - | - | - |")
            continue
        timing = statistics.median(r["timing"] for r in rs)
        per_call = 1000 * timing / rs[0]["timed_calls"]
        kernel = (statistics.median(r["cand_ms"] for r in rs) + statistics.median(r["lib_ms"] for r in rs)) / 2
        each = ", ".join(f"{r['speedup']:.4f}" for r in rs)
        print(f"| {wid} | {rs[0]['status']} | {each} | {kernel:.3f} "
              f"| {timing:.2f} | {per_call:.2f} | {100 * kernel / per_call:.0f}% "
              f"| {statistics.median(r['gpu_total'] for r in rs):.2f} |")


if __name__ == "__main__":
    main()
