"""Does the library's time move between evaluations of one workload, and with what?

The attention sweeps of 2026-12-01 (bench/results/attention_template.md) saw cuDNN's median move 4.5-8% between
points of one workload, in two clusters (d128: 2.41 and 2.49-2.52 ms), while each point's own interval was tight and
a repeated candidate moved at most 1.5%. This script evaluates the same solution (the reference) N times through the
real evaluator, back to back, and records per evaluation the candidate's and the library's medians, the speedup and
its interval, and the SM clock, power and temperature nvidia-smi read meanwhile. With --fresh the evaluator (its GPU
worker, the library's cached inputs, their allocations) is started anew for every evaluation.

Written before it ran, what each cause would show: clocks (power or thermal) -> the library's time tracks the mean
SM clock, and the candidate's with it; the library's inputs' placement -> two clusters that change only with
--fresh; the library itself (engine choice per call) -> clusters without a clock change, with or without --fresh.

    source bench/gpu_env.sh && python3 bench/library_drift.py --workload mha_fwd_d128 --n 8 [--fresh] --json F
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_sampler import GpuSampler  # noqa: E402

FIELDS = ("clocks.sm", "power.draw", "temperature.gpu")


def spread(values: list[float]) -> float:
    """(max - min) / min in percent."""
    return round(100 * (max(values) / min(values) - 1), 2) if values else 0.0


def summarize(rows: list[dict]) -> dict:
    """Spreads of the library's and the candidate's medians, and how the library's follows the SM clock."""
    lib = [r["library_ms"] for r in rows if r.get("library_ms")]
    cand = [r["kernel_ms"] for r in rows if r.get("kernel_ms")]
    clocks = [r["gpu"].get("clocks.sm") for r in rows if r.get("library_ms")]
    out = {"evaluations": len(rows), "library_spread_pct": spread(lib), "candidate_spread_pct": spread(cand),
           "speedup_spread_pct": spread([r["speedup"] for r in rows if r.get("speedup")])}
    if len(lib) >= 3 and all(c is not None for c in clocks) and len(set(clocks)) > 1:
        out["library_vs_clock_correlation"] = round(statistics.correlation(lib, clocks), 3)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default="mha_fwd_d128")
    ap.add_argument("--n", type=int, default=8, help="evaluations")
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--fresh", action="store_true", help="a new evaluator (GPU worker) for every evaluation")
    ap.add_argument("--json", required=True)
    args = ap.parse_args()

    from ptxbench.agent.models.builtin import reference_source
    from ptxbench.tools.evaluate import LocalEvaluator
    from ptxbench.tools.evaluator import EvalOptions

    source = reference_source(args.workload)
    options = EvalOptions(trials=args.trials, profile_on_pass=False, timeout_s=120)
    rows: list[dict] = []
    ev = None
    with GpuSampler(period_ms=100, extra=FIELDS) as smi:
        for i in range(args.n):
            if ev is None or args.fresh:
                if ev is not None:
                    ev.close()
                ev = LocalEvaluator()
            t0 = time.time()
            r = ev.evaluate(args.workload, source, options)
            t1 = time.time()
            t = r.timing
            row = {"i": i, "status": r.status, "seconds": round(t1 - t0, 1), "gpu": smi.window(t0, t1),
                   "kernel_ms": t.candidate.median_ms if t else None,
                   "library_ms": t.baselines[t.primary_baseline].median_ms if t else None,
                   "speedup": t.speedup if t else None, "ci": list(t.speedup_ci) if t and t.speedup_ci else None}
            if r.status != "PASSED":  # why, in the row: an infrastructure failure must not read as a measurement
                row["message"] = (r.message or "")[:400]
            rows.append(row)
            print(json.dumps(row), flush=True)
            Path(args.json).write_text(json.dumps({"args": vars(args), "rows": rows}, indent=1))
    if ev is not None:
        ev.close()
    summary = summarize(rows)
    Path(args.json).write_text(json.dumps({"args": vars(args), "rows": rows, "summary": summary,
                                           "sampler": smi.error or None}, indent=1))
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
