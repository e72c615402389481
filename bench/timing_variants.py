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
import multiprocessing as mp
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
    import torch
    from cuda.bindings import driver as cu

    from ptxbench.tools.compile import compile_source
    from ptxbench.tools.gpu.calls import CandidateCalls
    from ptxbench.tools.gpu.entry import referee_main
    from ptxbench.tools.gpu.messages import GpuJob
    from ptxbench.tools.gpu.referee import RefereeClient
    from ptxbench.tools.gpu.runner import evaluate_job
    from ptxbench.tools.gpu.state import WorkerState
    from ptxbench.tools.gpu.worker import read_limits
    from ptxbench.tools.solution.parse import parse_solution, resolve_plan
    from ptxbench.workloads.registry import get_workload

    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    wl = get_workload(GEMM)
    sol = parse_solution((ROOT / "workloads" / "solutions" / f"{GEMM}.cu").read_text(), wl)
    comp = compile_source(sol.source, sol.language, "sm_90a", wl)
    torch.cuda.set_device(0)
    torch.zeros(1, device="cuda")
    cu.cuInit(0)
    limits = read_limits(0)
    plan = resolve_plan(sol.plan, wl, limits.sm_count, "sm_90a")
    ctx = mp.get_context("spawn")
    mine, theirs = ctx.Pipe()
    proc = ctx.Process(target=referee_main, args=(theirs, 0), daemon=True)
    proc.start()
    state = WorkerState(0, limits)
    state.referee = RefereeClient(mine)
    job = GpuJob(workload=GEMM, cubin=Path(comp.cubin_path).read_bytes(), plan=plan.model_dump(), timeout_s=60,
                 prepare_timeout_s=300)
    table, shipped = variants()
    rows = []
    for rep in range(args.reps):
        for name, patch in table.items():
            for attr, fn in shipped.items():
                setattr(CandidateCalls, attr, patch.get(attr, fn))
            out, _ = evaluate_job(state, job, lambda *_a: None)
            t = out.timing
            rows.append({"variant": name, "rep": rep, "status": out.status, "speedup": t.speedup if t else None,
                         "ci": t.speedup_ci if t else None, "cand_ms": t.candidate.median_ms if t else None,
                         "lib_ms": t.baselines["cublas"].median_ms if t else None})
            print(json.dumps(rows[-1]), flush=True)
    mine.send({"op": "exit"})
    proc.join(timeout=30)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    print("| variant | speedups | median | candidate ms | cuBLAS ms |")
    print("|---|---|---|---|---|")
    for name in table:
        rs = [r for r in rows if r["variant"] == name and r["speedup"]]
        each = ", ".join(f"{r['speedup']:.4f}" for r in rs)
        print(f"| {name} | {each} | {statistics.median(r['speedup'] for r in rs):.4f} "
              f"| {statistics.median(r['cand_ms'] for r in rs):.4f} | {statistics.median(r['lib_ms'] for r in rs):.4f} |")


if __name__ == "__main__":
    main()
