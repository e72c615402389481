"""Read what the compilers say: ptxas errors and -v resources, nvcc errors, and the PTX `.loc`
directives that map generated PTX lines back to a CUDA source. Also the static checks that turn
the commonest target mistakes into one clear sentence before ptxas's own wording.
"""
from __future__ import annotations

import re
from collections.abc import Callable

from ptxbench.workloads.arch import get_arch

from .results import CompileIssue, KernelResources

_PTXAS_AT_LINE = re.compile(r"^ptxas\s+(?P<file>.+?), line (?P<line>\d{1,9}); (?P<sev>error|warning|fatal)\s*:\s*(?P<msg>.*)$")
_PTXAS_NO_LINE = re.compile(r"^ptxas\s+(?P<sev>error|warning|fatal)\s*:\s*(?P<msg>.*)$")
_ABORTED = "Ptx assembly aborted due to errors"
# ptxas's advisories at info level that cost speed, e.g. (C7512) wgmma serialised for want of registers: every wgmma
# then waits for the previous one, which no other message says.
_PERF_LOSS = re.compile(r"^ptxas\s+info\s*:\s*\((?P<code>C\d+)\)\s*Potential Performance Loss:\s*(?P<msg>.*)$")
_ENTRY = re.compile(r"Compiling entry function '(?P<name>[^']+)'")
_PROPS = re.compile(r"Function properties for (?P<name>\S+)")
_STACK = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")
_BARRIERS = re.compile(r"used (\d+) barriers")
_CMEM = re.compile(r"(\d+) bytes cmem\[(\d+)\]")

LineMap = Callable[[int], "tuple[int | None, str]"]
# A compiler quotes an undefined name whole: one of 200,000 characters was a 100 KB feedback. A message is cut as a
# plan issue's is (tools/solution/parse.py MAX_MESSAGE_CHARS); the whole log stays in CompileResult.log.
MESSAGE_CHARS = 600


# The folders of an absolute path (one that starts after no name character, `/` or `:`: `a/b/c` in a quoted expression
# and a URL are no paths). nvcc names a header by where the toolchain is installed (`previous definition at line 2912 of
# /home/<user>/.venv/.../cuda_bf16.hpp`) and quotes its own `.file "<work folder>/solution.cu"` lines: the model
# reads the file's name, not the host's folders.
_HOST_FOLDERS = re.compile(r"(?<![\w.~/:-])/(?:[^\s/\"'()<>:,;`]+/)+")


def without_host_paths(text: str) -> str:
    """`text` with every absolute path cut to its file's name."""
    return _HOST_FOLDERS.sub("", text) if "/" in text else text


def _cut(issues: list[CompileIssue]) -> list[CompileIssue]:
    """The issues as the model reads them: no host folder, and each message cut at MESSAGE_CHARS."""
    shown = []
    for issue in issues:
        message = without_host_paths(issue.message)
        if len(message) > MESSAGE_CHARS:
            message = message[:MESSAGE_CHARS] + " ..."
        shown.append(issue if message == issue.message else issue.model_copy(update={"message": message}))
    return shown


QUOTE_CHARS = 160  # of the solution's line an issue points at


def with_source_text(issues: list[CompileIssue], source: str) -> list[CompileIssue]:
    """The issues with the solution's line each points at (`text`), the line the model must change: ptxas and nvcc
    name a line number only, and a model counting 400 lines of PTX lands on the wrong one."""
    lines = source.split("\n")  # numbered as ptxas and nvcc number them (at \n only)
    out = []
    for issue in issues:
        text = lines[issue.line - 1].strip() if issue.line and 0 < issue.line <= len(lines) else ""
        if len(text) > QUOTE_CHARS:
            text = text[:QUOTE_CHARS] + " ..."
        out.append(issue.model_copy(update={"text": text}) if text else issue)
    return out


def parse_ptxas_log(log: str, line_map: LineMap | None = None) -> tuple[list[CompileIssue], list[CompileIssue], dict[str, KernelResources]]:
    """(errors, warnings, entry name -> resources) from `ptxas -v` output.

    `line_map` turns a line of the assembled PTX into (solution line or None, note for the message).
    """
    errors: list[CompileIssue] = []
    warnings: list[CompileIssue] = []
    kernels: dict[str, KernelResources] = {}
    current: KernelResources | None = None
    props_for: KernelResources | None = None
    for raw in log.splitlines():
        line = raw.strip()
        if m := _PTXAS_AT_LINE.match(line):
            src_line, note = line_map(int(m["line"])) if line_map else (int(m["line"]), "")
            severity = "warning" if m["sev"] == "warning" else "error"
            issue = CompileIssue(line=src_line, message=m["msg"].strip() + note, severity=severity)
            (errors if severity == "error" else warnings).append(issue)
        elif m := _PERF_LOSS.match(line):
            warnings.append(CompileIssue(message=f"potential performance loss ({m['code']}): {m['msg'].strip()}",
                                         severity="warning"))
        elif m := _PTXAS_NO_LINE.match(line):
            if m["sev"] == "warning":
                warnings.append(CompileIssue(message=m["msg"].strip(), severity="warning"))
            elif _ABORTED not in m["msg"] or not errors:
                errors.append(CompileIssue(message=m["msg"].strip()))
        elif m := _ENTRY.search(line):
            current = kernels.setdefault(m["name"], KernelResources(name=m["name"]))
        elif m := _PROPS.search(line):
            props_for = kernels.get(m["name"])
        elif m := _STACK.search(line):
            if props_for is not None:
                props_for.stack, props_for.spill_stores, props_for.spill_loads = (int(g) for g in m.groups())
            props_for = None
        elif (m := _USED.search(line)) and current is not None:
            current.registers = int(m.group(1))
            if s := _SMEM.search(line):
                current.smem_static = int(s.group(1))
            if b := _BARRIERS.search(line):
                current.barriers = int(b.group(1))
            current.cmem = {f"cmem[{bank}]": int(n) for n, bank in _CMEM.findall(line)}
    return _cut(errors), _cut(warnings), kernels


# Line numbers are bounded (int() refuses past 4,300 digits, and no file has a billion lines).
_NVCC = re.compile(r"^(?P<file>[^\s(][^(]*)\((?P<line>\d{1,9})\): (?P<sev>catastrophic error|error|warning)(?: #[\w-]+)?: "
                   r"(?P<msg>.*)$")
# The host compiler's preprocessing pass (gcc -E, run by nvcc): `file:line:col: error: ...`.
_HOST = re.compile(r"^(?P<file>[^\s:][^:]*):(?P<line>\d{1,9}):(?:\d{1,9}:)? (?P<sev>fatal error|error|warning): (?P<msg>.*)$")


def parse_nvcc_log(log: str, source_name: str, headers: frozenset[str] = frozenset()
                   ) -> tuple[list[CompileIssue], list[CompileIssue]]:
    """The diagnostics nvcc (`file.cu(12): error: ...`) and its host compiler (`file.cu:12:3: error: ...`) locate
    in the solution file, nothing else: a diagnostic in another file (a `#line` can name any host file) may quote
    that file, so neither it nor the raw log is ever an issue (see nvcc_failure). The one exception is the
    project's own headers (`headers`: their names under the include folder, e.g. `ptxbench/wgmma.cuh`), public text
    a solution may include: a helper called wrongly fails inside it, and the model is told where, with no line of the
    solution. The policy refuses `#line` and line markers, so no other file can take such a name."""
    errors: list[CompileIssue] = []
    warnings: list[CompileIssue] = []
    for raw in log.splitlines():
        m = _NVCC.match(raw.strip()) or _HOST.match(raw.strip())
        if not m:
            continue
        header = next((h for h in headers if m["file"].endswith("/" + h) or m["file"] == h), None)
        if m["file"] != source_name and header is None:
            continue
        warning = m["sev"] == "warning"
        line, message = (int(m["line"]), m["msg"].strip()) if header is None else \
            (None, f"{header}({m['line']}): {m['msg'].strip()}")
        issue = CompileIssue(line=line, message=message, severity="warning" if warning else "error")
        (warnings if warning else errors).append(issue)
    return _cut(errors), _cut(warnings)


def nvcc_failure(status: int) -> CompileIssue:
    """The error of an nvcc run that failed without an error located in the solution file."""
    return CompileIssue(message=f"nvcc failed (status {status}) in a file other than the solution; its messages are "
                                "not shown (another file's text is never quoted)")


_FILE = re.compile(r"^\s*\.file\s+(\d+)\s+\"([^\"]+)\"")
_LOC = re.compile(r"^\s*\.loc\s+(\d{1,9})\s+(\d{1,9})\b")


def loc_line_map(ptx_text: str, source_name: str) -> LineMap:
    """Map a generated PTX line to the CUDA source line of the closest `.loc` before it."""
    lines = ptx_text.split("\n")  # numbered as ptxas numbers them: splitlines() also breaks at \f, \r, \x85
    files = {m.group(1) for ln in lines if (m := _FILE.match(ln)) and m.group(2).rsplit("/", 1)[-1] == source_name}
    nearest: list[int | None] = []
    last: int | None = None
    for ln in lines:
        if (m := _LOC.match(ln)) and m.group(1) in files:
            last = int(m.group(2))
        nearest.append(last)

    def to_source(ptx_line: int) -> tuple[int | None, str]:
        text = lines[ptx_line - 1].strip() if 0 < ptx_line <= len(lines) else ""
        src = nearest[ptx_line - 1] if 0 < ptx_line <= len(nearest) else None
        return src, f" (generated PTX line {ptx_line}: `{text}`)"

    return to_source


# Instructions that only the architecture-specific ('a') targets have, and the arch they belong to.
_ARCH_SPECIFIC = {
    "wgmma": (re.compile(r"\bwgmma\."), "sm_90a"),
    "setmaxnreg": (re.compile(r"\bsetmaxnreg\."), "sm_90a"),
    "tcgen05": (re.compile(r"\btcgen05\."), "sm_100a"),
}
_TARGET = re.compile(r"^\s*\.target\s+(sm_\w+)")
_VERSION = re.compile(r"^\s*\.version\s+(\d{1,9})\.(\d{1,9})\b")


def _first(pattern: re.Pattern, lines: list[str]) -> tuple[int, re.Match] | None:
    for i, ln in enumerate(lines, 1):
        if m := pattern.search(ln):
            return i, m
    return None


# A function the module declares but does not define: ptxas leaves it to the driver, which resolves only the
# device system calls (vprintf, malloc, free, __assertfail, ...). printf's text would reach the host's stdout (the
# model's bytes on a user's terminal), malloc's heap outlives every call (a place to keep a result no protocol
# resets).
_EXTERN_FUNC = re.compile(r"\.extern\s+\.func\s*(?:\([^()]*\)\s*)?([A-Za-z_$%][\w$]*)")  # inline asm: mid-line


def system_calls(ptx_code: str, language: str) -> list[CompileIssue]:
    """Every function the module declares `.extern` (a device system call), refused with its name. `ptx_code` has its
    comments blanked; for a `cuda` solution it is nvcc's output, whose lines are not the model's."""
    issues = []
    for m in _EXTERN_FUNC.finditer(ptx_code):
        line = ptx_code.count("\n", 0, m.start()) + 1
        issues.append(system_call_issue(m.group(1), line if language == "ptx" else None))
    return issues


def system_call_issue(name: str, line: int | None) -> CompileIssue:
    return CompileIssue(
        line=line,
        message=f"the module calls {name}, a function it does not define (a device system call: printf, malloc, "
                f"free, assert): a solution's kernels may call only their own functions, and write only to the plan's "
                f"buffers")


def static_ptx_checks(ptx_code: str, arch: str) -> list[CompileIssue]:
    """Target and version mistakes, each named with its line. `ptx_code` has its comments blanked."""
    lines = ptx_code.split("\n")  # numbered as ptxas numbers them (at \n only)
    issues: list[CompileIssue] = []
    target = _first(_TARGET, lines)
    version = _first(_VERSION, lines)
    used = {name: hit for name, (pat, _) in _ARCH_SPECIFIC.items() if (hit := _first(pat, lines))}
    if target:
        t_line, declared = target[0], target[1].group(1)
        if declared != arch and declared + "a" == arch and used:
            feature = next(iter(used))
            issues.append(CompileIssue(
                line=t_line,
                message=f"{feature} needs `.target {arch}`; the file declares {declared} (line {t_line}). "
                f"Architecture-specific instructions ({', '.join(used)}) only exist on the 'a' target.",
            ))
        elif declared != arch and declared.endswith("a"):
            issues.append(CompileIssue(
                line=t_line, message=f"the file declares `.target {declared}` but it is compiled for {arch}; declare `.target {arch}`"
            ))
    for feature, (ln, _) in used.items():
        home = _ARCH_SPECIFIC[feature][1]
        if home != arch:
            issues.append(CompileIssue(line=ln, message=f"{feature} is an {home} instruction and does not exist on {arch} (line {ln})"))
    need = get_arch(arch).ptx_version_min
    if version:
        v_line, m = version
        have = (int(m.group(1)), int(m.group(2)))
        if have < tuple(int(p) for p in need.split(".")):
            issues.append(CompileIssue(
                line=v_line, message=f"{arch} needs PTX `.version {need}` or later; the file declares {have[0]}.{have[1]} (line {v_line})"
            ))
    return issues
