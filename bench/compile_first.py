"""Compile a device call's sources before its timed work: every (workload, source) through the evaluator's
compile-only path at once, nvcc runs in parallel, so the GPU evaluations after it find their cubins in the compile cache
instead of compiling one by one on the device's time (a backward text is about 10 s of nvcc + ptxas)."""
from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor


def compile_first(ev, jobs: list[tuple[str, str]], what: str = "sources") -> list:
    """The EvalResult of each (workload id, source) compiled with no_gpu, in the order given; prints one line."""
    from ptxbench.tools.evaluator import EvalOptions

    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=max(2, min(16, os.cpu_count() or 2))) as pool:
        results = list(pool.map(lambda job: ev.evaluate(job[0], job[1], EvalOptions(no_gpu=True)), jobs))
    ok = sum(r.compile is not None and r.compile.status == "ok" for r in results)
    print(f"precompiled {len(jobs)} {what} in {time.perf_counter() - t0:.1f} s: {ok} compiled", flush=True)
    return results
