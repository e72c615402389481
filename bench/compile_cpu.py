"""CPU seconds the compiler spends on the reference solutions, alone and with every core compiling, against the
compiler jail's per-process CPU limit (tools/jail.py Limits.cpu_s).

The jail stops nvcc and ptxas with `ulimit -t`, which counts a process's CPU time. On a host with simultaneous
multithreading a process that shares its core with another runs slower and uses more CPU time for the same work, so
a compile near the limit can pass alone and fail while other compiles run (a bench, or a device call's parallel
precompile). This measures the margin: each source's nvcc -ptx (cudafe++ and cicc, the children it waits for) and
ptxas, run as the harness runs them but outside the jail and its limits, first one at a time, then `--load` copies at
once (default: one per CPU).

    python3 bench/compile_cpu.py --json OUT.json            # the references of the main workloads
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

WORKLOADS = ("mha_bwd_d128", "mha_bwd_d128_causal", "mha_fwd_d128", "gemm_bf16_m8192_n7168_k5120")


def reference_sources(workloads) -> dict[str, str]:
    from ptxbench.agent.models.builtin import reference_source

    return {w: reference_source(w) for w in workloads}


def _cpu_of(argv: list[str], cwd: str) -> tuple[float, int]:
    """(user + system CPU seconds of the process and the children it waited for, exit status)."""
    proc = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return usage.ru_utime + usage.ru_stime, proc.returncode


def compile_cpu(source: str) -> dict:
    """nvcc and ptxas CPU seconds for one `cuda` source, with the harness's flags."""
    from ptxbench.tools.compile import nvcc_flags, ptxas_flags
    from ptxbench.tools.toolchain import find_toolchain

    tc = find_toolchain()
    with tempfile.TemporaryDirectory(prefix="ptxbench-compile-cpu-") as d:
        Path(d, "solution.cu").write_text(source)
        t0 = time.perf_counter()
        nvcc_s, rc1 = _cpu_of([tc.nvcc.path, *nvcc_flags("sm_90a"), "solution.cu", "-o", "solution.ptx"], d)
        ptxas_s, rc2 = _cpu_of([tc.ptxas.path, *ptxas_flags("sm_90a"), "solution.ptx", "-o", "kernel.cubin"], d) \
            if rc1 == 0 else (0.0, -1)
        return {"nvcc_s": round(nvcc_s, 2), "ptxas_s": round(ptxas_s, 2), "wall_s": round(time.perf_counter() - t0, 2),
                "ok": rc1 == 0 and rc2 == 0}


def measure(sources: dict[str, str], load: int, repeats: int) -> dict:
    alone = {w: [compile_cpu(src) for _ in range(repeats)] for w, src in sources.items()}
    loaded = {}
    for w, src in sources.items():  # `load` copies of one source at once: every core busy with the same work
        with ThreadPoolExecutor(max_workers=load) as pool:
            loaded[w] = list(pool.map(lambda _: compile_cpu(src), range(load)))
    return {"alone": alone, "loaded": loaded}


def table(result: dict, limit_s: int) -> str:
    rows = [f"| source | tool | alone, median (max) s | {result['load']} at once, median (max) s | of the {limit_s} s limit |",
            "|---|---|---|---|---|"]
    for w in result["alone"]:
        for tool in ("nvcc_s", "ptxas_s"):
            a = [r[tool] for r in result["alone"][w]]
            b = [r[tool] for r in result["loaded"][w]]
            rows.append(f"| {w} | {tool[:-2]} | {statistics.median(a):.2f} ({max(a):.2f}) | "
                        f"{statistics.median(b):.2f} ({max(b):.2f}) | {max(b) / limit_s:.0%} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    from ptxbench.tools.jail import Limits

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default=",".join(WORKLOADS), help="comma list; each one's builtin/reference text")
    ap.add_argument("--load", type=int, default=os.cpu_count() or 2, help="compiles at once in the loaded pass")
    ap.add_argument("--repeats", type=int, default=3, help="compiles of each source in the pass alone")
    ap.add_argument("--json", help="write every figure here")
    a = ap.parse_args(argv)
    sources = reference_sources([w for w in a.workloads.split(",") if w])
    result = {"cpus": os.cpu_count(), "load": a.load, "limit_s": Limits().cpu_s,
              "host": os.uname().nodename, **measure(sources, a.load, a.repeats)}
    if a.json:
        Path(a.json).write_text(json.dumps(result, indent=1))
    print(table(result, Limits().cpu_s))
    return 0 if all(r["ok"] for rs in (*result["alone"].values(), *result["loaded"].values()) for r in rs) else 1


if __name__ == "__main__":
    sys.exit(main())
