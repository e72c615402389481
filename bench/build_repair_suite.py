"""Build the repair suite on a GPU machine (repository root), then commit what it writes:
  source bench/gpu_env.sh && python3 bench/build_repair_suite.py --out workloads/repairs
Writes <out>/suite.json and one folder per task (task.json + the broken solution file), replacing the task
folders of an older build, and prints a summary table. Candidates: agent/repairs/candidates.py.

On a CPU, `--renew-comments` compares the suite in --out with the candidates the builder makes today: a task whose
kernel differs in comments and white space only (the same code, so its GPU verdict stands) takes today's text; the
tasks whose code differs are listed (their reference kernel changed since the build: a GPU build renews them).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from ptxbench.agent.repairs.build import build_suite, cpu_verdicts, incomplete, precompile, suite_drift, summary_table
from ptxbench.agent.repairs.candidates import all_candidates
from ptxbench.agent.repairs.suite import load_suite, replace_solutions, write_suite
from ptxbench.agent.records.rundir import LOG_NAME, SEALED_LOG_NAME
from ptxbench.tools.evaluate import LocalEvaluator
from ptxbench.tools.gpu.pool import GpuPool, PoolConfig


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="workloads/repairs")
    ap.add_argument("--max-seconds", type=float, default=270.0, help="stop evaluating candidates after this (the pool start is extra)")
    ap.add_argument("--timeout", type=float, default=3.0, help="watchdog per candidate (a hang costs this)")
    ap.add_argument("--confirm", type=int, default=1, help="further evaluations of each rejected candidate; a status "
                    "that changes (a race that bites only sometimes) drops it")
    ap.add_argument("--spares", type=int, default=4, help="hot spare workers (a fault replaces one)")
    ap.add_argument("--trajectories", default="docs/examples", help="recorded runs whose failing submissions are candidates")
    ap.add_argument("--renew-comments", action="store_true", help="CPU: renew only the texts that differ from today's "
                    "candidates in comments and white space, and list the tasks whose code differs")
    args = ap.parse_args()
    t0 = time.monotonic()
    # the run folders (above trajectories/<id>/), as load_run reads them
    roots = sorted({p.parent.parent.parent for p in Path(args.trajectories).glob("**/trajectories/*/trajectory.jsonl*")
                    if p.name in (LOG_NAME, SEALED_LOG_NAME)})
    candidates = all_candidates(roots)
    if args.renew_comments:
        return renew_comments(args.out, candidates)
    print(f"{len(candidates)} candidates; compiling ...", flush=True)
    precompile(candidates, "sm_90a")
    print(f"compiled in {time.monotonic() - t0:.0f} s; starting the GPU pool ...", flush=True)
    pool = GpuPool(PoolConfig(spares=args.spares)).start()
    evaluator = LocalEvaluator(pool)

    def line(c, r, kept):
        print(f"  {c.id}: {r.status}{'' if kept else '  (accepted: dropped)'}", flush=True)

    try:
        report = build_suite(candidates, evaluator, timeout_s=args.timeout, max_seconds=args.max_seconds, on_result=line,
                             confirm=args.confirm)
    finally:
        evaluator.close()
    write_suite(args.out, report.suite, report.sources)
    print(summary_table(report))
    print(f"wrote {args.out} in {time.monotonic() - t0:.0f} s in all")
    s = report.suite
    if why := incomplete(report):
        print(why)
        return 5
    return 0 if len(s.tasks) >= 40 and len({t.bug_class for t in s.tasks}) >= 10 else 3


def renew_comments(out: str, candidates) -> int:
    """0 when every task is today's candidate after the renewal, else 4 (a GPU build is due)."""
    suite = load_suite(out)
    drift = suite_drift(suite, candidates)
    evaluator = LocalEvaluator()  # no GPU: only the compile and plan verdicts, whose messages quote line numbers
    try:
        verdicts = cpu_verdicts(suite, drift.comments_only, evaluator)
    finally:
        evaluator.close()
    for task_id in replace_solutions(suite, drift.comments_only, verdicts):
        print(f"  {task_id}: comments renewed (the same code; its verdict stands"
              + (", its line numbers given again on the CPU)" if task_id in verdicts else ")"))
    for task_id in drift.code_changed:
        print(f"  {task_id}: its code differs from today's candidate (its reference changed): rebuild on a GPU")
    for task_id in drift.no_candidate:
        print(f"  {task_id}: the builder makes no such candidate today")
    print(f"{len(drift.same)} tasks as built, {len(drift.comments_only)} renewed, {len(drift.code_changed)} with other "
          f"code today, {len(drift.no_candidate)} without a candidate")
    return 0 if not drift.code_changed and not drift.no_candidate else 4


if __name__ == "__main__":
    sys.exit(main())
