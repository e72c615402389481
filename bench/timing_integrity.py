"""Timing integrity on a GPU: cheats that tell timed calls from checked ones gain nothing, honest kernels keep
their speed, and what the protocol costs. Run on a GPU machine (repository root, after bench/gpu_env.sh):

  python3 bench/timing_integrity.py [--json OUT.json] [--skip-attention]

1. The issue's exploit at full size (tests/data/cheats/gemm_poison_keyed_16x16.cu): PASSED at 5.3x before;
   now it must be timed at its honest speed (far below 1x) or fail.
2. Second line of defence: the cheat corpus's launch-count cheat with the module-global reset switched off
   (in-process worker + referee): its skipped timed calls must fail on their verified outputs.
3. Reference kernels (GEMM, attention forward d128): PASSED, speedup and interval, seconds per phase.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from ptxbench.tools.evaluate import LocalEvaluator
from ptxbench.tools.evaluator import EvalOptions
from ptxbench.tools.gpu.pool import GpuPool, PoolConfig
from ptxbench.workloads.solutions.faults import load_corpus

ROOT = Path(__file__).resolve().parents[1]
GEMM = "gemm_bf16_m8192_n7168_k5120"


def row(name: str, r, wall: float) -> dict:
    t = r.timing
    return {"name": name, "status": r.status, "speedup": t.speedup if t else None,
            "ci": list(t.speedup_ci) if t and t.speedup_ci else None, "flags": t.flags if t else [],
            "verified_calls": t.verified_calls if t else 0, "input_sets": t.input_sets if t else 0,
            "cand_ms": t.candidate.median_ms if t else None, "input_seed": r.input_seed, "wall_s": wall,
            "seconds": r.seconds, "message": r.message[:400], "runtime_error": r.runtime_error[:200]}


def globals_reset_off() -> dict:
    """The count-keyed cheat with ModuleState.restore disabled: only the per-call output check stands."""
    from ptxbench.tools.gpu.inprocess import in_process_worker, job_for
    from ptxbench.tools.gpu.module_state import ModuleState
    from ptxbench.tools.gpu.runner import evaluate_job

    workload, corpus = load_corpus()
    with in_process_worker() as state:
        job = job_for(corpus["cheat_count_keyed"]["source"], workload, state, timeout_s=30, prepare_timeout_s=300)
        saved = ModuleState.restore
        ModuleState.restore = lambda self, stream: None
        try:
            out, _ = evaluate_job(state, job, lambda *_a: None)
        finally:
            ModuleState.restore = saved
    return {"name": "cheat_count_keyed, global reset off", "status": out.status, "message": out.message[:400]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default="")
    ap.add_argument("--skip-attention", action="store_true")
    args = ap.parse_args()
    rows = [globals_reset_off()]
    pool = GpuPool(PoolConfig(spares=0)).start()
    ev = LocalEvaluator(pool)
    plain = EvalOptions(profile_on_pass=False)
    cases = [("poison-keyed 16x16 at full size", GEMM, (ROOT / "tests/data/cheats/gemm_poison_keyed_16x16.cu"))]
    cases += [("reference GEMM", GEMM, ROOT / f"workloads/solutions/{GEMM}.cu")] * 3
    if not args.skip_attention:
        from ptxbench.agent.models.builtin import reference_source

        cases += [("wgmma attention forward", "mha_fwd_d128", reference_source("mha_fwd_d128"))] * 2
    for name, workload, src in cases:
        text = src.read_text() if isinstance(src, Path) else src
        t0 = time.perf_counter()
        r = ev.evaluate(workload, text, plain)
        rows.append({"workload": workload, **row(name, r, time.perf_counter() - t0)})
        print(json.dumps(rows[-1])[:600], flush=True)
    ev.close()
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1, default=str))
    print("| case | status | speedup [95% CI] | verified timed calls | wall s |")
    print("|---|---|---|---|---|")
    for r in rows:
        ci = f" [{r['ci'][0]:.3f}, {r['ci'][1]:.3f}]" if r.get("ci") else ""
        sp = f"{r['speedup']:.4f}{ci}" if r.get("speedup") else "-"
        print(f"| {r['name']} | {r['status']} | {sp} | {r.get('verified_calls', '-')} | {r.get('wall_s', 0):.1f} |")


if __name__ == "__main__":
    main()
