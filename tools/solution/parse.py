"""From a model's reply to a checked Solution, and from a Solution to the concrete plan the GPU runs.

    extract_solution(reply)              -> (source, language) | [FormatIssue]
    parse_solution(source, workload)     -> Solution | [FormatIssue]
    read_reply(reply, workload)          -> both steps at once
    resolve_plan(plan, workload, n_sms)  -> ResolvedPlan (raises PlanError)

Every issue carries the file line to fix and what was expected. Line numbers count from the first
line of the kernel file (the code block), not of the reply. Nothing here runs model text.
"""
from __future__ import annotations

import bisect
import re
from collections.abc import Mapping

from ptxbench.workloads.arch import DEFAULT_ARCH, ArchProfile, get_arch
from ptxbench.workloads.schema import Workload

from .language import detect_language
from .cuda_policy import check_cuda_source, check_ptx_source
from .plan import Arg, FormatIssue, LaunchPlan, ResolvedPlan, Solution
from .plan_resolve import Resolver
from .plan_toml import PLAN_START, KeyLines, parse_plan_block
from .source_scan import Entry, Param, Ranges, blank_comments, cuda_kernels, ptx_entries, unencodable

MAX_ISSUES = 30
# Bounds on model text: the largest project solution is 23 KB; a reply may hold prose around it.
MAX_REPLY_CHARS = 1_000_000
MAX_SOLUTION_CHARS = 400_000
MAX_KERNELS = 256  # .entry / __global__ definitions in one file
MAX_MESSAGE_CHARS = 600  # one issue's text (a message quoting a huge TOML value stays readable)
PLACEHOLDER_NUM_SMS = 132  # validation only; the GPU worker resolves with the device's real SM count
FENCE_LANGUAGES = {"ptx": "ptx", "cuda": "cuda", "cu": "cuda", "cpp": "cuda", "c++": "cuda", "cxx": "cuda", "c": "cuda"}
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})[ \t]*([^\s`]*)[^\n]*$", re.M)


class ExtractedSource(tuple):
    """(source, language) — unpacks as a pair; `.warnings` holds notes about the choice made."""

    def __new__(cls, source: str, language: str | None, warnings: list[str] | None = None):
        self = super().__new__(cls, (source, language))
        self.warnings = list(warnings or [])
        return self

    def __getnewargs__(self):  # keeps pickling and copying exact
        return (self[0], self[1], self.warnings)

    @property
    def source(self) -> str:
        return self[0]

    @property
    def language(self) -> str | None:
        return self[1]


class PlanError(ValueError):
    """A plan that cannot be resolved for this workload and GPU; `.issues` says why, line by line."""

    def __init__(self, issues: list[FormatIssue]):
        super().__init__("; ".join(str(i) for i in issues))
        self.issues = issues


def _blocks(reply: str) -> list[tuple[str, str, bool]]:
    """Fenced code blocks as (tag, body, closed)."""
    blocks, pos = [], 0
    while (m := _FENCE.search(reply, pos)) is not None:
        fence, tag = m.group(1), m.group(2).lower()
        closer = re.compile(rf"^ {{0,3}}{fence[0]}{{{len(fence)},}}[ \t]*$", re.M)
        end = closer.search(reply, m.end())
        body = reply[m.end() + 1:end.start() if end else len(reply)]
        blocks.append((tag, body.rstrip("\n") + "\n" if body.strip() else "", end is not None))
        pos = end.end() if end else len(reply)
    return blocks


# A reasoning model's inline thinking, sent by a server without a reasoning parser
THINK_START = "<think>"
THINK_END = "</think>"  # where it ends (R1-style replies may omit the opening tag)


def extract_solution(reply_text: str) -> ExtractedSource | list[FormatIssue]:
    """The kernel file in a model reply: the fenced block holding the `/* ptxbench` plan (the last one
    if several do), else the last ptx/cuda block; a reply with no fences is taken whole if it has a plan. Only what
    follows a `</think>` counts: a draft in the reasoning was taken when the answer had no block, or no plan."""
    if len(reply_text or "") > MAX_REPLY_CHARS:
        return [FormatIssue(line=None, kind="format", message=f"the reply is {len(reply_text)} characters long (at most "
                                                              f"{MAX_REPLY_CHARS}): send one kernel file, not the whole history")]
    if not reply_text or not reply_text.strip():
        return [FormatIssue(line=None, kind="format", message="the reply is empty; expected one ```ptx or ```cuda code block "
                                                              "holding the kernel file with its /* ptxbench ... */ plan")]
    if THINK_END in reply_text:  # reasoning sent inline (a server without a reasoning parser): its drafts are no answer
        reply_text = reply_text.rsplit(THINK_END, 1)[1]
        if not reply_text.strip():
            return [FormatIssue(line=None, kind="format", message="the reply is all reasoning (nothing after </think>); "
                                                                  "expected the kernel file in a ```ptx or ```cuda code block "
                                                                  "after it")]
    blocks = [b for b in _blocks(reply_text) if b[1].strip()]
    warnings: list[str] = []
    if not blocks:
        if PLAN_START.search(reply_text):
            source = reply_text.strip("\n") + "\n"
            return _not_utf8(source) or ExtractedSource(source, detect_language(source, default=None))
        return [FormatIssue(line=None, kind="format", message="no code block found: put the whole kernel file, with its "
                                                              "/* ptxbench ... */ plan, in one ```ptx or ```cuda fenced block")]
    with_plan = [b for b in blocks if PLAN_START.search(b[1])]
    if with_plan:
        if len(with_plan) > 1:
            warnings.append(f"{len(with_plan)} code blocks hold a /* ptxbench plan; the last one was used")
        tag, body, closed = with_plan[-1]
    else:
        code = [b for b in blocks if b[0] in FENCE_LANGUAGES] or blocks
        tag, body, closed = code[-1]
        if len(blocks) > 1:
            warnings.append(f"no code block holds a /* ptxbench plan; took the last {'```' + tag if tag else 'untagged'} block")
        if any(b[0] == "toml" for b in blocks):
            warnings.append("the plan was in a separate ```toml block; it must be inside the kernel file as a "
                            "/* ptxbench ... */ comment")
    if bad_text := _not_utf8(body):
        return bad_text
    if not closed:
        warnings.append("the code block is not closed with ``` (was the reply cut off?)")
    language = FENCE_LANGUAGES.get(tag)
    guessed = detect_language(body, default=None)
    if guessed and language and guessed != language:
        warnings.append(f"the block is tagged ```{tag} but its plan or content says {guessed}; using {guessed}")
        language = guessed
    return ExtractedSource(body, language or guessed, warnings)


def _param_problem(arg: Arg, p: Param, language: str) -> str | None:
    """Why parameter p cannot receive arg (None when it can or when we cannot tell)."""
    if arg.kind == "tmap":
        if p.kind != "tmap":
            return ("passes a 128-byte CUtensorMap by value; declare the parameter "
                    + (".param .align 64 .b8 NAME[128]" if language == "ptx" else "const __grid_constant__ CUtensorMap NAME"))
        if language == "ptx" and (p.align or 0) < 64:
            return "passes a CUtensorMap, which must be 64-byte aligned: declare .param .align 64 .b8 NAME[128]"
        if language == "cuda" and "__grid_constant__" not in p.text:
            return "passes a CUtensorMap: declare the parameter const __grid_constant__ CUtensorMap NAME"
        return None
    if p.kind == "tmap":
        return "is not a tensor map, but the parameter is a 128-byte CUtensorMap (pass tmap:NAME)"
    if arg.kind in ("tensor", "scratch"):
        if language == "cuda" and p.kind != "pointer" and p.kind != "unknown":
            return "passes a device pointer; the parameter should be a pointer (e.g. const __nv_bfloat16* A)"
        if language == "ptx" and p.size not in (None, 8):
            return f"passes an 8-byte device pointer; the parameter holds {p.size} bytes (use .param .u64)"
        return None
    want_size = 8 if arg.type in ("i64", "u64", "f64") else 4
    want_float = arg.type in ("f32", "f64")
    if p.kind == "pointer":
        return f"passes a {arg.type} scalar but the parameter is a pointer"
    if p.size is not None and p.size != want_size:
        return f"passes a {want_size}-byte {arg.type} but the parameter holds {p.size} bytes"
    if p.kind in ("int", "float") and (p.kind == "float") != want_float and not p.text.lstrip().startswith(".param .b"):
        return f"passes a {arg.type} but the parameter is {'a float' if p.kind == 'float' else 'an integer'}"
    return None


def _check_entries(plan: LaunchPlan, language: str, source: str, warnings: list[str]) -> list[FormatIssue]:
    entries: dict[str, Entry] = ptx_entries(source) if language == "ptx" else cuda_kernels(source)
    code = blank_comments(source, strings=True)
    spelled = ".entry" if language == "ptx" else 'extern "C" __global__ void'
    issues: list[FormatIssue] = []
    at_file_scope = _FileScope(code, entries)  # read once for every launch (64 launches of one name: one scan)
    for launch in plan.launches:
        entry = entries.get(launch.kernel)
        if entry is None and language == "cuda" and at_file_scope(launch.kernel):
            warnings.append(f"kernel {launch.kernel}: its __global__ declaration was not recognised (a macro?); "
                            "its parameters were not checked against the plan")
            continue
        if entry is None:
            found = ", ".join(entries) or "none"
            issues.append(FormatIssue(line=launch.line, kind="plan", message=f"kernel '{launch.kernel}' is not defined as "
                                      f"{spelled} {launch.kernel}(...) in the file (kernels found: {found})"))
            continue
        if not entry.defined and not (language == "cuda" and at_file_scope(launch.kernel)):
            # a prototype alone compiles (ptxas takes `.extern .entry`, nvcc a __global__ prototype) to a module without
            # the kernel; in CUDA a macro may write the definition where the scan cannot see it
            issues.append(FormatIssue(line=entry.line, kind="plan", message=f"kernel {entry.name} is only declared here "
                                      "(its parameter list ends in ';') and never defined, so the compiled module has "
                                      f"no kernel {entry.name} for the launch on line {launch.line}: give it a body"))
            continue
        if language == "cuda" and not entry.extern_c:
            issues.append(FormatIssue(line=entry.line, kind="source", message=f"kernel {entry.name} is not extern \"C\": its name "
                                      f"would be mangled; declare it extern \"C\" __global__ void {entry.name}(...)"))
        if len(entry.params) != len(launch.args):
            issues.append(FormatIssue(line=entry.line, kind="plan", message=f"kernel {entry.name} has {len(entry.params)} "
                                      f"parameters but the launch on line {launch.line} passes {len(launch.args)} "
                                      f"args ({', '.join(_spell(a) for a in launch.args) or 'none'}); they must match one to one"))
            continue
        for i, (arg, p) in enumerate(zip(launch.args, entry.params)):
            problem = _param_problem(arg, p, language)
            if problem:
                issues.append(FormatIssue(line=p.line, kind="plan", message=f"parameter {i + 1} of {entry.name} ({p.text}): "
                                          f"args[{i}] = \"{_spell(arg)}\" {problem}"))
    return issues


class _FileScope:
    """Whether a name appears outside function bodies and outside the recognised kernels' parameter lists, as when a
    macro such as KERNEL(name) declares the kernel. The braces and kernel spans are read once per file and each
    name's answer kept: the plan's launches asked one scan of the whole file each (64 launches: 9.5 s on 385 KB)."""

    def __init__(self, code: str, kernels: dict[str, Entry]):
        self.code = code
        self.opens = [m.start() for m in re.finditer(r"\{", code)]
        self.closes = [m.start() for m in re.finditer(r"\}", code)]
        self.in_kernel = Ranges((a, b + 1) for a, b in (k.span for k in kernels.values()))
        self.known: dict[str, bool] = {}

    def __call__(self, name: str) -> bool:
        if name not in self.known:
            self.known[name] = any(
                # as many braces opened as closed before it (bisect: a count of the text before every mention is
                # quadratic)
                bisect.bisect_left(self.opens, m.start()) == bisect.bisect_left(self.closes, m.start())
                and m.start() not in self.in_kernel
                for m in re.finditer(rf"\b{re.escape(name)}\b", self.code))
        return self.known[name]


def _spell(a: Arg) -> str:
    return a.ref if a.kind == "tensor" else f"{a.kind}:{a.ref}" if a.kind in ("scratch", "tmap") else f"{a.type}:{a.ref}"


def _plan_issues(pairs: list[tuple[int | None, str]]) -> list[FormatIssue]:
    """The plan's issues, as plan_toml.py and plan_resolve.py collect them: (line, message)."""
    return [FormatIssue(line=line, message=msg, kind="plan") for line, msg in pairs]


def _not_utf8(source: str) -> list[FormatIssue]:
    if (found := unencodable(source)) is None:
        return []
    line, char = found
    return [FormatIssue(line=line, kind="source", message=f"the file holds a character UTF-8 cannot encode ({char}, "
                                                          "a lone surrogate): write the file as UTF-8 text")]


def _too_big(source: str) -> list[FormatIssue]:
    if len(source) > MAX_SOLUTION_CHARS:
        return [FormatIssue(line=None, kind="source", message=f"the solution file is {len(source)} characters long (at most "
                                                              f"{MAX_SOLUTION_CHARS}): write the kernels, not unrolled copies of them")]
    kernels = max(source.count(".entry"), source.count("__global__"))
    if kernels > MAX_KERNELS:
        return [FormatIssue(line=None, kind="source", message=f"the file defines {kernels} kernels (at most {MAX_KERNELS})")]
    return []


def _as_workload(workload: Workload | str | None) -> Workload | None:
    """A workload given by its id (`ptxbench workloads`), as LocalEvaluator.evaluate takes it, is looked up: the plan
    checks read its symbols and tensors (an unknown id raises KeyError, listing the known ones)."""
    if isinstance(workload, str):
        from ptxbench.workloads.registry import get_workload

        return get_workload(workload)
    return workload


def parse_solution(source: str, workload: Workload | str | None = None,
                   arch: str = DEFAULT_ARCH) -> Solution | list[FormatIssue]:
    """Parse and check a solution file: its plan, the plan against the workload (when given: a Workload or its id) and
    the kernels' signatures, and the language policy. Returns the Solution, or every issue found.
    Never raises on model text: a file the checks cannot read is an issue of the file."""
    workload = _as_workload(workload)
    if refused := _too_big(source) or _not_utf8(source):
        return refused
    try:
        found = _parse_solution(source, workload, arch)
    except (RecursionError, MemoryError, ArithmeticError, LookupError, TypeError, ValueError) as exc:
        # which check gave up is not known here; the message names the plan first and this has always been
        # graded PLAN_ERROR, so it stays a plan issue
        return [FormatIssue(line=None, kind="plan", message=f"the plan or the code could not be read ({type(exc).__name__}: "
                                                            f"{str(exc)[:200]}); simplify that part of the file")]
    if isinstance(found, list):
        found = [i if len(i.message) <= MAX_MESSAGE_CHARS else i.model_copy(update={"message": i.message[:MAX_MESSAGE_CHARS] + " ..."})
                 for i in found]
    return found


def _parse_solution(source: str, workload: Workload | None, arch: str) -> Solution | list[FormatIssue]:
    profile = get_arch(arch)
    parsed = parse_plan_block(source)
    issues = _plan_issues(parsed.issues)
    language = parsed.language
    if language == "cuda":
        issues += check_cuda_source(source)
    elif language == "ptx":
        issues += check_ptx_source(source, arch)
    warnings: list[str] = []
    if parsed.plan is not None and language is not None:
        issues += _check_entries(parsed.plan, language, source, warnings)
        if workload is not None:
            resolver = Resolver(workload, PLACEHOLDER_NUM_SMS, profile, parsed.lines)
            resolver.resolve(parsed.plan)
            issues += _plan_issues(resolver.issues)
            warnings += resolver.warnings
    if issues:
        issues = sorted(issues, key=lambda i: (i.line is None, i.line or 0))
        if len(issues) > MAX_ISSUES:  # a whole host program would bury the first, most useful lines
            more = len(issues) - MAX_ISSUES
            dropped = issues[MAX_ISSUES:]  # the summary keeps their kind, so the status does not depend on the cut
            kind = "plan" if any(i.kind == "plan" for i in dropped) else dropped[0].kind
            issues = issues[:MAX_ISSUES] + [FormatIssue(line=None, kind=kind, message=f"... and {more} more problems like these")]
        return issues
    return Solution(language=language, source=source, plan=parsed.plan, arch=arch, warnings=warnings)


def read_reply(reply_text: str, workload: Workload | str | None = None,
               arch: str = DEFAULT_ARCH) -> Solution | list[FormatIssue]:
    """extract_solution then parse_solution; the extraction's warnings are kept on the Solution."""
    extracted = extract_solution(reply_text)
    if isinstance(extracted, list):
        return extracted
    solution = parse_solution(extracted.source, workload, arch)
    if isinstance(solution, Solution):
        solution.warnings = extracted.warnings + solution.warnings
    return solution


def resolve_plan(plan: LaunchPlan, workload: Workload | str, num_sms: int, arch: str | ArchProfile = DEFAULT_ARCH,
                 lines: KeyLines | None = None, cluster_capacity: Mapping[int, int] | None = None) -> ResolvedPlan:
    """Evaluate every expression of the plan for this workload and SM count. Raises PlanError (with
    line-numbered issues) when a value is out of range; a plan that parse_solution accepted only
    fails here if it depends on num_sms in a way that breaks on this GPU. `cluster_capacity` (cluster
    size -> clusters resident at once, measured by tools/gpu/occupancy.py) sets the `max_clusters`
    symbol; without it the symbol is the bound plan_resolve.guaranteed_clusters proves."""
    profile = get_arch(arch) if isinstance(arch, str) else arch
    resolver = Resolver(_as_workload(workload), num_sms, profile, lines, cluster_capacity)
    try:
        resolved = resolver.resolve(plan)
    except (RecursionError, MemoryError, ArithmeticError, LookupError, TypeError, ValueError) as exc:
        if isinstance(exc, PlanError):
            raise
        raise PlanError([FormatIssue(line=None, kind="plan", message=f"the plan could not be resolved ({type(exc).__name__}: "
                                                                     f"{str(exc)[:200]})")]) from None
    if resolved is None:
        raise PlanError(_plan_issues(resolver.issues))
    return resolved
