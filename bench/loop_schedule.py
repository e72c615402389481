"""Does an edit keep the main loop's schedule? Compares a kernel's SASS between a base and other builds, on the CPU.

    python3 bench/loop_schedule.py late_d96+head_groups pre_plain+head_groups [--workload mha_bwd_d96]
    python3 bench/loop_schedule.py --gemm '{}' '{"tail": "streamk", "max_ctas": 0, "defer": false}'

Attention backward (names of attention_bwd_variants/, or `X+order`: a variant or checked-in, the reference file, in
a launch order such as head_groups; an unknown name is a usage error listing them): the main kernel's lines from its
first HGMMA to its last (the consumers' block loop), compared in place. GEMM (--gemm: changes from default_params(), as JSON): the template
kernel's whole SASS, lines matched in order with registers and constants abstracted (its HGMMAs sit in a few
lines, so the span between them says little), and in place.

Why: tail_split's whole blocks (a variant since deleted) ran the same opcodes as pre_plain's, yet ptxas scheduled
their loop anew and the H200 ran it 7-8% slower at D = 64, while grid_1d, its control, kept the loop (637 of 641 lines
in place) and ran level (bench/results/attention_bwd.md, "v24 controls, second call"); the GEMM's in-kernel stream-K
tail kept 289 of the reference's 1,536 lines in order and lost 0.7% (gemm_sweep.md, round 7). A build whose loop moved
is worth a look before its GPU time is spent.
"""
from __future__ import annotations

import argparse
import difflib
import json
import re

from ptxbench.tools.compile import compile_source
from ptxbench.tools.sass import disassemble


def kernel_lines(cubin_path: str, kernel: str) -> list[str]:
    """A compiled kernel's SASS, one line per instruction (predicate, opcode, operands)."""
    return [f"{i.predicate} {i.opcode} {i.operands}".strip() for i in disassemble(cubin_path)[kernel]]


def hgmma_span(lines: list[str]) -> list[str]:
    """The lines from the first HGMMA to the last: the consumers' block loop of the attention backward."""
    hgmma = [k for k, ln in enumerate(lines) if " HGMMA" in f" {ln}"]
    return lines[hgmma[0]:hgmma[-1] + 1]


def _lines(source: str, kernel: str) -> list[str]:
    r = compile_source(source, "cuda", "sm_90a")
    if r.status != "ok" or not r.cubin_path:
        raise SystemExit(f"does not compile: {[e.message for e in r.errors][:3]}")
    return kernel_lines(r.cubin_path, kernel)


def loop_lines(variant: str, workload: str) -> list[str]:
    """The backward's main kernel's SASS lines from its first HGMMA to its last, for `variant` built for `workload`."""
    from ptxbench.workloads.registry import get_workload
    from ptxbench.workloads.solutions.attention_backward import backward_entry_point, fast_backward
    from ptxbench.workloads.solutions.attention_bwd_variants.registry import variant_text

    w = get_workload(workload)
    text = fast_backward(w, variant_text(variant))
    sym = w.symbols
    return hgmma_span(_lines(text, backward_entry_point(int(sym["D"]), bool(w.causal), "HKV" in sym, text)))


def gemm_lines(changes: dict) -> list[str]:
    """The GEMM template kernel's SASS lines for default_params() with `changes`."""
    from ptxbench.workloads.solutions import gemm_template as gt

    return _lines(gt.render(gt.default_params().model_copy(update=changes)), gt.KERNEL)


def abstract(lines: list[str]) -> list[str]:
    """Registers and constants abstracted: what stays is the code's shape and order."""
    return [re.sub(r"\bU?R\d+\b", "R", re.sub(r"0x[0-9a-f]+", "X", ln)) for ln in lines]


def in_place(base: list[str], other: list[str]) -> int:
    """Lines of `other` equal to `base`'s at the same position."""
    return sum(a == b for a, b in zip(base, other))


def in_order(base: list[str], other: list[str]) -> int:
    """Lines of `base` matched in order in `other`."""
    return sum(b.size for b in difflib.SequenceMatcher(None, base, other, autojunk=False).get_matching_blocks())


def unknown_variants(names: list[str]) -> str:
    """'' when variant_text renders every name, else which it does not and the names it does: the registry's KeyError
    came mid-run, after the base had compiled, and never said that `checked-in` needs a launch order."""
    from ptxbench.workloads.solutions.attention_bwd_variants.launch_orders import ORDERS
    from ptxbench.workloads.solutions.attention_bwd_variants.registry import VARIANTS

    def known(name: str) -> bool:
        base, plus, order = name.partition("+")
        return base in VARIANTS if not plus else order in ORDERS and base in (*VARIANTS, "checked-in")

    bad = [n for n in names if not known(n)]
    if not bad:
        return ""
    return (f"unknown variant {', '.join(map(repr, bad))}. A name is a variant ({', '.join(VARIANTS)}), or a variant "
            f"or checked-in (the reference file itself) with a launch order ({', '.join('+' + o for o in ORDERS)}), "
            f"e.g. checked-in+{next(iter(ORDERS))}")


def usage_problem(args) -> str:
    """'' when the arguments can run, else why not: a workload that is not an attention backward, GEMM changes that
    are not a JSON object of the template's parameters (each was a traceback mid-run, or a change silently ignored)."""
    if args.gemm:
        from ptxbench.workloads.solutions import gemm_template as gt

        fields = set(type(gt.default_params()).model_fields)
        for text in (args.base, *args.others):
            try:
                changes = json.loads(text)
            except ValueError as exc:
                return f"--gemm takes JSON objects of template changes; {text!r} is not JSON ({exc})"
            if not isinstance(changes, dict):
                return f"--gemm takes JSON objects of template changes, e.g. '{{\"stages\": 3}}'; {text!r} is not one"
            if unknown := sorted(set(changes) - fields):
                return f"--gemm: {', '.join(unknown)} not among the template's parameters ({', '.join(sorted(fields))})"
        return ""
    from ptxbench.workloads.registry import WORKLOADS

    backward = [w for w, wl in WORKLOADS.items() if wl.op == "mha_bwd"]
    if args.workload not in backward:
        return f"--workload {args.workload!r} is not an attention backward workload ({', '.join(backward)})"
    return unknown_variants([args.base, *args.others])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("base")
    ap.add_argument("others", nargs="+")
    ap.add_argument("--workload", default="mha_bwd_d64", help="the backward workload the variants are built for")
    ap.add_argument("--gemm", action="store_true", help="base and others are GEMM template changes (JSON)")
    args = ap.parse_args()
    if why := usage_problem(args):
        ap.error(why)
    if args.gemm:
        base = gemm_lines(json.loads(args.base))
        print(f"| changes | lines | in order, abstracted (of {len(base)}) | in place |\n|---|---|---|---|")
        for other in args.others:
            lines = gemm_lines(json.loads(other))
            print(f"| {other} | {len(lines)} | {in_order(abstract(base), abstract(lines))} | "
                  f"{in_place(base, lines)} |")
        return 0
    base = loop_lines(args.base, args.workload)
    print(f"| variant | loop lines | lines equal in place to {args.base}'s ({len(base)}) |\n|---|---|---|")
    for v in args.others:
        lines = loop_lines(v, args.workload)
        print(f"| {v} | {len(lines)} | {in_place(base, lines)} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
