"""Which part of the call protocol moves an honest kernel's speedup: the reference GEMM evaluated in-process
(worker + referee) under variants of the preparation, several times each. Run on a GPU machine:

  python3 bench/timing_variants.py [--reps 2] [--json OUT.json]

Variants: `protocol` (as shipped: every set of both sides restored, random set per call); `fixed_set` (no
rotation: set 0 and library instance 0 every call); `used_only` (rotation, but only the called side's set
restored); `no_restore` (rotation, nothing restored, outputs not re-poisoned: honest kernels only).
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GEMM = "gemm_bf16_m8192_n7168_k5120"


def variants():
    from ptxbench.tools.gpu.calls import CandidateCalls

    shipped = {n: getattr(CandidateCalls, n) for n in ("prepare", "library_prepare", "restore")}

    def fixed_prepare(self):
        self.current = 0
        self.restore()

    def fixed_library_prepare(self):
        self.library_current = 0
        self.restore()

    def used_restore(self):
        s = self.sets[self.current]
        s.bufs.load_inputs(s.pristine)
        s.bufs.reset()
        if self.library:
            e = self.library[self.library_current]
            for n, t in e.inputs.items():
                t.copy_(e.pristine[n])
        self.cand.restore_globals()

    return {
        "protocol": {},
        "fixed_set": {"prepare": fixed_prepare, "library_prepare": fixed_library_prepare},
        "used_only": {"restore": used_restore},
        "no_restore": {"restore": lambda self: None},
    }, shipped


def main() -> None:
    from ptxbench.tools.gpu.calls import CandidateCalls
    from ptxbench.tools.gpu.inprocess import in_process_worker, job_for
    from ptxbench.tools.gpu.runner import evaluate_job

    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    source = (ROOT / "workloads" / "solutions" / f"{GEMM}.cu").read_text()
    with in_process_worker() as state:
        job = job_for(source, GEMM, state, timeout_s=60, prepare_timeout_s=300)
        rows = run_variants(state, job, args.reps, CandidateCalls, evaluate_job)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    table, _ = variants()
    print("| variant | speedups | median | candidate ms | cuBLAS ms |")
    print("|---|---|---|---|---|")
    for name in table:
        rs = [r for r in rows if r["variant"] == name and r["speedup"]]
        each = ", ".join(f"{r['speedup']:.4f}" for r in rs)
        print(f"| {name} | {each} | {statistics.median(r['speedup'] for r in rs):.4f} "
              f"| {statistics.median(r['cand_ms'] for r in rs):.4f} | {statistics.median(r['lib_ms'] for r in rs):.4f} |")


def run_variants(state, job, reps: int, calls_class, evaluate_job) -> list[dict]:
    """Each variant `reps` times, the protocol patched on the class and put back after."""
    table, shipped = variants()
    rows = []
    try:
        for rep in range(reps):
            for name, patch in table.items():
                for attr, fn in shipped.items():
                    setattr(calls_class, attr, patch.get(attr, fn))
                out, _ = evaluate_job(state, job, lambda *_a: None)
                t = out.timing
                rows.append({"variant": name, "rep": rep, "status": out.status, "speedup": t.speedup if t else None,
                             "ci": t.speedup_ci if t else None, "cand_ms": t.candidate.median_ms if t else None,
                             "lib_ms": t.baselines["cublas"].median_ms if t else None})
                print(json.dumps(rows[-1]), flush=True)
    finally:
        for attr, fn in shipped.items():
            setattr(calls_class, attr, fn)
    return rows


if __name__ == "__main__":
    main()
