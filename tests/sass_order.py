"""Where ptxas put instructions, for the CPU tests that pin an instruction order the GPU timings rest on (the
exponentials under a wgmma product, not behind its wait): a kernel's SASS as one line per instruction, predicates
dropped, and counts of an opcode between two positions."""
from __future__ import annotations

import re

from ptxbench.tools.compile import compile_source
from ptxbench.tools.sass import disassemble, sass_listing


def sass_ops(source: str, kernel: str) -> list[str]:
    """The kernel's instructions in order (opcode and operands, without a leading predicate) from a CUDA source."""
    r = compile_source(source, "cuda", "sm_90a")
    lines = [ln.split() for ln in sass_listing(r.cubin_path, kernel).splitlines()[1:] if ln.strip()]
    return [" ".join(w[1:] if w[0].startswith("@") else w) for w in lines]


def first(ops: list[str], prefix: str, start: int = 0, suffix: str = "") -> int:
    """The index of the first instruction at or after `start` that starts with `prefix` (and ends with `suffix`)."""
    return next(i for i in range(start, len(ops)) if ops[i].startswith(prefix) and ops[i].endswith(suffix))


def count(ops: list[str], prefix: str, start: int, end: int) -> int:
    return sum(o.startswith(prefix) for o in ops[start:end])


def ex2_under_pending_product(ops: list[str]) -> int:
    """MUFU.EX2 between the first wait that leaves one wgmma group pending and the wait after it: the exponentials
    that run while that group's product is still in flight."""
    one = first(ops, "WARPGROUP.DEPBAR", suffix="0x1")
    return count(ops, "MUFU.EX2", one, first(ops, "WARPGROUP.DEPBAR", one + 1))


def loop_exponentials_under_product(source: str, kernel: str, products: int) -> int:
    """MUFU.EX2 of the key-tile loop (the shortest backward branch holding one step's `products` HGMMA) issued between
    the wait that leaves the P V product pending and the wait for it."""
    built = compile_source(source, "cuda", "sm_90a")
    assert built.cubin_path, f"{kernel} did not compile: {[e.message for e in built.errors]}"
    ins = disassemble(built.cubin_path)[kernel]
    ops = [i.opcode for i in ins]
    spans = []
    for k, i in enumerate(ins):
        m = re.search(r"0x([0-9a-f]+)", i.operands) if i.opcode.startswith("BRA") else None
        if m and int(m.group(1), 16) // 16 < k:
            a = int(m.group(1), 16) // 16
            if sum(o.startswith("HGMMA") for o in ops[a:k + 1]) == products:
                spans.append((k - a, a, k))
    _, a, b = min(spans)
    loop = [(i.opcode, i.operands) for i in ins[a:b + 1]]
    one = next(n for n, (o, args) in enumerate(loop) if o.startswith("WARPGROUP.DEPBAR") and args.endswith("0x1"))
    zero = next(n for n in range(one + 1, len(loop)) if loop[n][0].startswith("WARPGROUP.DEPBAR"))
    return sum(o.startswith("MUFU.EX2") for o, _ in loop[one:zero])
