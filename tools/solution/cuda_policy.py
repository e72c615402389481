"""Static policy for solution sources: `cuda` files must be device-only; `ptx` files must be modules.

The harness owns all host code, so a `cuda` solution may hold only __global__ / __device__
functions, types, constants and templates. This is a cheap scan (comments and strings blanked
first, preprocessor lines read separately, a brace-depth walk for function definitions), not a
compiler: it refuses what is clearly host code and names the line and the reason. The output of
nvcc is PTX that only ever runs on the GPU, so the scan is a guard against surprises, not the only
line of defence.
"""
from __future__ import annotations

from ptxbench.workloads.arch import DEFAULT_ARCH
import re

from .plan import FormatIssue
from .source_scan import LineIndex, blank_comments, line_of

ALLOWED_INCLUDES = ("<cuda.h>", "<cuda_bf16.h>", "<cuda_fp16.h>", "<cstdint>", "<stdint.h>",
                    '"ptxbench/wgmma.cuh"', '"ptxbench/tma.cuh"', '"ptxbench/mbarrier.cuh"')
ALLOWED_PRAGMAS = ("unroll", "nounroll", "once")
_HOST_CALLS = ("printf", "fprintf", "puts", "malloc", "calloc", "realloc", "free", "exit", "abort", "system",
               "fopen", "getenv")
_REFUSED = [
    (re.compile(r"\bmain\s*\("), "defines or calls main(): the harness owns all host code"),
    (re.compile(r"\b__host__\b"), "__host__ code is not allowed: write __device__ or __global__ functions only"),
    (re.compile(r"<<<"), "kernel launches (<<< >>>) are not allowed: the launch plan says what runs"),
    (re.compile(r"\b(cuda[A-Z]\w*)\s*\("), "calls the CUDA runtime API ({0}): the harness does all host-side work"),
    (re.compile(r"\b(cu[A-Z]\w*)\s*\("), "calls the CUDA driver API ({0}): the harness does all host-side work "
                                          "(declare tensor maps in the plan; the CUtensorMap type is fine)"),
    (re.compile(r"\b(" + "|".join(_HOST_CALLS) + r")\s*\("), "calls {0}(), which is not allowed in a solution"),
    (re.compile(r"\b(new|delete)\b(?!\s*\()"), "uses operator {0}: allocate nothing; ask for scratch buffers in the plan"),
    (re.compile(r"\bstd::"), "uses the C++ standard library (std::): only the allowed headers are available"),
]
# One alternative per character class, no nested quantifiers: linear over a head of 40 KB of spaces.
_FUNCTION_HEAD = re.compile(r"\)(?:\s|const\b|noexcept\b)*(?:->[^{]*)?$")
_TRANSPARENT = re.compile(r'(\bnamespace\b[\w\s:]*|\bextern\s*"[^"]*"\s*)$')
_TYPE = re.compile(r"\b(struct|class|union|enum)\b")


# `#`, its digraph `%:` and its trigraph `??=` all start a directive.
_DIRECTIVE = re.compile(r"\s*(?:#|%:|\?\?=)\s*(\w+)\s*(.*)")


def _preprocessor(text: str) -> tuple[str, list[FormatIssue], dict[str, str]]:
    """Check #include / #pragma lines, collect simple macros, and blank all directive lines."""
    issues: list[FormatIssue] = []
    macros: dict[str, str] = {}
    lines = text.split("\n")
    k = 0
    while k < len(lines):
        start = k
        directive = lines[k]
        while directive.rstrip().endswith("\\") and k + 1 < len(lines):
            k += 1
            directive = directive.rstrip()[:-1] + " " + lines[k]
        m = _DIRECTIVE.match(directive)
        if m:
            word, rest = m.group(1), m.group(2).strip()
            if word.startswith("include") or word == "import":
                target = re.match(r'(<[^>]*>|"[^"]*")', rest)
                name = target.group(1) if target else rest
                if word != "include" or name not in ALLOWED_INCLUDES:
                    issues.append(FormatIssue(line=start + 1, kind="source", message=f"#{word} {name} is not allowed; the allowed "
                                                                      f"headers are {', '.join(ALLOWED_INCLUDES)}"))
            elif word == "pragma":
                if not rest.split() or rest.split()[0] not in ALLOWED_PRAGMAS:
                    issues.append(FormatIssue(line=start + 1, kind="source", message=f"#pragma {rest} is not allowed (only #pragma "
                                                                      f"{', #pragma '.join(ALLOWED_PRAGMAS)})"))
            elif word == "define":
                d = re.match(r"([A-Za-z_]\w*)(\([^)]*\))?\s*(.*)", rest)
                if d:  # function-like macros too: their bodies tell whether a definition is device code
                    macros[d.group(1)] = d.group(3)
            for j in range(start, k + 1):
                lines[j] = " " * len(lines[j])
        k += 1
    return "\n".join(lines), issues, macros


def _expand(head: str, macros: dict[str, str]) -> str:
    for _ in range(4):  # macros such as `#define DEVICE __device__ __forceinline__`
        head = re.sub(r"\b[A-Za-z_]\w*\b", lambda m: macros.get(m.group(0), m.group(0)), head)
    return head


def _function_definitions(code: str, macros: dict[str, str]) -> list[FormatIssue]:
    """Function bodies opened at file, namespace, extern "C" or struct scope must be __device__ or __global__."""
    issues: list[FormatIssue] = []
    stack: list[str] = []  # scope kinds of the open braces
    last = 0  # where the current declaration began
    for pos, ch in enumerate(code):
        if ch in ";}":
            if ch == "}" and stack:
                stack.pop()
            last = pos + 1
        elif ch == "{":
            opened_in_code = any(kind == "code" for kind in stack)
            head = code[last:pos]
            if opened_in_code:
                kind = "code"
            elif _TRANSPARENT.search(head.rstrip()):
                kind = "scope"
            elif _FUNCTION_HEAD.search(head.rstrip()) and "(" in head and "=" not in head.split("(")[0]:
                kind = "code"
                full = _expand(head, macros)
                if "__global__" not in full and "__device__" not in full:
                    name = re.findall(r"([~\w]+)\s*\(", head)
                    issues.append(FormatIssue(
                        line=line_of(code, last + len(head) - len(head.lstrip())), kind="source",
                        message=f"function {name[0] if name else ''}() is host code: mark it __device__ "
                                "(or __global__ for a kernel); the harness owns the host"))
            elif _TYPE.search(head) and "=" not in head:
                kind = "scope"  # member functions are checked like free functions
            else:
                kind = "code"  # an initializer list or similar: no definitions inside
            stack.append(kind)
            last = pos + 1
    return issues


def check_cuda_source(source: str) -> list[FormatIssue]:
    """Refusals for a `cuda` solution: host code, libraries, includes outside the allow list."""
    text, issues, macros = _preprocessor(blank_comments(source))
    code = blank_comments(text, strings=True)
    line_at = LineIndex(code)
    for pattern, reason in _REFUSED:
        for m in pattern.finditer(code):
            token = m.group(1) if m.groups() else m.group(0)
            issues.append(FormatIssue(line=line_at(m.start()), kind="source", message=reason.format(token)))
    issues += _function_definitions(code, macros)
    return sorted(issues, key=lambda i: i.line or 0)


def check_ptx_source(source: str, arch: str = DEFAULT_ARCH) -> list[FormatIssue]:
    """A `ptx` solution must be a whole module: .version and .target present, for this architecture."""
    text = blank_comments(source)
    issues: list[FormatIssue] = []
    if not re.search(r"^\s*\.version\s+\d+\.\d+", text, re.M):
        issues.append(FormatIssue(line=1, kind="source", message="the PTX module has no .version line (e.g. .version 8.5)"))
    target = re.search(r"^\s*\.target\s+([\w, ]+)", text, re.M)
    if not target:
        issues.append(FormatIssue(line=1, kind="source", message=f"the PTX module has no .target line (expected .target {arch})"))
    else:
        sm = target.group(1).split(",")[0].strip()
        if sm.endswith("a") and sm != arch:
            issues.append(FormatIssue(line=line_of(text, target.start()), kind="source",
                                      message=f".target {sm} does not match the task's architecture; expected .target {arch}"))
    if re.search(r"__global__|#include|\bextern\s+\"C\"", text):
        m = re.search(r"__global__|#include|\bextern\s+\"C\"", text)
        # the plan says ptx over a CUDA file: the fix is the plan's language key
        issues.append(FormatIssue(line=line_of(text, m.start()), kind="plan", message=f"'{m.group(0)}' is CUDA C++, not PTX; "
                                  'write language = "cuda" in the plan for a CUDA file'))
    return issues
