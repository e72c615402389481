"""Which part of the per-call preparation slows a short library call: the reference of a workload evaluated with
parts of CandidateCalls.restore switched off in turn (bench/ablate/sitecustomize.py), each variant in its own
process and pool, with an A/A test of the library in the same worker as a control.

Run on a GPU machine (repository root, after `source bench/gpu_env.sh`):

    python3 bench/restore_ablation.py [--workload gemm_bf16_m64_n7168_k5120] [--evals 3] [--variants A,B] [--json F]
        [--md F]

Variants (PTXBENCH_ABLATE): full (as shipped), no_clear (scrub and unowned clear off), no_scrub, no_unowned,
no_lib_restore (the library's inputs not copied back before its calls), then full again (drift across the run);
--variants picks and orders them, from those and plain_heads (the attention forward's inputs without their offset and
spiked heads: the forward's reference timed on the inputs before and after they changed, on one machine), with a suffix
after a dot for a repeat (full.2).
Per variant: each evaluation's speedup and 95% interval, the kernel's and the library's medians, and the A/A
test's library medians (its preparation copies inputs only).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
VARIANTS = {"full": "", "no_clear": "scrub,unowned", "no_scrub": "scrub", "no_unowned": "unowned",
            "no_lib_restore": "lib_restore", "full_again": ""}
# not parts of the preparation: the attention forward's inputs without their offset heads (workloads/inputs.py), to time
# a forward reference on the inputs before and after they changed, on one machine
OPTIONAL = {"plain_heads": "plain_heads"}


def one(workload: str, evals: int) -> dict:
    from ptxbench.agent.models.builtin import reference_source
    from ptxbench.tools.evaluate import LocalEvaluator
    from ptxbench.tools.evaluator import EvalOptions

    ev = LocalEvaluator()
    source = reference_source(workload)
    rows = []
    try:
        for _ in range(evals):
            t0 = time.perf_counter()
            r = ev.evaluate(workload, source, EvalOptions(profile_on_pass="none"))
            t = r.timing
            rows.append({"status": r.status, "wall_s": round(time.perf_counter() - t0, 2),
                         "speedup": t.speedup if t else None, "ci": list(t.speedup_ci) if t else None,
                         "kernel_ms": t.candidate.median_ms if t else None,
                         "library_ms": t.baselines[t.primary_baseline].median_ms if t else None,
                         "timing_s": r.seconds.get("gpu.timing")})
        aa = ev.pool.submit({"type": "aa", "workload": workload, "timeout_s": 120}).timing
        control = {"a_ms": aa.candidate.median_ms, "b_ms": aa.baselines[aa.primary_baseline].median_ms,
                   "speedup": aa.speedup, "ci": list(aa.speedup_ci)}
    finally:
        ev.close()
    return {"rows": rows, "aa": control}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workload", default="gemm_bf16_m64_n7168_k5120")
    ap.add_argument("--evals", type=int, default=3)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--one", action="store_true", help="(internal) one variant, in this process: JSON on stdout")
    ap.add_argument("--json", default="")
    ap.add_argument("--md", default="")
    args = ap.parse_args()
    if args.one:
        print("RESULT " + json.dumps(one(args.workload, args.evals)))
        return
    out = {"workload": args.workload, "variants": {}}
    known = {**VARIANTS, **OPTIONAL}
    for name in args.variants.split(","):
        parts = known[name.split(".")[0]]
        env = {**os.environ, "PTXBENCH_ABLATE": parts,
               "PYTHONPATH": f"{HERE / 'ablate'}:{os.environ.get('PYTHONPATH', '')}"}
        p = subprocess.run([sys.executable, __file__, "--one", "--workload", args.workload, "--evals", str(args.evals)],
                           env=env, capture_output=True, text=True, timeout=600)
        line = next((x for x in p.stdout.splitlines() if x.startswith("RESULT ")), None)
        out["variants"][name] = json.loads(line[7:]) if line else {"error": (p.stderr or p.stdout)[-2000:]}
        print(name, "done", flush=True)
    lines = [f"{args.workload}: the reference against the library, parts of the per-call preparation switched off", "",
             "| variant | off | speedups (95% CI) | kernel ms (median of evals) | library ms | A/A library ms |",
             "|---|---|---|---|---|---|"]
    for name, v in out["variants"].items():
        if "error" in v:
            lines.append(f"| {name} | {known[name.split('.')[0]] or '-'} | error: {v['error'][-200:]!r} | | | |")
            continue
        ok = [r for r in v["rows"] if r["speedup"]]
        sp = ", ".join(f"{r['speedup']:.4f} [{r['ci'][0]:.3f}, {r['ci'][1]:.3f}]" for r in ok)
        med = lambda k: f"{statistics.median(r[k] for r in ok):.4f}" if ok else "-"  # noqa: E731
        lines.append(f"| {name} | {known[name.split('.')[0]] or '-'} | {sp} | {med('kernel_ms')} | {med('library_ms')} | "
                     f"{v['aa']['a_ms']:.4f} / {v['aa']['b_ms']:.4f} |")
    text = "\n".join(lines)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    if args.md:
        Path(args.md).write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
