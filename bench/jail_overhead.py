"""How much the compiler jail (tools/jail.py) adds to a normal compile: nvcc + ptxas of the project's
CUDA solutions, run bare (as before the jail) and in each jail mode this machine has, interleaved.

    python3 bench/jail_overhead.py [--repeats 5]    -> a Markdown table on stdout
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import time
from pathlib import Path

from ptxbench.tools import jail
from ptxbench.tools.compile import include_dir, nvcc_flags, ptxas_flags
from ptxbench.tools.toolchain import find_toolchain, run_tool

SOLUTIONS = Path(__file__).resolve().parents[1] / "workloads" / "solutions"


def _compile(tc, source: Path, mode: str | None) -> float:
    with jail.Workspace(prefix="ptxbench-bench-") as wd:
        shutil.copy(source, wd / "solution.cu")
        steps = [[tc.nvcc.path, *nvcc_flags("sm_90a"), "solution.cu", "-o", "s.ptx"],
                 [tc.ptxas.path, *ptxas_flags("sm_90a"), "s.ptx", "-o", "s.cubin"]]
        start = time.perf_counter()
        for argv in steps:
            if mode is None:
                res = run_tool(argv, 120, cwd=wd)
            else:
                os.environ[jail.ENV_MODE] = mode
                res = jail.run_in_jail(tc, argv, wd, 120, extra_roots=(include_dir(),))
            assert res.returncode == 0, res.output[-500:]
        return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    tc = find_toolchain("sm_90a")
    modes: list[str | None] = [None, *jail.available_modes()]
    print("| solution | " + " | ".join(m or "bare" for m in modes) + " |")
    print("|---|" + "---|" * len(modes))
    for name in ("gemm_bf16_m8192_n7168_k5120.cu", "attention_fwd_wgmma.cu"):
        times: dict = {m: [] for m in modes}
        _compile(tc, SOLUTIONS / name, None)  # warm the page cache
        for _ in range(args.repeats):
            for m in modes:  # interleaved: drift in machine load hits every mode alike
                times[m].append(_compile(tc, SOLUTIONS / name, m))
        bare = statistics.median(times[None])
        cells = [f"{statistics.median(times[m]):.2f} s" + ("" if m is None else
                 f" ({(statistics.median(times[m]) / bare - 1) * 100:+.1f}%)") for m in modes]
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
