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
from .source_scan import LineIndex, blank_comments, line_of, spliced

ALLOWED_INCLUDES = ("<cuda.h>", "<cuda_bf16.h>", "<cuda_fp16.h>", "<cstdint>", "<stdint.h>",
                    '"ptxbench/wgmma.cuh"', '"ptxbench/tma.cuh"', '"ptxbench/mbarrier.cuh"')
ALLOWED_PRAGMAS = ("unroll", "nounroll", "once")
# Every other directive is refused: `#line` / `# N "file"` rename the file the compiler reports (a host compiler
# then prints that host file's line N under the message), `#error` / `#warning` print such a line on demand.
ALLOWED_DIRECTIVES = ("define", "undef", "if", "ifdef", "ifndef", "elif", "elifdef", "elifndef", "else", "endif",
                      "include", "pragma")
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
_NAMESPACE = re.compile(r"\bnamespace\b")
_NAME_CHARS = re.compile(r"[\w\s:]*")
_FUNCTION_NAME = re.compile(r"(?<![~\w])([~\w]+)\s*\(")  # from the start of a name only: linear on a long one
_TYPE = re.compile(r"\b(struct|class|union|enum)\b")
_RUN = re.compile(r"\w+")
MACRO_DEPTH = 4  # macros such as `#define DEVICE __device__ __forceinline__`, through macros of macros


# `#`, its digraph `%:` and its trigraph `??=` all start a directive.
_DIRECTIVE = re.compile(r"\s*(?:#|%:|\?\?=)\s*(\w+)\s*(.*)")
_NULL_DIRECTIVE = re.compile(r"\s*(?:#|%:|\?\?=)\s*$")


def _refused_directive(word: str) -> str | None:
    """Why directive `word` is refused, or None for an allowed one (#include / #pragma are checked after)."""
    if word == "line" or word.isdigit():
        return ('#line and `# N "file"` line markers are not allowed: they rename the file the compiler reports, '
                "and its messages must name the solution's own lines")
    if word in ("error", "warning"):
        return f"#{word} is not allowed: write static_assert(...) for a compile-time check"
    if word in ALLOWED_DIRECTIVES or word.startswith("include") or word == "import":
        return None
    return f"#{word} is not allowed; the allowed directives are #{', #'.join(ALLOWED_DIRECTIVES)}"


def _preprocessor(text: str) -> tuple[str, list[FormatIssue], dict[str, str]]:
    """Check the directives (allow list; #include / #pragma arguments), collect simple macros, and blank all
    directive lines. `text` is spliced already (source_scan.spliced) and its comments blanked: a backslash left at a
    line's end here stood before a comment (`x \\// note`), which joins nothing for the compiler."""
    issues: list[FormatIssue] = []
    macros: dict[str, str] = {}
    lines = text.split("\n")
    k = 0
    while k < len(lines):
        start = k
        if _NULL_DIRECTIVE.match(lines[k]):  # `#/*` + `*/include <stdio.h>`: one directive to the compiler
            issues.append(FormatIssue(line=start + 1, kind="source", message=(
                "a `#` with nothing after it on its line: the compiler reads a comment there as one space, so a "
                "directive written past a comment (`#/*` then `*/include ...`) is still a directive; write each "
                "directive on one line, without comments inside it")))
        m = _DIRECTIVE.match(lines[k])
        if m:
            word, rest = m.group(1), m.group(2).strip()
            if refused := _refused_directive(word):
                issues.append(FormatIssue(line=start + 1, kind="source", message=refused))
            elif word.startswith("include") or word == "import":
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


class _DeviceMarks:
    """Whether a declaration head says __device__ or __global__ once its macros are expanded MACRO_DEPTH levels deep,
    as rounds of substitution would find it, without writing the expansion out (`#define X X X ...` x200 grows
    to gigabytes in four rounds): each macro's answer at each depth is found once and kept."""

    def __init__(self, macros: dict[str, str]):
        self.macros = macros
        self.known: dict[tuple[str, int], bool] = {}

    def __call__(self, text: str, depth: int = MACRO_DEPTH) -> bool:
        for run in set(_RUN.findall(text)):
            if depth > 0 and run in self.macros:  # replaced by its body: the name itself does not count
                if self._macro(run, depth):
                    return True
            elif "__device__" in run or "__global__" in run:
                return True
        return False

    def _macro(self, name: str, depth: int) -> bool:
        if (name, depth) not in self.known:
            self.known[(name, depth)] = self(self.macros[name], depth - 1)
        return self.known[(name, depth)]


def _opens_scope(head: str) -> bool:
    """`namespace a::b {` or `extern "C" {`: definitions inside sit at file scope. Read back from the head's end
    (a search for `namespace [names]$` from every `namespace` is quadratic)."""
    if head.endswith('"'):
        quote = head.rfind('"', 0, len(head) - 1)
        before = head[:quote].rstrip()
        return quote >= 0 and before.endswith("extern") and not _RUN.match(before[-7:-6])
    trailing_names = _NAME_CHARS.match(head[::-1]).end()
    return _NAMESPACE.search(head, len(head) - trailing_names) is not None


def _function_definitions(code: str, macros: dict[str, str]) -> list[FormatIssue]:
    """Function bodies opened at file, namespace, extern "C" or struct scope must be __device__ or __global__."""
    issues: list[FormatIssue] = []
    stack: list[str] = []  # scope kinds of the open braces
    in_code = 0  # how many of them are "code": a count, not a scan of the stack at every brace
    last = 0  # where the current declaration began
    device = _DeviceMarks(macros)
    line_at = LineIndex(code)
    for pos, ch in enumerate(code):
        if ch in ";}":
            if ch == "}" and stack:
                in_code -= stack.pop() == "code"
            last = pos + 1
        elif ch == "{":
            head = code[last:pos]
            if in_code:
                kind = "code"
            elif _opens_scope(head.rstrip()):
                kind = "scope"
            elif _FUNCTION_HEAD.search(head.rstrip()) and "(" in head and "=" not in head.split("(")[0]:
                kind = "code"
                if not device(head):
                    name = _FUNCTION_NAME.search(head)
                    issues.append(FormatIssue(
                        line=line_at(last + len(head) - len(head.lstrip())), kind="source",
                        message=f"function {name.group(1) if name else ''}() is host code: mark it __device__ "
                                "(or __global__ for a kernel); the harness owns the host"))
            elif _TYPE.search(head) and "=" not in head:
                kind = "scope"  # member functions are checked like free functions
            else:
                kind = "code"  # an initializer list or similar: no definitions inside
            stack.append(kind)
            in_code += kind == "code"
            last = pos + 1
    return issues


# `__has_include(<...>)` (and _next, and C23's `__has_embed`) reads `<...>` as a header name, in which `/*` or `//`
# opens no comment: the scans, which do not know that context, took `</*>` for a comment opener and blanked the lines
# below, an #include among them. It can only test for a header that cannot be included anyway: refused by name.
_HAS_INCLUDE = re.compile(r"__has_(?:include|embed)\w*")


def _header_tests(code: str) -> list[FormatIssue]:
    """`code`: the source with its comments and literals blanked."""
    line_at = LineIndex(code)
    return [FormatIssue(line=line_at(m.start()), kind="source", message=f"{m.group()} is not allowed: only the allowed "
                        f"headers may be included ({', '.join(ALLOWED_INCLUDES)}), and they are always there")
            for m in _HAS_INCLUDE.finditer(code)]


PRAGMA_OPERATOR = re.compile(r"\b_Pragma\b")
_PASTE = re.compile(r"##|%:%:|\?\?=\?\?=")
_PRAGMA_TEXT = re.compile(r'[^\S\n]*\([^\S\n]*(?:u8|u|U|L)?"([^"\\\n]*)"[^\S\n]*\)')  # one line: linear


def pragma_operator_allowed(text: str, end: int) -> bool:
    """Whether the `_Pragma` that ends at `end` of `text` takes a plain string literal naming an allowed pragma
    (`_Pragma("unroll")`); one built by a macro, or naming another pragma, is not."""
    literal = _PRAGMA_TEXT.match(text, end)
    words = literal.group(1).split() if literal else []
    return bool(words) and words[0] in ALLOWED_PRAGMAS


def _pragma_operators(text: str) -> list[FormatIssue]:
    """`_Pragma("...")` is a #pragma written as an operator (in code or in a macro): its text goes through the same
    allow list, and one whose text is not a plain string literal (built by a macro) is refused."""
    code = blank_comments(text, strings=True)  # `_Pragma` itself outside strings; its text read from `text`
    line_at = LineIndex(code)
    issues = []
    for m in PRAGMA_OPERATOR.finditer(code):
        if not pragma_operator_allowed(text, m.end()):
            issues.append(FormatIssue(line=line_at(m.start()), kind="source", message="_Pragma is allowed only with a "
                                      f"string literal naming an allowed pragma ({', '.join(ALLOWED_PRAGMAS)}), "
                                      'e.g. _Pragma("unroll")'))
    return issues


# Characters the compiler reads otherwise than these scans (which split lines at \n and take \s for white space): a
# lone carriage return ends a line, and a // comment; a NUL is white space, so `#\0include` is an #include.
_MISREAD = re.compile(r"\r(?!\n)|\x00")
_MISREAD_WHY = {"\r": "a lone carriage return (\\r not followed by \\n), which the compiler reads as a line break: "
                      "end lines with \\n",
                "\x00": "a NUL character, which the compiler reads as white space: remove it"}


# gcc's identifiers and pp-numbers take many non-ASCII characters that these scans' \w does not (U+00B7, U+0301...)
# and refuse some it takes (U+2E2F): `a\u00b7R"x(` is an identifier and a plain string for gcc, a raw string for the
# scan, and `1\u00b7'2'` a pp-number for gcc but a number and a char literal for the scan. Each such misreading hid
# lines from the policy; code (outside comments and literals) in ASCII leaves none to misread.
# So does a universal character name (`1\u00b7'2'`, all ASCII): gcc takes one into a name or a pp-number.
_NON_ASCII = re.compile(r"[^\x00-\x7f]|\\[uU]")


def _non_ascii_code(code: str) -> list[FormatIssue]:
    """`code`: the source with its comments and literals blanked."""
    if (m := _NON_ASCII.search(code)) is None:
        return []
    what = (f"a universal character name ({m.group()}...)" if m.group().startswith("\\")
            else f"a non-ASCII character ({ascii(m.group())[1:-1]})")
    return [FormatIssue(line=line_of(code, m.start()), kind="source", message=(
        f"the code holds {what} outside comments and string literals: write identifiers and code in ASCII (compilers "
        "disagree on which such characters a name may hold)"))]


# The compiler skips a UTF-8 byte-order mark that starts the file, so a directive may follow it on line 1 (`\s` is no
# match for U+FEFF, and the scans read that line as code).
BYTE_ORDER_MARK = "\ufeff"


def check_cuda_source(source: str) -> list[FormatIssue]:
    """Refusals for a `cuda` solution: host code, libraries, includes outside the allow list."""
    if m := _MISREAD.search(source):
        return [FormatIssue(line=line_of(source, m.start()), kind="source", message=f"the file holds {_MISREAD_WHY[m.group()]}")]
    if source.startswith(BYTE_ORDER_MARK):  # read as the compiler reads it: a space keeps every position
        source = " " + source[1:]
    # read as the compiler reads it, backslash-newlines joined first: `// x \` + `/*` on the next line opens no block
    # comment for the compiler, so a scan that blanks comments before joining hid the lines after it
    source = spliced(source)
    malformed: list[int] = []
    text, issues, macros = _preprocessor(blank_comments(source, malformed=malformed))
    if malformed:  # the compiler refuses it, and where it reads the lines after it is its own recovery's choice
        issues.append(FormatIssue(line=line_of(source, malformed[0]), kind="source", message=(
            "this raw string is malformed: its delimiter (between R\" and the opening parenthesis) is at most 16 "
            "letters, digits or punctuation (not space, parentheses, backslash, $, @ or `), and in a # line "
            "(#define, #pragma) it must end on that line")))
    issues += _pragma_operators(blank_comments(source))  # directives too: a macro may hold the operator
    outside = blank_comments(source, strings=True)
    if m := _PASTE.search(outside):  # `CAT(_Pra,gma)(...)` builds the operator the scan above looks for
        issues.append(FormatIssue(line=line_of(source, m.start()), kind="source", message=(
            "token pasting (`##`) is not allowed: a pasted name is one the source policy cannot read "
            "(`_Pra ## gma` is `_Pragma`); write the name out")))
    outside_literals = blank_comments(source, strings=True)  # directives kept
    issues += _header_tests(outside_literals) + _non_ascii_code(outside_literals)
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
    # [^\S\n]: a `\s*` after `^` crosses lines, and from every line start of a long blank run it is quadratic
    if not re.search(r"^[^\S\n]*\.version\s+\d+\.\d+", text, re.M):
        issues.append(FormatIssue(line=1, kind="source", message="the PTX module has no .version line (e.g. .version 8.5)"))
    target = re.search(r"^[^\S\n]*\.target\s+([\w, ]+)", text, re.M)
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
