"""An address the checks follow is used only as an address: its bits never become data.

The checks of module data and of parameters (module_data.py, param_reach.py) follow an address along the data flow
(ptx_flow.py) and refuse every write through it. The flow ends where a value stops depending on the address by data:
a load through it gives data, and a guard or a branch passes nothing on. So an address whose bits were tested one by
one (`and`, `setp`, then `@%p or` into a clean register) or looked up byte by byte in a table of the numbers 0..255
(`kIdent[(a >> 8 * j) & 0xff]`, plain CUDA) came back as a number the flow no longer followed, and a write through
it went unchecked (tests/data/cheats/attacks/laundered_tail_stash.cu). No kernel needs an address's bits as data,
so the rule is on the use: a followed register is only copied whole, offset by an integer `add` / `sub` (or a
`mad`'s addend), chosen by `selp` (nvcc's `cond ? &tmA : &tmB`), converted between address spaces, compared with 0
(a null test: an address is never 0, so the answer holds none of its bits), masked below 256 (an alignment test:
bits the pool's 256-byte alignment and ptxas's layout fix, and still followed), or named inside `[...]` as the
address of a memory access. Any
other instruction reading it (a comparison, a bit operation, a shift, a narrowing or a split, a product, floating
point, a shuffle, a jump table's index) is refused. What a guard tests, a table's index, a branch's condition: none
of them can then hold an address's bits, so neither can anything they reach.

Left to the run time: an address a kernel writes as a number it knows (the pool's place, were it the same on every
run) involves no symbol at all; module_state.py and the scrub own that memory's state, not this check.
"""
from __future__ import annotations

import re
from typing import Callable

from .module_data import _BRACKET, _NUMBER, Instruction, _int, _split_top, after_written

_COPY = re.compile(r"mov\.[bsu]64$")
_CONVERT = re.compile(r"cvta(?:\.to)?\.\w+\.[bsu]64$")
_OFFSET = re.compile(r"(?:add|sub)\.[su]64$")
_ADDEND = re.compile(r"mad\.(?:wide\.[su]32|lo\.[su]64)$")
_CHOICE = re.compile(r"selp\.[bsu]64$")
_NULL_TEST = re.compile(r"setp\.(?:eq|ne)\.[bsu]64$")
_PREDICATE = re.compile(r"(?:and|or|xor|not|mov)\.pred$")
_LOW_BITS = re.compile(r"and\.b(?:64|32)$")

USES = ("copied whole (`mov.u64`), offset by an integer `add` / `sub` (or as a `mad`'s addend), chosen by `selp`, "
        "converted between address spaces (`cvta`), compared with 0, masked below 256 (an alignment test), or named "
        "inside `[...]` as a memory access's address")


def only_as_address(ins: Instruction, involved: Callable[[str], object | None]) -> bool:
    """Whether `ins` uses what it reads of a followed address (`involved(text)`: what an operand's text names or
    holds, None when nothing) only as an address: `mov` of a whole 64-bit register, `cvta`, 64-bit integer `add` /
    `sub`, a `mad` whose addend alone is followed, a `selp` choosing between addresses by a predicate that is not one.
    Called for an instruction that reads one outside `[...]`."""
    if ins.family == "mov" and "{" in ins.operands:  # a split into halves or a pack: the bits taken apart
        return False
    if _COPY.match(ins.opcode) or _CONVERT.match(ins.opcode) or _OFFSET.match(ins.opcode):
        return True
    ops = [o for o in (o.strip() for o in _split_top(_BRACKET.sub(" ", after_written(ins)))) if o]
    if _PREDICATE.match(ins.opcode):
        return True  # a predicate an address reaches came from a null test (the one comparison allowed): no bit of it
    if _NULL_TEST.match(ins.opcode) and len(ops) == 2 and "0" in ops and involved("0") is None:
        return True  # `p != nullptr`: an address is never 0, so the answer carries none of its bits
    if _LOW_BITS.match(ins.opcode) and len(ops) == 2 and _NUMBER.match(ops[1]) and _int(ops[1]) < 256:
        return True  # an alignment test (`p & 15`): bits under the pool's 256-byte alignment, fixed where ptxas lays
        # the module out; still followed (the flow carries it), so only such tests can read it
    if _ADDEND.match(ins.opcode) and len(ops) == 3:
        return not any(involved(o) is not None for o in ops[:2])
    # `cond ? &tmA : &tmB`: one of two addresses by a predicate no address made (none can: comparisons are refused)
    return bool(_CHOICE.match(ins.opcode)) and len(ops) == 3 and involved(ops[2]) is None
