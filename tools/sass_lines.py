"""Which line of the solution file each SASS instruction came from.

The cubin's line table (ptxas -lineinfo; `.loc` from nvcc for `cuda`, from tools/profile/lineinfo.py
for `ptx`) is read with `nvdisasm -c -gi`, which also names the call site of code inlined from a
header (`//## File "mbarrier.cuh", line 68 inlined at "solution.cu", line 25`): an instruction
belongs to the innermost location in the solution file (for a device function of the solution,
its own line, not the kernel's call of it). For `cuda`, nvcc gives every instruction
of a multi-line `asm(...)` statement the statement's first line, and ptxas often gives HGMMA no row
of its own (it then inherits the line before it): an instruction of a known family (HGMMA from
`wgmma.mma_async`, SYNCS from `mbarrier.*`, ...) is moved to the line that spells its PTX
(refine_lines), so HGMMA sits on the line of its `wgmma.mma_async`.
"""
from __future__ import annotations

import re
from collections import Counter

from .sass import SassInstruction, opcode_base

_SECTION = re.compile(r"^\.text\.(?P<name>\S+?):\s*$")
_FILE = re.compile(r'//## File "(?P<file>[^"]+)", line (?P<line>\d+)(?P<inl>.*)$')
_INLINED = re.compile(r'inlined at "(?P<file>[^"]+)", line (?P<line>\d+)')
_INSN = re.compile(r"^\s*/\*(?P<off>[0-9a-f]{4,})\*/\s+(?P<pred>@!?U?P\w+\s+)?(?P<op>[A-Z][A-Z0-9_.]*)\s*(?P<args>[^;]*);")

# SASS opcode (first dotted part) -> the PTX spellings it comes from (for the asm-statement refinement).
PTX_OF_SASS = {
    "HGMMA": ("wgmma.mma_async",), "WARPGROUP": ("wgmma.fence", "wgmma.wait_group", "wgmma.commit_group"),
    "SYNCS": ("mbarrier.",), "UTMALDG": ("cp.async.bulk.tensor",), "UTMASTG": ("cp.async.bulk.tensor",),
    "UTMAREDG": ("cp.reduce.async.bulk",), "UBLKCP": ("cp.async.bulk",), "UTMAPF": ("cp.async.bulk.prefetch",),
    "USETMAXREG": ("setmaxnreg",), "LDSM": ("ldmatrix",), "STSM": ("stmatrix",), "UTCHMMA": ("tcgen05.mma",),
    "UTCBAR": ("tcgen05.commit",), "LDTM": ("tcgen05.ld",), "STTM": ("tcgen05.st",),
}  # not BAR / FENCE: __syncthreads and fences come from plain C++ as often as from asm


def _solution_line(block: list[tuple[str, int, str]], solution: str) -> int | None:
    """The solution-file line of one `//## File` block: nvdisasm lists the innermost location first, then
    each call site it was inlined into; the first one in the solution file is the line that wrote it
    (a header's code belongs to the solution line that called it)."""
    for file, line, inlined in block:
        if file.rsplit("/", 1)[-1] == solution:
            return line
        for m in _INLINED.finditer(inlined):
            if m["file"].rsplit("/", 1)[-1] == solution:
                return int(m["line"])
    return None


def parse_lined_listing(text: str, solution: str) -> dict[str, list[SassInstruction]]:
    """`nvdisasm -c -gi` text -> function -> instructions, each with its solution line (None if unknown).

    An instruction with no `//## File` comment right before it keeps the previous instruction's location
    (the line table only records changes)."""
    out: dict[str, list[SassInstruction]] = {}
    current: list[SassInstruction] | None = None
    block: list[tuple[str, int, str]] = []
    line: int | None = None
    for raw in text.splitlines():
        if m := _SECTION.match(raw.strip()):
            current, block, line = out.setdefault(m["name"], []), [], None
        elif m := _FILE.search(raw):
            block.append((m["file"], int(m["line"]), m["inl"]))
        elif current is not None and (m := _INSN.match(raw)):
            inherited = not block
            if block:
                line = _solution_line(block, solution)
                block = []
            current.append(SassInstruction(opcode=m["op"], operands=m["args"].strip(), predicate=(m["pred"] or "").strip(),
                                           line=line, offset=int(m["off"], 16), inherited=inherited))
    return out


def _asm_statement_end(lines: list[str], start: int, limit: int = 200) -> int:
    """Last line (1-based) of the `asm(...)` statement that begins on line `start`, or `start`."""
    depth, seen = 0, False
    for n in range(start, min(len(lines), start + limit) + 1):
        text = lines[n - 1]
        depth += text.count("(") - text.count(")")
        seen = seen or "(" in text
        if seen and depth <= 0:
            return n
    return start


_PTX_FILE = re.compile(r'^\s*\.file\s+(\d+)\s+"([^"]+)"')
_PTX_LOC = re.compile(r"^\s*\.loc\s+(\d+)\s+(\d+)\b(?:.*inlined_at\s+(\d+)\s+(\d+))?")


def spelled_lines(source: str, generated_ptx: str | None = None, solution: str = "") -> dict[str, list[int]]:
    """SASS opcode -> the solution lines that write its PTX. For a `ptx` solution, the lines of the file
    that spell it; for `cuda`, the lines whose generated PTX holds it (by nvcc's `.loc`, the call site in
    the solution when the instruction comes from a header wrapper)."""
    from .sass import strip_ptx_comments

    out: dict[str, set[int]] = {}
    if generated_ptx is None:
        for n, text in enumerate(strip_ptx_comments(source).split("\n"), 1):
            for base, words in PTX_OF_SASS.items():
                if any(w in text for w in words):
                    out.setdefault(base, set()).add(n)
    else:
        ptx_lines = generated_ptx.split("\n")  # nvcc puts the .file table at the end
        ours = {m[1] for t in ptx_lines if (m := _PTX_FILE.match(t)) and m[2].rsplit("/", 1)[-1] == solution}
        line: int | None = None
        for text in ptx_lines:
            if _PTX_FILE.match(text):
                continue
            if m := _PTX_LOC.match(text):
                line = int(m[2]) if m[1] in ours else int(m[4]) if m[3] in ours else None
            elif line is not None:
                for base, words in PTX_OF_SASS.items():
                    if any(w in text for w in words):
                        out.setdefault(base, set()).add(line)
    return {b: sorted(v) for b, v in out.items()}


def refine_lines(functions: dict[str, list[SassInstruction]], source: str, spelled: dict[str, list[int]] | None = None) -> None:
    """Put the instructions of a known family (PTX_OF_SASS) on the line that wrote them (in place).

    Two cases where the line table is off: an instruction with no row of its own (ptxas often emits
    HGMMA without one, so it inherits the line of whatever came before) goes to the first line at or
    after its inherited one that spells its PTX, else to the line of the nearest instruction of the
    same opcode that had a row; an instruction on the first line of a multi-line `asm(...)` statement
    goes to the line of that statement that spells its PTX. `spelled`: spelled_lines() (default: from
    `source` as PTX)."""
    from .sass import strip_ptx_comments

    lines = strip_ptx_comments(source).split("\n")  # at \n only, as the compilers number lines
    spelled = spelled if spelled is not None else spelled_lines(source)
    spans: dict[int, int] = {}

    def spells(n: int, words: tuple[str, ...]) -> bool:
        return 0 < n <= len(lines) and any(w in lines[n - 1] for w in words)

    for insns in functions.values():
        for i, ins in enumerate(insns):
            words = PTX_OF_SASS.get(ins.base)
            if not words or ins.line is None:
                continue
            cands = spelled.get(ins.base, [])
            if ins.inherited and ins.line not in cands and not spells(ins.line, words):
                after = [n for n in cands if n >= ins.line]
                if cands:
                    ins.line = after[0] if after else cands[-1]
                elif (near := _nearest_rowed(insns, i)) is not None:
                    ins.line = near
            ln = ins.line
            if not spells(ln, words) and 0 < ln <= len(lines) and re.search(r"\basm\b|__asm__", lines[ln - 1]):
                end = spans.setdefault(ln, _asm_statement_end(lines, ln))
                hit = next((n for n in range(ln, end + 1) if spells(n, words)), None)
                if hit is not None:
                    ins.line = hit


def _nearest_rowed(insns: list[SassInstruction], i: int) -> int | None:
    """The line of the nearest instruction with the same opcode as insns[i] that had a row of its own."""
    base = insns[i].base
    for d in range(1, len(insns)):
        for j in (i - d, i + d):
            if 0 <= j < len(insns) and insns[j].base == base and not insns[j].inherited and insns[j].line is not None:
                return insns[j].line
    return None


def sass_by_line(functions: dict[str, list[SassInstruction]]) -> dict[int, dict[str, int]]:
    """solution line -> SASS opcode (first dotted part) -> static count, over every function."""
    per: dict[int, Counter] = {}
    for insns in functions.values():
        for ins in insns:
            if ins.line is not None and ins.base != "NOP":
                per.setdefault(ins.line, Counter())[ins.base] += 1
    return {ln: dict(c.most_common()) for ln, c in sorted(per.items())}


def opcode_base_of(sass_text: str) -> str:
    """'@!P0 BRA 0x6b0' -> 'BRA' (an ncu source-page cell)."""
    words = sass_text.split()
    if words and words[0].startswith("@"):
        words = words[1:]
    return opcode_base(words[0].rstrip(";")) if words else ""
