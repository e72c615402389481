"""Seconds the harness's text checks before ptxas (and the plan's parse) take on declarations built to make a regular
expression backtrack: each shape here made one of them exponential or quadratic until 4c44ad3f / 7a8701c6
(bench/results/hostile_text_cost.md). Pure CPU.

    python3 bench/hostile_decl_cost.py [--runs 3]
"""
from __future__ import annotations

import argparse
import statistics
import time

HEAD = ".version 8.5\n.target sm_90a\n.address_size 64\n"
KERNEL = ".visible .entry k(.param .u64 out)\n{\n.reg .b32 %r<4>;\nret;\n}\n"
SHAPES = {
    "`.global .ptr` x40": ".global .ptr" + ".ptr" * 40 + " 1;\n",
    "`x[  ]` x40": ".global .u32 x" + "[  ]" * 40 + " y;\n",
    "`.param ` x50,000 (350 KB)": " " + ".param " * 50_000 + ";\n",
    "a `.file` name of 300,000 characters": '.file 1 "' + "a" * 300_000 + '"\n',
    "`.extern .func (` x25,000 (375 KB)": ".extern .func (" * 25_000 + "\n",
    "`.reg ` x60,000 on a line, a register named like a parameter":
        ".visible .entry j(.param .u64 out)\n{\n" + ".reg " * 60_000 + ";\n.reg .b64 out;\nret;\n}\n",
}


def checks(text: str) -> list:
    """compile.py's checks before ptxas, on the text as it reads them."""
    from ptxbench.tools.compile_log import system_calls
    from ptxbench.tools.module_data import ModuleData
    from ptxbench.tools.param_reach import param_writes
    from ptxbench.tools.sass import strip_ptx_comments

    code = strip_ptx_comments(text, blank_strings=True)
    data = ModuleData(code)
    return (system_calls(code, "ptx") + data.unreadable("ptx") + data.register_clashes("ptx") + data.reach("ptx")
            + param_writes(data, "ptx"))


def timed(fn, runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    from ptxbench.tools.compile import _declared_line
    from ptxbench.tools.solution.parse import parse_solution

    rows = {name: timed(lambda s=s: checks(HEAD + s + KERNEL), args.runs) for name, s in SHAPES.items()}
    strings = "".join(f'.file {i} "' + ".func " * 1500 + ('";' if i == 8 else '"') + "\n" for i in range(1, 9))
    prototype = strings + ".func (.param .b32 r) vprintf (.param .b64 a, .param .b64 b);\n"
    rows["`_declared_line`, 72 KB of `.func` strings"] = timed(lambda: _declared_line(prototype, "vprintf"), args.runs)
    launches = "".join('[[launch]]\nkernel = "k"\ngrid = [1]\nblock = [32]\nargs = []\n' for _ in range(64))
    plan = f'/* ptxbench\nlanguage = "cuda"\n{launches}*/\n__device__ void f() {{\nint k = 0;\n' + "{k}" * 127_000 + "\n}\n"
    rows["64 launches of an undefined kernel, 385 KB"] = timed(lambda: parse_solution(plan), args.runs)
    print("| shape | median s | range |\n| --- | --- | --- |")
    for name, ts in rows.items():
        print(f"| {name} | {statistics.median(ts):.3f} | {min(ts):.3f}-{max(ts):.3f} |")


if __name__ == "__main__":
    main()
