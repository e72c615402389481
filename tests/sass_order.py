"""Where ptxas put instructions, for the CPU tests that pin an instruction order the GPU timings rest on (the
exponentials under a wgmma product, not behind its wait): a kernel's SASS as one line per instruction, predicates
dropped, and counts of an opcode between two positions."""
from __future__ import annotations

from ptxbench.tools.compile import compile_source
from ptxbench.tools.sass import sass_listing


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
