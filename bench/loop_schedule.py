"""Does an edit keep the main loop's schedule? Compares the attention backward's main kernel, SASS line by line, from
its first to its last HGMMA (the consumers' block loop), between a base variant and others, on the CPU.

    python3 bench/loop_schedule.py pre_plain+head_groups grid_1d tail_whole [--workload mha_bwd_d64]

Why: tail_split's whole blocks run the same opcodes as pre_plain's, yet ptxas scheduled its loop anew and the H200
ran it 7-8% slower at D = 64, while grid_1d kept the loop (637 of 641 lines in place) and ran level
(bench/results/attention_bwd.md, "v24 controls, second call"). A variant whose loop moved is worth a look before
its GPU time is spent. Lines are compared in place, operands and registers included.
"""
from __future__ import annotations

import argparse

from ptxbench.tools.compile import compile_source
from ptxbench.tools.sass import disassemble
from ptxbench.workloads.registry import get_workload
from ptxbench.workloads.solutions.attention_backward import backward_entry_point, fast_backward
from ptxbench.workloads.solutions.attention_bwd_variants.registry import variant_text


def loop_lines(variant: str, workload: str) -> list[str]:
    """The main kernel's SASS lines from its first HGMMA to its last, for `variant` built for `workload`."""
    w = get_workload(workload)
    text = fast_backward(w, variant_text(variant))
    r = compile_source(text, "cuda", "sm_90a")
    if r.status != "ok" or not r.cubin_path:
        raise SystemExit(f"{variant}: does not compile for {workload}: {[e.message for e in r.errors][:3]}")
    sym = w.symbols
    kernel = backward_entry_point(int(sym["D"]), bool(w.causal), "HKV" in sym, text)
    lines = [f"{i.predicate} {i.opcode} {i.operands}".strip() for i in disassemble(r.cubin_path)[kernel]]
    hgmma = [k for k, ln in enumerate(lines) if " HGMMA" in f" {ln}"]
    return lines[hgmma[0]:hgmma[-1] + 1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("base")
    ap.add_argument("others", nargs="+")
    ap.add_argument("--workload", default="mha_bwd_d64")
    args = ap.parse_args()
    base = loop_lines(args.base, args.workload)
    print(f"| variant | loop lines | lines equal in place to {args.base}'s ({len(base)}) |\n|---|---|---|")
    for v in args.others:
        lines = loop_lines(v, args.workload)
        same = sum(a == b for a, b in zip(base, lines))
        print(f"| {v} | {len(lines)} | {same} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
