"""Build the repair suite on a GPU machine (repository root), then commit what it writes:
  source bench/gpu_env.sh && python3 bench/build_repair_suite.py --out workloads/repairs
Writes <out>/suite.json and one folder per task (task.json + the broken solution file), replacing the task
folders of an older build, and prints a summary table. Candidates: agent/repairs/candidates.py.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from ptxbench.agent.repairs.build import build_suite, precompile, summary_table
from ptxbench.agent.repairs.candidates import all_candidates
from ptxbench.agent.repairs.suite import write_suite
from ptxbench.agent.records.rundir import LOG_NAME, SEALED_LOG_NAME
from ptxbench.tools.evaluate import LocalEvaluator
from ptxbench.tools.gpu.pool import GpuPool, PoolConfig


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="workloads/repairs")
    ap.add_argument("--max-seconds", type=float, default=270.0, help="stop evaluating candidates after this (the pool start is extra)")
    ap.add_argument("--timeout", type=float, default=3.0, help="watchdog per candidate (a hang costs this)")
    ap.add_argument("--spares", type=int, default=4, help="hot spare workers (a fault replaces one)")
    ap.add_argument("--trajectories", default="docs/examples", help="recorded runs whose failing submissions are candidates")
    args = ap.parse_args()
    t0 = time.monotonic()
    # the run folders (above trajectories/<id>/), as load_run reads them
    roots = sorted({p.parent.parent.parent for p in Path(args.trajectories).glob("**/trajectories/*/trajectory.jsonl*")
                    if p.name in (LOG_NAME, SEALED_LOG_NAME)})
    candidates = all_candidates(roots)
    print(f"{len(candidates)} candidates; compiling ...", flush=True)
    precompile(candidates, "sm_90a")
    print(f"compiled in {time.monotonic() - t0:.0f} s; starting the GPU pool ...", flush=True)
    pool = GpuPool(PoolConfig(spares=args.spares)).start()
    evaluator = LocalEvaluator(pool)

    def line(c, r, kept):
        print(f"  {c.id}: {r.status}{'' if kept else '  (accepted: dropped)'}", flush=True)

    try:
        report = build_suite(candidates, evaluator, timeout_s=args.timeout, max_seconds=args.max_seconds, on_result=line)
    finally:
        evaluator.close()
    write_suite(args.out, report.suite, report.sources)
    print(summary_table(report))
    print(f"wrote {args.out} in {time.monotonic() - t0:.0f} s in all")
    s = report.suite
    return 0 if len(s.tasks) >= 40 and len({t.bug_class for t in s.tasks}) >= 10 else 3


if __name__ == "__main__":
    sys.exit(main())
