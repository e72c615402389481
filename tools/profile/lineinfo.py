"""Line info for hand-written PTX: a `.loc` at the start of every instruction's own line, so that
ptxas -lineinfo maps each SASS instruction back to the line of the solution file the model wrote.

The annotation never adds or removes a line: `.file 1 "solution.ptx"` goes at the end of the
`.address_size` (or `.target`) line and `.loc 1 N 0` in front of the instruction on line N, so a
ptxas message about line N of the annotated module is about line N of the model's file, and the
cubin's line table (`nvdisasm -g`, the sanitizer, Nsight Compute's source page) names the model's
lines. Modules that already carry `.file`/`.loc` (nvcc output) are left as they are. No imports
beyond the standard library: the GPU-side replay program and tests/data/ncu/capture.py load this
file on a bare image.
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
    # [^\S\n]: a `\s*` after `^` crosses lines, and from every line start of a long blank run it is quadratic
    # (390,000 empty lines: 264 s in the harness's process, before ptxas; bench/results/hostile_text_cost.md)
    return bool(re.search(r"^[^\S\n]*\.(file|loc)\b", ptx, re.M))


def annotate_ptx(ptx: str, filename: str = "solution.ptx", first_line: int = 1) -> str:
    """Return `ptx` with `.file 1 "filename"` and `.loc 1 N 0` at the start of each instruction line.

    N is the statement's own line number (counted from `first_line`); the line count is unchanged.
    A multi-line instruction gets its `.loc` on its first line. Block comments are assumed not to
    hold code.
    """
    if has_line_info(ptx):
        return ptx
    # Lines as ptxas counts them, at \n only: splitlines() also breaks at \r, \f, \v, \x1c-\x1e, \x85, \u2028, so
    # the join would turn what follows a form feed in a // comment into code, and move every later line by one.
    lines = ptx.split("\n")
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
        line = raw
        if in_block_comment:
            in_block_comment = "*/" not in raw
        elif raw.strip().startswith("/*"):
            in_block_comment = "*/" not in raw
        else:
            code = _strip_comment(raw)
            if continuing:
                continuing = not code.endswith(";")
            elif depth >= 1 and _is_instruction(code):
                m = _LABEL_PREFIX.match(raw)
                loc = f".loc 1 {lineno} 0 "
                if m and _is_instruction(_strip_comment(m.group(3))) and not _LABEL_ONLY.match(raw):
                    line = f"{m.group(1)} {loc}{m.group(3)}"  # `L: .loc 1 N 0 add ...;`
                else:
                    line = loc + raw
                continuing = not code.endswith(";")
            else:
                depth += code.count("{") - code.count("}")
        if i == anchor:
            line = _before_comment(line, f' .file 1 "{filename}"')
        out.append(line)
    return "\n".join(out)


def _before_comment(line: str, text: str) -> str:
    """`line` with `text` added after its code, before a trailing // comment."""
    code, sep, comment = line.partition("//")
    return code.rstrip() + text + (" //" + comment if sep else "")


def _is_instruction(code: str) -> bool:
    """An instruction statement: not a directive, a brace, or a bare label."""
    if not code or code[0] in ".{}" or code.startswith("//"):
        return False
    if _LABEL_ONLY.match(code):
        return False
    return True
