"""Evaluate chosen bug classes of the injection recipe on the GPU: does the H200 reject each broken kernel, and how?
  source bench/gpu_env.sh && python3 bench/check_mutations.py [--backward] [--classes a,b] [--workloads w1,w2] [--json F]
Default: the knowledge pack's pipeline classes (agent/export/mutations.py PIPELINE_CLASSES) on the GEMM and the
wgmma attention forwards (D = 128 and 64). --backward: the backward's classes (BACKWARD_CLASSES) on the two
D = 64 smoke backwards (seconds each) and the D = 128 main ones (about 8 s an evaluation), each class where it
applies. Each unbroken reference is evaluated first (a failing one skips its workload); each mutant untimed, with
a short watchdog (a hang costs --timeout). Prints one row per mutant: the status, whether it is one of the class's
expected statuses, and whether the GPU rejected it. Exit 0 when every mutant was rejected, 1 when some were
accepted (listed), 2 when a reference failed.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

from ptxbench.agent.export.mutations import BACKWARD_CLASSES, BY_NAME, PIPELINE_CLASSES
from ptxbench.agent.models.builtin import reference_source
from ptxbench.agent.repairs.build import precompile
from ptxbench.agent.repairs.candidates import FAILED, from_mutations
from ptxbench.tools.evaluate import LocalEvaluator
from ptxbench.tools.evaluator import EvalOptions
from ptxbench.tools.gpu.pool import GpuPool, PoolConfig

WORKLOADS = ("gemm_bf16_m8192_n7168_k5120", "mha_fwd_d128", "mha_fwd_d64")
# smallest first: the smoke shapes cost seconds; every backward class applies to at least one D = 64 workload,
# except bwd_ds_single_buffer (the D = 64 consumers each read only their own rows of dS^T)
BACKWARD_WORKLOADS = ("smoke_mha_bwd_d64", "smoke_mha_bwd_d64_causal", "mha_bwd_d128", "mha_bwd_d128_causal")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backward", action="store_true", help="default to the backward's classes and workloads")
    ap.add_argument("--classes", default="", help="comma-separated bug classes")
    ap.add_argument("--workloads", default="")
    ap.add_argument("--timeout", type=float, default=5.0, help="watchdog per mutant (a hang costs this)")
    ap.add_argument("--spares", type=int, default=4, help="hot spare workers (a fault replaces one)")
    ap.add_argument("--json", default="", help="write the rows here")
    args = ap.parse_args()
    classes = args.classes or ",".join(BACKWARD_CLASSES if args.backward else PIPELINE_CLASSES)
    mutations = [BY_NAME[n.strip()] for n in classes.split(",") if n.strip()]
    workloads = [w.strip() for w in (args.workloads or ",".join(BACKWARD_WORKLOADS if args.backward else WORKLOADS)).split(",")
                 if w.strip()]
    t0 = time.monotonic()
    candidates = from_mutations(workloads, mutations)
    print(f"{len(candidates)} mutants of {len(mutations)} classes on {len(workloads)} workloads; compiling ...", flush=True)
    precompile(candidates, "sm_90a")
    evaluator = LocalEvaluator(GpuPool(PoolConfig(spares=args.spares)).start())
    rows, broken_refs = [], []
    try:
        for wid in workloads:
            ref = evaluator.evaluate(wid, reference_source(wid), EvalOptions(time=False, profile_on_pass=False, timeout_s=30))
            print(f"reference {wid}: {ref.status}", flush=True)
            if ref.status != "PASSED":
                broken_refs.append(wid)
        options = EvalOptions(time=False, profile_on_pass=False, timeout_s=args.timeout)
        for c in candidates:
            if c.workload in broken_refs:
                continue
            r = evaluator.evaluate(c.workload, c.source, options)
            rows.append({"workload": c.workload, "class": c.bug_class, "status": r.status,
                         "expected": list(BY_NAME[c.bug_class].expected), "rejected": r.status not in FAILED,
                         "message": (r.message or "").splitlines()[0][:160] if r.message else ""})
            print(f"  {c.id}: {r.status}", flush=True)
    finally:
        evaluator.close()
    print("\n| workload | bug class | status | expected | rejected |\n| --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['workload']} | {r['class']} | {r['status']} | {'yes' if r['status'] in r['expected'] else 'no'} | "
              f"{'yes' if r['rejected'] else 'NO'} |")
    accepted = [f"{r['workload']}__{r['class']}" for r in rows if not r["rejected"]]
    print(f"\n{len(rows)} mutants, {len(rows) - len(accepted)} rejected; accepted: {', '.join(accepted) or 'none'}; "
          f"{time.monotonic() - t0:.0f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 2 if broken_refs else (1 if accepted else 0)


if __name__ == "__main__":
    sys.exit(main())
