"""Seconds the harness's own process spends on a `ptx` file built to make its checks slow, before any compiler runs.

    python3 bench/hostile_text_cost.py [CASE ...] [--json F]

Each case fills a module up to the size a solution may have (MAX_SOLUTION_CHARS) with one shape, and times the text
checks compile.py runs on every `ptx` file before ptxas: the source policy, the module read (statements,
declarations, instructions), the static checks, the device system calls, the reach of module data and of parameters
(tools/ptx_flow.py's flow), and the line-info annotation. A check that is quadratic or worse in some shape shows here
as seconds; bench/results/hostile_text_cost.md has the table before and after the flow's work budget. CPU only.
"""
from __future__ import annotations

import argparse
import json
import time

from ptxbench.tools.compile_log import static_ptx_checks, system_calls
from ptxbench.tools.module_data import ModuleData
from ptxbench.tools.param_reach import param_writes
from ptxbench.tools.profile.lineinfo import annotate_ptx
from ptxbench.tools.sass import strip_ptx_comments
from ptxbench.tools.solution.cuda_policy import check_ptx_source
from ptxbench.tools.solution.parse import MAX_SOLUTION_CHARS

HEAD = ".version 8.5\n.target sm_90a\n.address_size 64\n"
GLOBAL = ".global .align 8 .b64 g[4];\n"


def _entry(body: str, regs: int) -> str:
    return (f".visible .entry k(.param .u64 p0)\n{{\n.reg .b64 %rd<{regs}>;\n.reg .b32 %r<{regs}>;\n"
            f".reg .pred %p<4>;\n{body}ret;\n}}\n")


def _fill(make, room: int) -> tuple[str, int]:
    lines, size = [], 0
    while size + len(line := make(len(lines))) + 1 <= room:
        lines.append(line)
        size += len(line) + 1
    return "\n".join(lines) + "\n", len(lines)


ROOM = MAX_SOLUTION_CHARS - 2_000


def back_branches() -> str:
    """Each register computed from the last, each line a guarded branch back: thousands of addresses held at once."""
    body, n = _fill(lambda i: f"L{i}: add.u64 %rd{i + 1}, %rd{i}, 0;\n@%p1 bra L{max(0, i - 1)};", ROOM)
    return HEAD + GLOBAL + _entry("mov.u64 %rd0, g;\n" + body, n + 8)


def settling_backwards() -> str:
    """The address enters at the end and moves one label back per pass."""
    body, n = _fill(lambda i: f"L{i}: add.u64 %rd{i}, %rd{i + 1}, 0;\n@%p1 bra L{i + 1};", ROOM)
    return HEAD + GLOBAL + _entry(f"bra L0;\n{body}L{n}: mov.u64 %rd{n}, g;\n@%p1 bra L0;\n", n + 8)


def table_jumps() -> str:
    """Each line a `brx.idx`: a jump to every label of the function."""
    body, n = _fill(lambda i: f"L{i}: add.u64 %rd{i + 1}, %rd{i}, 1;\nbrx.idx %r1, T;", ROOM)
    return HEAD + GLOBAL + _entry("mov.u64 %rd0, g;\nT: .branchtargets L0;\n" + body, n + 8)


def parameter_back_branches() -> str:
    """back_branches from a parameter's address, handed down a chain of nine functions (param_reach's rounds)."""
    funcs = "".join(f".func f{i}(.param .b64 a{i})\n{{\n.reg .b64 %rd<3>;\nld.param.u64 %rd1, [a{i}];\n"
                    + (f"{{ .param .b64 q; st.param.b64 [q], %rd1; call f{i - 1}, (q); }}\n" if i else "") + "ret;\n}\n"
                    for i in range(9))
    body, n = _fill(lambda i: f"L{i}: add.u64 %rd{i + 1}, %rd{i}, 0;\n@%p1 bra L{max(0, i - 1)};", ROOM - len(funcs))
    call = "cvta.param.u64 %rd0, 0;\n{ .param .b64 q; st.param.b64 [q], %rd0; call f8, (q); }\n"
    return HEAD + funcs + _entry(call + body, n + 8)


def many_globals() -> str:
    """Half the file declarations, half `mov`s of them: the symbol pattern's alternation."""
    decls, n = _fill(lambda i: f".global .b32 v{i};", ROOM // 2)
    body, m = _fill(lambda i: f"mov.u64 %rd{i}, v{i % n};", ROOM // 2)
    return HEAD + decls + _entry(body, m + 8)


def blank_lines() -> str:
    """The kernel after hundreds of thousands of empty lines."""
    return HEAD + "\n" * (ROOM - 200) + ".visible .entry k()\n{\nret;\n}\n"


def long_literal() -> str:
    """One offset of hundreds of thousands of digits."""
    return HEAD + ".global .align 8 .b8 f[16];\n" + _entry(f"st.global.u32 [f+{'7' * (ROOM - 400)}], %r1;\n", 8)


CASES = {f.__name__: f for f in (back_branches, settling_backwards, table_jumps, parameter_back_branches, many_globals,
                                 blank_lines, long_literal)}


def measure(text: str) -> dict:
    seconds: dict[str, float] = {}
    out: dict = {"chars": len(text), "seconds": seconds}

    def timed(name, fn):
        start = time.perf_counter()
        try:
            value = fn()
        except Exception as exc:  # a check that raises is a finding too
            out.setdefault("raised", {})[name] = f"{type(exc).__name__}: {str(exc)[:120]}"
            value = None
        seconds[name] = round(time.perf_counter() - start, 3)
        return value

    timed("policy", lambda: check_ptx_source(text))
    code = strip_ptx_comments(text)
    data = timed("read", lambda: (d := ModuleData(code), d.instructions)[0])
    out["instructions"] = len(data.instructions) if data else None
    timed("static", lambda: static_ptx_checks(code, "sm_90a"))
    timed("system_calls", lambda: system_calls(code, "ptx"))
    issues = (timed("module_data", lambda: data.reach("ptx")) or []) + (timed("parameters", lambda: param_writes(data, "ptx")) or [])
    timed("line_info", lambda: annotate_ptx(text))
    out["issues"] = len(issues)
    out["total_s"] = round(sum(seconds.values()), 3)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("cases", nargs="*", metavar="CASE", help=f"of {', '.join(CASES)} (default: all)")
    p.add_argument("--json", help="write every reading here")
    a = p.parse_args()
    if unknown := [c for c in a.cases if c not in CASES]:
        p.error(f"no case {', '.join(unknown)}; the cases: {', '.join(CASES)}")
    results = {}
    print("| case | chars | instructions | module data s | parameters s | line info s | total s | issues |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for name in a.cases or CASES:
        r = results[name] = measure(CASES[name]())
        s = r["seconds"]
        print(f"| {name} | {r['chars']:,} | {r['instructions']:,} | {s['module_data']:.2f} | {s['parameters']:.2f} | "
              f"{s['line_info']:.2f} | {r['total_s']:.2f} | {r['issues']}{' (raised)' if 'raised' in r else ''} |",
              flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
