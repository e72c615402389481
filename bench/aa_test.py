"""A/A test: the primary baseline timed as if it were the candidate, against itself, in one worker.

Run on a GPU machine:  python3 bench/aa_test.py [--workload W] [--rounds 5] [--json OUT.json]
Pass: every round's speedup within 1% of 1.0 and its bootstrap 95% interval containing 1.0.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from ptxbench.tools.gpu.pool import GpuPool, PoolConfig


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", default="gemm_bf16_m8192_n7168_k5120")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    with GpuPool(PoolConfig(spares=0)) as pool:
        rounds = []
        for i in range(args.rounds):
            t = pool.submit({"type": "aa", "workload": args.workload, "timeout_s": 120}).timing
            lo, hi = t.speedup_ci
            rounds.append({"round": i, "speedup": t.speedup, "ci": [lo, hi], "a_ms": t.candidate.median_ms,
                           "b_ms": t.baselines[t.primary_baseline].median_ms, "n": t.candidate.n,
                           "within_1pct": abs(t.speedup - 1) <= 0.01, "ci_contains_1": lo <= 1.0 <= hi})
    if args.json:
        Path(args.json).write_text(json.dumps({"workload": args.workload, "rounds": rounds}, indent=1))
    print(f"A/A on {args.workload} (baseline vs itself, interleaved, cold L2, 10 warm-up, 50 x 3 iterations)")
    print("| round | A median ms | B median ms | speedup | 95% CI | within 1% | CI contains 1 |")
    print("|---|---|---|---|---|---|---|")
    for r in rounds:
        print(f"| {r['round']} | {r['a_ms']:.4f} | {r['b_ms']:.4f} | {r['speedup']:.4f} | "
              f"[{r['ci'][0]:.4f}, {r['ci'][1]:.4f}] | {r['within_1pct']} | {r['ci_contains_1']} |")


if __name__ == "__main__":
    main()
