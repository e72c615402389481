"""Disassemble a cubin and tell which target-instruction families a kernel has, in PTX and in SASS.

`nvdisasm -json` gives per-function instruction lists; `cuobjdump -sass` is the fallback when
nvdisasm is missing or fails. An opcode is the first dotted part of the mnemonic: HGMMA for
`HGMMA.64x64x16.F32.BF16`, UTMALDG for `UTMALDG.2D`.
"""
from __future__ import annotations

import contextlib
import json
import re
import shutil
from collections import Counter
from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel

from ptxbench.workloads.arch import DEFAULT_ARCH, get_arch
from .results import KernelResources, TargetPresence
from .jail import Workspace, run_in_jail
from .limit_hit import LimitsBelowTheTool, kernels_limit_hit, smallest_ptx
from .toolchain import ProcResult, Toolchain, ToolchainError, find_toolchain, run_tool


class DisassemblyLimitHit(ToolchainError):
    """The disassembler ran out of the jail's limits (memory, CPU time, output size, the clock) on a cubin ptxas made:
    the kernel's verdict, as ptxas's own limit hit is (compile.py records it as the compile's error; cached unless the
    clock stopped it). A ToolchainError to callers that only list SASS: they could not disassemble it. A disassembler
    that cannot start (JailError) or fails otherwise stays the machine's problem."""

    def __init__(self, limit: str, timed_out: bool):
        super().__init__(f"the kernel's SASS is too large to disassemble within the limit ({limit})")
        self.timed_out = timed_out


def _check_limits(tool: str, res: ProcResult, timeout_s: float, tc: Toolchain, argv: list[str]) -> ProcResult:
    """`res`, or DisassemblyLimitHit when the jail's limits stopped the tool (its own lines say so, as for ptxas):
    cuobjdump -sass runs nvdisasm itself, and a second disassembler would hit the same limit again. A limit that
    stops `argv` on the smallest cubin too is the machine's (LimitsBelowTheTool)."""
    if limit := kernels_limit_hit(tool, res, timeout_s, DEFAULT_ARCH, tc, _smallest_disassembles(tc, argv),
                                   " ".join(argv[1:-1])):
        raise DisassemblyLimitHit(limit, res.timed_out)
    return res


def _smallest_disassembles(tc: Toolchain, argv: list[str]):
    """A probe: `argv` (its last word the cubin's name) on the smallest cubin, in the jail. That cubin is assembled
    from the project's own text outside the jail; a ptxas that cannot make it leaves the verdict the kernel's."""
    def probe(workdir: Path) -> bool:
        (workdir / "smallest.ptx").write_text(smallest_ptx(DEFAULT_ARCH))
        made = run_tool([tc.ptxas.path, f"-arch={DEFAULT_ARCH}", str(workdir / "smallest.ptx"), "-o",
                         str(workdir / argv[-1])], timeout_s=60.0)
        return made.returncode != 0 or run_in_jail(tc, argv, workdir, 60.0).returncode == 0
    return probe


class SassInstruction(BaseModel):
    opcode: str  # the full mnemonic, e.g. HGMMA.64x64x16.F32.BF16
    operands: str = ""
    predicate: str = ""
    line: int | None = None  # the solution-file line it came from (tools/sass_lines.py), when known
    offset: int | None = None  # byte offset in its function
    inherited: bool = False  # the line table had no row of its own for it (the line is the previous row's)

    @property
    def base(self) -> str:
        return opcode_base(self.opcode)


def opcode_base(mnemonic: str) -> str:
    return mnemonic.split(".", 1)[0]


def opcode_histogram(instructions: list[SassInstruction]) -> dict[str, int]:
    return dict(Counter(i.base for i in instructions).most_common())


def _from_nvdisasm_json(text: str) -> dict[str, list[SassInstruction]]:
    doc = json.loads(text)
    functions = doc[1] if isinstance(doc, list) and len(doc) > 1 else []
    out: dict[str, list[SassInstruction]] = {}
    for f in functions:
        out[f["function-name"]] = [
            SassInstruction(opcode=i.get("opcode", ""), operands=i.get("operands", ""), predicate=i.get("predicate", ""))
            for i in f.get("sass-instructions", [])
        ]
    return out


_FUNC = re.compile(r"^\s*Function\s*:\s*(\S+)")
_INSN = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s+(?P<pred>@!?U?P\w+\s+)?(?P<op>[A-Z][A-Z0-9_.]*)\s*(?P<args>[^;]*);")


def _from_cuobjdump(text: str) -> dict[str, list[SassInstruction]]:
    out: dict[str, list[SassInstruction]] = {}
    current: list[SassInstruction] | None = None
    for line in text.splitlines():
        if m := _FUNC.match(line):
            current = out.setdefault(m.group(1), [])
        elif current is not None and (m := _INSN.match(line)):
            current.append(SassInstruction(opcode=m["op"], operands=m["args"].strip(), predicate=(m["pred"] or "").strip()))
    return out


def disassemble(cubin_path: str | Path, toolchain: Toolchain | None = None, timeout_s: float = 60.0) -> dict[str, list[SassInstruction]]:
    """kernel (function) name -> its SASS instructions. Raises ToolchainError when no disassembler works
    (DisassemblyLimitHit when the jail's limits stopped it)."""
    tc = toolchain or find_toolchain()
    with Workspace(prefix="ptxbench-sass-") as workdir:  # the cubin came from model text: read it in the jail
        shutil.copyfile(cubin_path, workdir / "kernel.cubin")
        return _disassemble(workdir / "kernel.cubin", tc, timeout_s)


def _disassemble(cubin_path: Path, tc: Toolchain, timeout_s: float) -> dict[str, list[SassInstruction]]:
    problems: list[str] = []
    workdir = cubin_path.parent
    if tc.nvdisasm is not None:
        argv = [tc.nvdisasm.path, "-json", cubin_path.name]
        res = _check_limits("nvdisasm", run_in_jail(tc, argv, workdir, timeout_s), timeout_s, tc, argv)
        if res.returncode == 0:
            try:
                return _from_nvdisasm_json(res.stdout)
            except (ValueError, KeyError, IndexError, TypeError) as e:
                problems.append(f"nvdisasm -json output not understood: {e}")
        else:
            problems.append(f"nvdisasm failed: {res.output[-500:]}")
    if tc.cuobjdump is not None:
        argv = [tc.cuobjdump.path, "-sass", cubin_path.name]
        res = _check_limits("cuobjdump", run_in_jail(tc, argv, workdir, timeout_s), timeout_s, tc, argv)
        if res.returncode == 0:
            return _from_cuobjdump(res.stdout)
        problems.append(f"cuobjdump failed: {res.output[-500:]}")
    raise ToolchainError("cannot disassemble: " + ("; ".join(problems) or "neither nvdisasm nor cuobjdump was found"))


def disassemble_lines(cubin_path: str | Path, solution_name: str, source: str | None = None,
                      toolchain: Toolchain | None = None, timeout_s: float = 60.0,
                      generated_ptx: str | None = None) -> dict[str, list[SassInstruction]]:
    """Like `disassemble`, each instruction with its line in the solution file `solution_name` (from the
    cubin's line table, `nvdisasm -c -gi`); `source` (the solution's text) puts instructions the line table
    places loosely on the line that writes their PTX (sass_lines.refine_lines; for `cuda`, from
    `generated_ptx`, nvcc's output). Falls back to `disassemble` (no lines)
    when nvdisasm is missing or its listing has no instruction."""
    from .sass_lines import parse_lined_listing, refine_lines, spelled_lines

    tc = toolchain or find_toolchain()
    with Workspace(prefix="ptxbench-sass-") as workdir:
        shutil.copyfile(cubin_path, workdir / "kernel.cubin")
        if tc.nvdisasm is not None:
            argv = [tc.nvdisasm.path, "-c", "-gi", "kernel.cubin"]
            res = run_in_jail(tc, argv, workdir, timeout_s)
            with contextlib.suppress(LimitsBelowTheTool):  # -c -gi needs more than -json: the listing without lines
                _check_limits("nvdisasm", res, timeout_s, tc, argv)
            functions = parse_lined_listing(res.stdout, solution_name) if res.returncode == 0 else {}
            if any(functions.values()):
                if source is not None:
                    refine_lines(functions, source, spelled_lines(source, generated_ptx, solution_name))
                return functions
        return _disassemble(workdir / "kernel.cubin", tc, timeout_s)


def sass_histograms(cubin_path: str | Path, toolchain: Toolchain | None = None) -> dict[str, dict[str, int]]:
    return {name: opcode_histogram(insns) for name, insns in disassemble(cubin_path, toolchain).items()}


def sass_listing(cubin_path: str | Path, kernel: str | None = None, toolchain: Toolchain | None = None) -> str:
    """The instruction list as text (one `[@P] OPCODE operands` per line), for one kernel or all."""
    lines: list[str] = []
    for name, insns in disassemble(cubin_path, toolchain).items():
        if kernel is not None and name != kernel:
            continue
        lines.append(f"// {name}")
        lines += [" ".join(p for p in (i.predicate, i.opcode, i.operands) if p) for i in insns]
    return "\n".join(lines)




_COMMENT_OR_STRING = re.compile(r'"|//|/\*')
_STRING_OR_LINE_COMMENT = re.compile(r'"|//')
_STRING_BODY = re.compile(r'(?:[^"\\\n]|\\.)*')


def strip_ptx_comments(ptx_text: str, blank_strings: bool = False) -> str:
    r"""PTX without comments, newlines kept so that line numbers stay put; a string literal (`"..."`: `.file`'s path, a
    `.pragma`) is no comment's start, and with `blank_strings` its contents are spaces: ptxas reads `//`, `/*`, `{` or
    `;` inside a string as the string's, so a check that read them as comments or delimiters would miss what follows
    (`.pragma "//"; st.global ...` hid the store from the checks of module data; `.file 1 "/*"` ... `.file 2 "*/"` a
    whole kernel). Linear in the text: each
    search starts where the last one ended; after an unclosed `/*` only strings and `//` are looked for."""
    out: list[str] = []
    i, n = 0, len(ptx_text)
    tokens = _COMMENT_OR_STRING
    while i < n:
        m = tokens.search(ptx_text, i)
        if m is None:
            out.append(ptx_text[i:])
            break
        j = m.start()
        out.append(ptx_text[i:j])
        if m.group() == '"':
            body = _STRING_BODY.match(ptx_text, j + 1)
            out.append('"' + (" " * (body.end() - j - 1) if blank_strings else body.group()))
            i = body.end()
            if i < n and ptx_text[i] == '"':
                out.append('"')
                i += 1
        elif m.group() == "//":
            end = ptx_text.find("\n", j)
            i = n if end < 0 else end
        else:
            end = ptx_text.find("*/", j + 2)
            if end < 0:  # no `*/` is left: this `/*` and every later one stay text (ptxas refuses the file)
                out.append("/*")
                i, tokens = j + 2, _STRING_OR_LINE_COMMENT
                continue
            i = end + 2
            out.append("\n" * ptx_text.count("\n", j, i))
    return "".join(out)


def target_presence(
    arch: str,
    ptx_text: str,
    kernels: Mapping[str, KernelResources | Mapping[str, int]],
    families: list[str] | None = None,
) -> dict[str, TargetPresence]:
    """family -> present in PTX (a spelling outside comments) / in SASS (count of matching opcodes).

    `kernels` maps kernel name to its KernelResources (its sass_opcodes are read) or to a histogram.
    `families` restricts the report (e.g. to a workload's targets); default: every family of the arch.
    """
    profile = get_arch(arch)
    code = strip_ptx_comments(ptx_text)
    chosen = [f for f in profile.families if families is None or f.name in families]
    out: dict[str, TargetPresence] = {}
    for fam in chosen:
        count = 0
        for k in kernels.values():
            hist = k.sass_opcodes if isinstance(k, KernelResources) else k
            count += sum(n for op, n in hist.items() if fam.matches_opcode(op))
        out[fam.name] = TargetPresence(in_ptx=fam.in_ptx(code), in_sass=count > 0, sass_count=count)
    return out
