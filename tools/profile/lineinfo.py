"""Line info for hand-written PTX: put a `.loc` before every instruction so that ptxas -lineinfo
maps each SASS instruction back to the line of the solution file the model wrote.

compute-sanitizer then reports `solution.ptx:42` and the profiler's source page can name PTX lines.
Modules that already carry `.file`/`.loc` (nvcc output) are left as they are. No imports beyond the
standard library: the GPU-side replay program loads this file on a bare image.
"""
from __future__ import annotations

import re

_ADDRESS_SIZE = re.compile(r"^\s*\.address_size\b")
_TARGET = re.compile(r"^\s*\.target\b")
_LABEL_ONLY = re.compile(r"^\s*[$%\w]+:\s*(//.*)?$")
_LABEL_PREFIX = re.compile(r"^(\s*[$%\w]+:)(?!:)(\s*)(\S.*)$")


def _strip_comment(line: str) -> str:
    return line.split("//", 1)[0].strip()


def has_line_info(ptx: str) -> bool:
    return bool(re.search(r"^\s*\.(file|loc)\b", ptx, re.M))


def annotate_ptx(ptx: str, filename: str = "solution.ptx", first_line: int = 1) -> str:
    """Return `ptx` with `.file 1 "filename"` and a `.loc 1 N 0` before each instruction statement.

    N is the statement's own line number (counted from `first_line`), so line numbers reported by
    the tools are those of the original file. Block comments are assumed not to hold code.
    """
    if has_line_info(ptx):
        return ptx
    lines = ptx.splitlines()
    needs_file = True
    anchor = next((i for i, l in enumerate(lines) if _ADDRESS_SIZE.match(l)), None)
    if anchor is None:
        anchor = next((i for i, l in enumerate(lines) if _TARGET.match(l)), None)
    if anchor is None:
        return ptx  # not a PTX module we can place a .file in; leave it alone
    out: list[str] = []
    depth = 0  # brace depth: >= 1 inside an entry or function body
    in_block_comment = False
    continuing = False  # inside a multi-line instruction not yet ended by ';'
    for i, raw in enumerate(lines):
        lineno = first_line + i
        if in_block_comment:
            out.append(raw)
            in_block_comment = "*/" not in raw
        elif raw.strip().startswith("/*"):
            out.append(raw)
            in_block_comment = "*/" not in raw
        else:
            code = _strip_comment(raw)
            if continuing:
                out.append(raw)
                continuing = not code.endswith(";")
            elif depth >= 1 and _is_instruction(code):
                m = _LABEL_PREFIX.match(raw)
                if m and _is_instruction(_strip_comment(m.group(3))) and not _LABEL_ONLY.match(raw):
                    out += [m.group(1), f"\t.loc 1 {lineno} 0", m.group(2) + m.group(3)]
                else:
                    out += [f"\t.loc 1 {lineno} 0", raw]
                continuing = not code.endswith(";")
            else:
                out.append(raw)
                depth += code.count("{") - code.count("}")
        if i == anchor and needs_file:
            out.append(f'.file 1 "{filename}"')
            needs_file = False
    return "\n".join(out) + ("\n" if ptx.endswith("\n") else "")


def _is_instruction(code: str) -> bool:
    """An instruction statement: not a directive, a brace, or a bare label."""
    if not code or code[0] in ".{}" or code.startswith("//"):
        return False
    if _LABEL_ONLY.match(code):
        return False
    return True
