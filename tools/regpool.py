"""setmaxnreg's register pool: whether a warp-specialised kernel's register moves can be met at all.

A CTA holds registers x threads from its launch. setmaxnreg.dec gives a warpgroup's surplus to a per-CTA pool and
setmaxnreg.inc blocks until the pool holds what it asks (PTX ISA, "setmaxnreg"); the pool never holds more than the
launch gave. So a layout of one producer warpgroup at `dec` and the others at `inc` needs

    (warpgroups - 1) x (inc - R) <= R - dec          (per thread; R = the launch's registers per thread)

or the consumers' inc waits forever and the kernel hangs without an error: no fault, no message, a TIMEOUT. ptxas
cannot see this (it knows neither the block size nor which warpgroup takes which branch), so the check lives here,
read from the SASS (USETMAXREG.DEALLOC / TRY_ALLOC and their immediates) and the launch's block size.

The same arithmetic says how far the consumers may go: a kernel short of registers (spills, or ptxas serialising its
wgmma, C7511 / C7512) whose inc is below what the pool allows is told the highest inc that still fits. Where the
spills sit in the warpgroup that gave registers back (local-memory accesses after its USETMAXREG.DEALLOC: a producer
whose spare warps took on work, such as the attention backward's dQ writers), the move goes the other way: a higher
dec, and the others' inc lowered to what the pool still holds (there, 24 / 240 -> 40 / 232 took the spills out and
-1 to -2% off the kernel, bench/results/attention_bwd.md "v32 measured").
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..workloads.solutions.register_split import inc_limit
from .sass import SassInstruction

POOL_WARNING = "setmaxnreg cannot be met"  # how pool_note's line starts after the kernel's name
MAX_INC = 256  # setmaxnreg's range is [24, 256]
STARVED = ("C7511", "C7512")  # ptxas: the register count cannot be met / wgmma serialised for want of registers
_COUNT = re.compile(r"0x([0-9a-f]+)\s*$", re.IGNORECASE)


@dataclass
class SetmaxnregMoves:
    """The distinct register counts a kernel's warpgroups release to (dec) and ask for (inc)."""

    dec: list[int] = field(default_factory=list)
    inc: list[int] = field(default_factory=list)


def setmaxnreg_moves(instructions: list[SassInstruction]) -> SetmaxnregMoves:
    dec, inc = set(), set()
    for ins in instructions:
        if ins.base != "USETMAXREG" or not (m := _COUNT.search(ins.operands)):
            continue
        (dec if ".DEALLOC" in ins.opcode else inc).add(int(m.group(1), 16))
    return SetmaxnregMoves(sorted(dec), sorted(inc))


LOCAL = ("STL", "LDL")  # local memory: what a spill is in SASS


def spills_by_side(instructions: list[SassInstruction]) -> tuple[int, int]:
    """(local-memory accesses after a USETMAXREG.DEALLOC, after a USETMAXREG.TRY_ALLOC), each instruction counted
    for the nearest move before it in address order: ptxas lays each warpgroup's branch out after its own move (the
    out-of-line wait loops at the end come after the last one, and count for it). Accesses before any move are the
    prologue's, shared by every warpgroup, and counted in neither."""
    released = raised = 0
    side = None
    for ins in instructions:
        if ins.base == "USETMAXREG":
            side = "released" if ".DEALLOC" in ins.opcode else "raised"
        elif ins.base in LOCAL and side is not None:
            released += side == "released"
            raised += side == "raised"
    return released, raised


def spills_mostly_released(kernel) -> bool:
    """Whether a kernel's (KernelResources) spills sit mostly in the warpgroup that gave registers back: more than
    twice the accesses on the other side (a few prologue values read back on each side say nothing)."""
    return kernel.spills_after_dec > 2 * kernel.spills_after_inc


def pool_shortfall(registers: int, threads: int, moves: SetmaxnregMoves) -> int:
    """Registers the consumers' inc asks for beyond what the pool can hold, for one producer warpgroup at the lowest
    dec and every other warpgroup at the highest inc: 0 when it fits (or the kernel moves no registers that way)."""
    warpgroups = threads // 128
    if not moves.dec or not moves.inc or warpgroups < 2 or not registers:
        return 0
    released = 128 * (registers - min(moves.dec))
    wanted = 128 * (warpgroups - 1) * (max(moves.inc) - registers)
    return max(0, wanted - released)


def max_inc(registers: int, threads: int, dec: int) -> int:
    """The highest setmaxnreg.inc (a multiple of 8, at most 256) the other warpgroups can all get while one warpgroup
    sits at `dec` (the templates' split uses the same limit, register_split.inc_limit)."""
    return min(MAX_INC, inc_limit(registers, threads, dec)) if threads > 128 else registers


def plan_pool_notes(launches, compiled) -> list[str]:
    """For each kernel a resolved plan launches (`launches`: .kernel and .block), once per kernel and block size:
    pool_note, or headroom_note where the kernel is short of registers (`compiled`: its CompileResult)."""
    notes, seen = [], set()
    for launch in launches:
        k = compiled.kernels.get(launch.kernel)
        threads = launch.block[0] * launch.block[1] * launch.block[2]
        if k is None or (launch.kernel, threads) in seen:
            continue
        seen.add((launch.kernel, threads))
        moves = SetmaxnregMoves(k.setmaxnreg_dec, k.setmaxnreg_inc)
        starved = bool(k.spill_stores or k.spill_loads) or any(
            code in w.message and f"'{launch.kernel}'" in w.message for w in compiled.warnings for code in STARVED)
        note = pool_note(launch.kernel, k.registers, threads, moves) or (
            (released_note(launch.kernel, k.registers, threads, moves, k.spills_after_dec) if spills_mostly_released(k) else
             headroom_note(launch.kernel, k.registers, threads, moves)) if starved else None)
        if note:
            notes.append(note)
    return notes


def headroom_note(kernel: str, registers: int, threads: int, moves: SetmaxnregMoves) -> str | None:
    """One line when the consumers' inc is below what the pool allows them: the highest inc that still fits."""
    if not moves.dec or not moves.inc or threads // 128 < 2:
        return None
    d, a = min(moves.dec), max(moves.inc)
    top = max_inc(registers, threads, d)
    if top <= a:
        return None
    return (f"{kernel}: the CTA's register pool has room: with one warpgroup at setmaxnreg.dec {d}, the other "
            f"{threads // 128 - 1} can take setmaxnreg.inc {top} (now {a}), {top - a} registers more per thread for a "
            f"kernel that is short of them.")


def released_note(kernel: str, registers: int, threads: int, moves: SetmaxnregMoves, accesses: int) -> str | None:
    """One line when ptxas spills in the warpgroup that setmaxnreg.dec shrank: the next dec that gives it 16 more
    registers, and the inc the pool still allows the others beside it."""
    if not moves.dec or not moves.inc or threads // 128 < 2:
        return None
    d, a = min(moves.dec), max(moves.inc)
    more = min(registers, d + 16)
    top = max_inc(registers, threads, more)
    if more <= d or top < registers:
        return None
    return (f"{kernel}: the spills ({accesses} local-memory accesses) sit in the warpgroup that setmaxnreg.dec leaves "
            f"{d} registers, not in the ones that inc raised to {a}: give it more, not them. With dec {more} the other "
            f"{threads // 128 - 1} can still take setmaxnreg.inc {top} from the CTA's pool ({threads} x {registers}).")


def pool_note(kernel: str, registers: int, threads: int, moves: SetmaxnregMoves) -> str | None:
    """One line for the feedback when the moves cannot fit: the arithmetic, and what it does to the kernel."""
    short = pool_shortfall(registers, threads, moves)
    if not short:
        return None
    warpgroups = threads // 128
    d, a = min(moves.dec), max(moves.inc)
    return (f"{kernel}: {POOL_WARNING} with one producer warpgroup. The CTA holds {threads} x {registers} = {threads * registers:,} "
            f"registers from launch; one warpgroup at setmaxnreg.dec {d} frees {128 * (registers - d):,}, and "
            f"{warpgroups - 1} at setmaxnreg.inc {a} ask {128 * (warpgroups - 1) * (a - registers):,}: {short:,} more "
            f"than the pool can hold, so the inc waits forever (a hang, no error). Lower the inc or the dec so that "
            f"(warpgroups - 1) x (inc - {registers}) <= {registers} - dec.")
