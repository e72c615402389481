"""Compile a solution: CUDA -> PTX with nvcc (for `cuda`), PTX -> cubin with ptxas, then a SASS scan.

A kernel that does not compile is a CompileResult with status "error" and (line, message) issues
in the solution file's own line numbers. Exceptions are kept for a missing toolchain (ToolchainError) and for a
compiler killed from outside twice (CompilerKilled: a shutdown or supervisor's signal, compiled once more first and
never cached). The compilers only compile: nothing the model wrote runs on the host.
"""
from __future__ import annotations

from ptxbench.workloads.arch import DEFAULT_ARCH
import dataclasses
import functools
import hashlib
import os
import re
import shutil
import time
from importlib import resources
from pathlib import Path

from ptxbench.workloads.schema import Workload

from .cache import CompileCache, cache_key
from .compile_log import (loc_line_map, nvcc_failure, parse_nvcc_log, parse_ptxas_log, static_ptx_checks,
                          system_call_issue, system_calls, with_source_text, without_host_paths)
from .cubin_symbols import undefined_functions
from .jail import JAIL_PATH, Limits, Workspace, jail_mode, run_in_jail
from .limit_hit import kernels_limit_hit, limit_hit, smallest_ptx
from .gpu.module_state import module_globals
from .module_data import ModuleData
from .param_reach import param_writes
from .jail_deps import outside_includes
from .results import CompileIssue, CompileResult
from .solution.source_scan import unencodable
from .profile.lineinfo import annotate_ptx
from .sass import DisassemblyLimitHit, disassemble_lines, opcode_histogram, strip_ptx_comments, target_presence
from .sass_features import sass_features
from .regpool import setmaxnreg_moves, spills_by_side
from .sass_lines import sass_by_line
from .textcap import LOG_CHARS
from .toolchain import ProcResult, Toolchain, ToolchainError, find_toolchain, which_host_compiler

PTX_NAME = "solution.ptx"
CU_NAME = "solution.cu"
# Bumped when what a compile records changes (the cache key carries it): 2 = per-line SASS, SASS features;
# 3 = ptxas's performance-loss advisories as warnings; 4 = a compiler killed from outside is no result (no longer
# recorded as the source's compile error); 5 = device system calls (.extern functions) refused; 6 = a cubin or an nvcc
# PTX past MAX_CUBIN_BYTES / MAX_GENERATED_PTX_BYTES refused; 7 = a limit hit read from the tools' own lines only (the
# model's text quoted in a diagnostic made a compile error read as one); 8 = ptxas's `Memory allocation failure` is
# the memory limit's verdict (it was recorded as the source's ordinary compile error); 9 = a compiler that crashed
# (SIGSEGV, SIGBUS, SIGABRT) under the address-space limit is the memory limit's verdict (it was `ptxas exited with
# status 139`), and a limit the smallest kernel hits too is no verdict (LimitsBelowTheTool, an infra error); 10 = a
# module variable's address let out of its bytes refused (module_data.py); 11 = a write through a kernel parameter's
# address refused (param_reach.py); 12 = an address's bits computed on (tested, split, looked up) refused, and a
# register named without `%` read as one (address_use.py, module_data._Unprefixed).
RECORD_VERSION = 12
# Wall-clock backstops; the jail's CPU limit per process (tools/jail.py Limits) usually ends a runaway first.
PTXAS_TIMEOUT_S = 60.0
NVCC_TIMEOUT_S = 120.0
# A short file can ask for a huge output: `.global .b8 x[127000000] = {1};` (130 characters) is a 127 MB cubin, all of
# it read, cached and sent to a GPU worker, and each such turn pushes honest entries out of the bounded cache. The
# largest reference cubin is 1.4 MB and nvcc's PTX of it a few MB.
MAX_CUBIN_BYTES = 16 * 2**20
MAX_GENERATED_PTX_BYTES = 32 * 2**20


def ptxas_flags(arch: str) -> list[str]:
    # -arch on the command line: `.target` in the file alone is not enough (FACTS.md).
    return [f"-arch={arch}", "-v", "--warn-on-spills", "-lineinfo"]


def nvcc_flags(arch: str) -> list[str]:
    virt = arch.replace("sm_", "compute_")
    # Exact math (no --use_fast_math): the kernel must match the reference as written. No caret: the host compiler
    # would print the line a diagnostic names, read from whatever file a `#line` named. The -I pair stays last (the
    # cache key drops its path).
    return ["-ptx", f"-gencode=arch={virt},code={arch}", "-std=c++17", "-O3", "-lineinfo",
            "-Xcompiler", "-fno-diagnostics-show-caret", "-I", str(include_dir())]


def include_dir() -> Path:
    """prompts/include (the ptxbench/*.cuh inline-PTX wrappers), resolved from the installed package."""
    return Path(str(resources.files("ptxbench.prompts") / "include"))


@functools.cache
def project_headers() -> frozenset[str]:
    """The headers a solution may include, by their name under the include folder (`ptxbench/wgmma.cuh`)."""
    root = include_dir()
    return frozenset(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def _include_digest() -> str:
    """Hash of the wrapper headers: a changed header must not be served from the cache."""
    h = hashlib.sha256()
    root = include_dir()
    for p in sorted(root.rglob("*")) if root.is_dir() else []:
        if p.is_file():
            h.update(str(p.relative_to(root)).encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


def host_compiler_identity() -> str:
    """The gcc nvcc runs in the jail (by name, from the jail's PATH) as its real path and modification time: a `cuda`
    verdict is also gcc's (its preprocessing, its headers, whether this nvcc accepts its version), so another or an
    upgraded gcc must not be served the old one's cached verdicts."""
    gcc = shutil.which("gcc", path=JAIL_PATH)
    if gcc is None:
        return ""
    real = os.path.realpath(gcc)
    return f"{real} {os.stat(real).st_mtime_ns}"


def _families_for(workload: Workload | str | None, arch: str) -> list[str] | None:
    if workload is None:
        return None
    if isinstance(workload, str):
        from ptxbench.workloads.registry import get_workload

        workload = get_workload(workload)
    return workload.targets.get(arch)


def _select_targets(result: CompileResult, families: list[str] | None) -> CompileResult:
    if families is None:
        return result
    return result.model_copy(update={"targets": {k: v for k, v in result.targets.items() if k in families}})


def _error(arch: str, language: str, log: str, errors: list[CompileIssue], tc: Toolchain, **kw) -> CompileResult:
    return CompileResult(status="error", arch=arch, language=language, errors=errors, log=log.strip(), tools=tc.tools(),
                         jail=jail_mode(), **kw)


# Signals that only come from outside the jail (a shutdown, a terminal, a supervisor), never from its limits (CPU time:
# SIGXCPU / SIGKILL, file size: SIGXFSZ) nor from a compiler crashing on its input (SIGSEGV, SIGABRT).
OUTSIDE_SIGNALS = {1: "SIGHUP", 2: "SIGINT", 15: "SIGTERM"}


class CompilerKilled(ToolchainError):
    """A compiler was killed by a signal from outside the jail: the machine's event, not the source's verdict."""


def _jailed(tool: str, tc: Toolchain, argv: list[str], workdir: Path, timeout_s: float, **kw) -> ProcResult:
    """One compiler run in the jail; CompilerKilled when it died of an OUTSIDE_SIGNALS signal (Python's -N, or a
    wrapper's 128 + N), so no run's verdict, fallback or cache entry ever rests on such a kill."""
    res = run_in_jail(tc, argv, workdir, timeout_s, **kw)
    code = res.returncode
    signum = -code if code < 0 else code - 128 if code > 128 else 0
    if not res.timed_out and signum in OUTSIDE_SIGNALS:
        raise CompilerKilled(f"{tool} was killed by {OUTSIDE_SIGNALS[signum]} from outside the compiler's jail")
    return res


def _workdir_free(log: str, workdir: Path) -> str:
    return log.replace(str(workdir) + "/", "")


def _ptxas(ptx_text: str, arch: str, tc: Toolchain, workdir: Path, timeout_s: float) -> ProcResult:
    (workdir / PTX_NAME).write_text(ptx_text)
    return _jailed("ptxas", tc, [tc.ptxas.path, *ptxas_flags(arch), PTX_NAME, "-o", "kernel.cubin"], workdir, timeout_s,
                   max_chars=LOG_CHARS)


def _smallest_assembles(arch: str, tc: Toolchain):
    """A probe for kernels_limit_hit: ptxas, with the flags of every compile, on one empty kernel in the jail."""
    return lambda workdir: _ptxas(smallest_ptx(arch), arch, tc, workdir, PTXAS_TIMEOUT_S).returncode == 0


def _smallest_compiles(arch: str, tc: Toolchain):
    """A probe for kernels_limit_hit: nvcc, with the flags of every compile, on one empty kernel in the jail."""
    def probe(workdir: Path) -> bool:
        (workdir / CU_NAME).write_text('extern "C" __global__ void smallest() {}\n')
        return _jailed("nvcc", tc, [tc.nvcc.path, *nvcc_flags(arch), CU_NAME, "-o", "smallest.ptx"], workdir,
                       NVCC_TIMEOUT_S, extra_roots=(include_dir(),)).returncode == 0
    return probe


def _declared_line(ptx_code: str, name: str) -> int | None:
    """The line of the first `.func` that names `name` (its prototype), if the text has one."""
    want = re.compile(r"\b" + re.escape(name) + r"\s*\(")
    for m in re.finditer(r"\.func\b[^;{]*", ptx_code):  # each declaration once: linear in the text
        if want.search(m.group()):
            return ptx_code.count("\n", 0, m.start()) + 1
    return None


def _assemble(ptx_text: str, arch: str, language: str, tc: Toolchain, workdir: Path, line_map=None,
              timeout_s: float = PTXAS_TIMEOUT_S, source: str | None = None):
    """ptxas + SASS scan. Returns (result without cubin_path, cubin bytes or None, cacheable).

    A `ptx` solution is assembled with a `.loc` on each instruction's own line (tools/profile/lineinfo.py:
    no line added, so ptxas's line numbers stay the model's); should that annotated module fail, the
    model's own text is assembled instead, so line info never changes a verdict."""
    cubin_path = workdir / "kernel.cubin"
    code = strip_ptx_comments(ptx_text, blank_strings=True)  # the text as ptxas reads it, strings no statements
    data = ModuleData(code)  # read once: its writes checked now, its declarations matched with the cubin's after
    pre = ((static_ptx_checks(code, arch) if language == "ptx" else []) + system_calls(code, language)
           + data.unreadable(language, line_map) + data.register_clashes(language, line_map)
           + data.reach(language, line_map)
           + param_writes(data, language, line_map))
    annotated = annotate_ptx(ptx_text, PTX_NAME) if language == "ptx" and not pre else ptx_text
    res = _ptxas(annotated, arch, tc, workdir, timeout_s)
    # not after a limit hit: the model's own text hits it again, and a CPU bomb would cost twice the limit
    if annotated != ptx_text and (res.returncode != 0 or not cubin_path.is_file()) and not limit_hit("ptxas", res, timeout_s):
        res = _ptxas(ptx_text, arch, tc, workdir, timeout_s)
    log = _workdir_free(res.output, workdir)
    errors, warnings, kernels = parse_ptxas_log(log, line_map)
    sha = hashlib.sha256(ptx_text.encode()).hexdigest()
    # cached: the same file hits the same limit again (not the clock); one the smallest module hits too: infra
    if limit := kernels_limit_hit("ptxas", res, timeout_s, arch, tc, _smallest_assembles(arch, tc)):
        return _error(arch, language, log, pre + [CompileIssue(message=limit)], tc, ptx_sha256=sha), None, not res.timed_out
    if res.returncode != 0 or pre or not cubin_path.is_file():
        if not errors and not pre:
            errors = [CompileIssue(message=f"ptxas exited with status {res.returncode}: "
                                           f"{without_host_paths(log[-2000:]) or 'no output'}")]
        targets = target_presence(arch, code, {})
        return _error(arch, language, log, pre + errors, tc, warnings=warnings, targets=targets, ptx_sha256=sha), None, True
    if (size := cubin_path.stat().st_size) > MAX_CUBIN_BYTES:
        issue = CompileIssue(message=_too_large("the cubin ptxas made", size, MAX_CUBIN_BYTES))
        return _error(arch, language, log, [issue], tc, warnings=warnings, ptx_sha256=sha), None, True
    cubin = cubin_path.read_bytes()
    symbols = module_globals(cubin)
    if unread := data.unread([g.name for g in symbols]) or data.oversized([(g.name, g.size) for g in symbols]):
        return _error(arch, language, log, unread, tc, warnings=warnings, ptx_sha256=sha), None, True
    if undefined := undefined_functions(cubin):  # a prototype the PTX check did not read as .extern
        issues = [system_call_issue(name, _declared_line(code, name) if language == "ptx" else None)
                  for name in undefined]
        return _error(arch, language, log, issues, tc, warnings=warnings, targets=target_presence(arch, code, {}),
                      ptx_sha256=sha), None, True
    try:
        listing = disassemble_lines(cubin_path, CU_NAME if language == "cuda" else PTX_NAME, source or ptx_text, tc,
                                    generated_ptx=ptx_text if language == "cuda" else None)
    except DisassemblyLimitHit as hit:  # the model's cubin, the same limits: the same hit again (not the clock)
        return _error(arch, language, log, [CompileIssue(message=str(hit))], tc, warnings=warnings,
                      ptx_sha256=sha), None, not hit.timed_out
    functions = {name: opcode_histogram(insns) for name, insns in listing.items()}
    for name, k in kernels.items():
        insns = listing.get(name, [])
        k.sass_opcodes = functions.get(name, {})
        k.sass_lines = [i.line for i in insns]
        k.sass_features = sass_features(insns)
        moves = setmaxnreg_moves(insns)
        k.setmaxnreg_dec, k.setmaxnreg_inc = moves.dec, moves.inc
        k.spills_after_dec, k.spills_after_inc = spills_by_side(insns)
    if not kernels:
        warnings.append(CompileIssue(message="the module has no .entry kernel", severity="warning"))
    result = CompileResult(
        status="ok", arch=arch, language=language, warnings=warnings, log=log, kernels=kernels,
        targets=target_presence(arch, code, functions), sass_by_line=sass_by_line(listing), ptx_sha256=sha,
        tools=tc.tools(), jail=jail_mode(),
    )
    return result, cubin, True


def _too_large(what: str, size: int, limit: int) -> str:
    return (f"{what} is {size / 2**20:.1f} MB, past the limit of {limit / 2**20:g} MB: initialised .global or .const "
            "arrays are written out in full (fill a large table in the kernel, or ask the plan for a scratch buffer)")


def _cuda_to_ptx(source: str, arch: str, tc: Toolchain, workdir: Path, timeout_s: float) -> tuple[str | None, CompileResult | None, bool]:
    """(generated PTX, None, _) or (None, error result, cacheable)."""
    if tc.nvcc is None:
        raise ToolchainError("nvcc was not found: `cuda` solutions cannot be compiled here (pip install nvidia-cuda-nvcc)")
    if which_host_compiler() is None:
        raise ToolchainError("nvcc needs a host C++ compiler (g++) to compile `cuda` solutions, and none is installed")
    (workdir / CU_NAME).write_text(source)
    if jail_mode() == "limits":  # no filesystem view here: refuse includes outside the allowed roots first
        refused = outside_includes(tc, workdir, CU_NAME, arch, [include_dir()], timeout_s, nvcc_flags(arch))
        if refused is not None:
            return None, _error(arch, "cuda", "", [refused], tc), True
    out = workdir / "from_cuda.ptx"
    res = _jailed("nvcc", tc, [tc.nvcc.path, *nvcc_flags(arch), CU_NAME, "-o", str(out)], workdir, timeout_s,
                  extra_roots=(include_dir(),), max_chars=LOG_CHARS)
    log = _workdir_free(res.output, workdir)
    if limit := kernels_limit_hit("nvcc", res, timeout_s, arch, tc, _smallest_compiles(arch, tc)):
        return None, _error(arch, "cuda", log, [CompileIssue(message=limit)], tc), not res.timed_out
    if res.returncode != 0 or not out.is_file():
        errors, warnings = parse_nvcc_log(log, CU_NAME, project_headers())
        if out.is_file() and "ptxas" in log:
            # nvcc checks its PTX with ptxas; map those errors (inline asm) back through `.loc`.
            ptx_errors, ptx_warnings, _ = parse_ptxas_log(log, loc_line_map(out.read_text(), CU_NAME))
            errors = [e for e in errors if "ptxas" not in e.message] + ptx_errors
            warnings += ptx_warnings
        errors = errors or [nvcc_failure(res.returncode)]
        return None, _error(arch, "cuda", log, errors, tc, warnings=warnings), True
    if (size := out.stat().st_size) > MAX_GENERATED_PTX_BYTES:  # never read in, assembled or cached
        return None, _error(arch, "cuda", log, [CompileIssue(message=_too_large("the PTX nvcc made", size,
                                                                                  MAX_GENERATED_PTX_BYTES))], tc), True
    return out.read_text(), None, True


def _build(source: str, language: str, arch: str, tc: Toolchain, timeout_s: float | None):
    """(result, cubin bytes or None, cacheable, the PTX assembled) of one compile in a fresh workspace."""
    with Workspace() as workdir:  # removed afterwards, a timed-out compiler's temporary files included
        ptx_text, line_map, failed, cacheable = source, None, None, True
        if language == "cuda":
            ptx_text, failed, cacheable = _cuda_to_ptx(source, arch, tc, workdir, timeout_s or NVCC_TIMEOUT_S)
            line_map = loc_line_map(ptx_text, CU_NAME) if ptx_text is not None else None
        if failed is not None:
            return failed, None, cacheable, ptx_text
        result, cubin, cacheable = _assemble(ptx_text, arch, language, tc, workdir, line_map, timeout_s or PTXAS_TIMEOUT_S,
                                             source=source)
        return result, cubin, cacheable, ptx_text


def _build_verdict(source: str, language: str, arch: str, tc: Toolchain, timeout_s: float | None):
    """_build, once more after a kill from outside (a second one is INFRA_ERROR). A compiler output the parsers
    cannot read (ValueError: a 5,000-digit number the model wrote) is the source's error, not an exception; it is
    not cached."""
    try:
        try:
            return _build(source, language, arch, tc, timeout_s)
        except CompilerKilled:  # a kill from outside says nothing about the source
            return _build(source, language, arch, tc, timeout_s)
    except ValueError as exc:  # UnicodeError included; ToolchainError is not one
        issue = CompileIssue(message=f"the compiler's output for this file could not be read ({type(exc).__name__}: "
                                     f"{str(exc)[:200]})")
        return _error(arch, language, "", [issue], tc), None, False, None


def compile_source(
    source: str,
    language: str,
    arch: str = DEFAULT_ARCH,
    workload: Workload | str | None = None,
    *,
    use_cache: bool = True,
    cache: CompileCache | None = None,
    timeout_s: float | None = None,
) -> CompileResult:
    """Compile a `ptx` or `cuda` solution for `arch`; the cubin lands in the content-addressed cache.

    `workload` (a Workload or its id) narrows `targets` to the families it asks for on `arch`.
    `use_cache=False` recompiles even when a stored result exists (and stores the new one).
    """
    if language not in ("ptx", "cuda"):
        raise ValueError(f"language must be 'ptx' or 'cuda', not {language!r}")
    tc = find_toolchain(arch)
    cache = cache or CompileCache()
    families = _families_for(workload, arch)
    if language == "cuda" and not source.strip():  # nvcc makes an empty module of it: refused as ptxas refuses an empty .ptx
        # (before the cache, which may hold an earlier "ok" for it)
        return _error(arch, language, "", [CompileIssue(line=1, message="the file is empty: no CUDA source to compile")], tc)
    # the limits too: a limit hit is cached, and is the source's verdict only under the limits it was hit under
    options: dict = {"ptxas": ptxas_flags(arch), "jail": jail_mode(), "limits": dataclasses.asdict(Limits()),
                     "record": RECORD_VERSION}
    if language == "cuda":
        options |= {"nvcc": nvcc_flags(arch)[:-2], "include": _include_digest(), "host": host_compiler_identity()}
    key = cache_key(source, language, arch, options, tc.tools())
    if use_cache and (hit := cache.get(key)) is not None:
        return _select_targets(hit, families)
    if found := unencodable(source):  # no file can hold it: the source's error, before any compiler runs
        return _error(arch, language, "", [CompileIssue(line=found[0], message=f"the file holds a character UTF-8 "
                                                        f"cannot encode ({found[1]}, a lone surrogate)")], tc)
    start = time.perf_counter()
    result, cubin, cacheable, ptx_text = _build_verdict(source, language, arch, tc, timeout_s)
    result.seconds = round(time.perf_counter() - start, 4)
    result.errors = with_source_text(result.errors, source)
    if cacheable:
        result = cache.put(key, result, cubin, ptx_text if language == "cuda" else None)
    return _select_targets(result, families)

