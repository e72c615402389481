"""The `limits` jail's include check: with no filesystem view to hide host files, a `cuda` solution
is preprocessed first (host compiler, `-M -MG`, inside the jail's limits) and refused when any file
it would read lies outside the allowed roots.

`-MG` lists a missing header like an existing one, so the verdict never depends on whether a host
path exists, and the refusal names the path the model wrote, never text of the file. Existence
tests that leave no dependency (`__has_include`, `_Pragma("GCC dependency ...")`, and token pasting,
which builds either name) are refused by spelling. Both the host and the device pass of nvcc are
preprocessed (with and without __CUDA_ARCH__).
"""
from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

from .jail import SYSTEM_ROOTS, Limits, allowed_roots, run_in_jail
from .results import CompileIssue
from .solution.cuda_policy import ALLOWED_PRAGMAS, PRAGMA_OPERATOR, pragma_operator_allowed
from .solution.source_scan import LineIndex, blank_comments
from .toolchain import TOOL_NAMES, Toolchain, which_host_compiler

# No spelling check sees a name built by token pasting (CAT(__has_in, clude) is __has_include), so pasting is refused
# here too, as is C23's `__has_embed`. `##` may also be spelled `%:%:` or `??=??=`. Read with comments blanked (a
# `// ## stage 1` pastes nothing).
# `#pragma GCC dependency "path"` stats the path as its operator form does (a missing one stops the compiler): the
# source policy refuses the directive, but a compile need not have passed it (a BOM once hid a first line from it).
_EXISTENCE_TEST = re.compile(r"has_include|has_embed|(?:#|%:|\?\?=)[^\S\n]*(?:#|%:|\?\?=)"
                             r"|\bpragma\s+GCC\s+dependency\b", re.I)
# `_Pragma("GCC dependency ...")` stats a path (a missing one stops the compiler): an operator is let through only as
# the source policy allows it (cuda_policy.pragma_operator_allowed: a plain literal naming an allowed pragma, such as
# `_Pragma("unroll")`)
_SPLICE = re.compile(r"\\[ \t]*(?:\r\n|\r|\n)")  # gcc splices across white space after the backslash too


def _unspliced(source: str, pos: int) -> int:
    """The position in `source` of position `pos` of its spliced text."""
    for m in _SPLICE.finditer(source):
        if m.start() >= pos:
            break
        pos += m.end() - m.start()
    return pos


def _existence_test(code: str) -> int | None:
    """Where `code` (spliced, comments blanked) first tests a host path's existence, or builds a name that might."""
    found = [m.start()] if (m := _EXISTENCE_TEST.search(code)) else []
    found += [m.start() for m in PRAGMA_OPERATOR.finditer(code) if not pragma_operator_allowed(code, m.end())][:1]
    return min(found, default=None)


def _deps(text: str) -> list[str]:
    """Paths of a make rule (`x.o: a.h b\\ c.h \\`)."""
    body = text.split(":", 1)[1] if ":" in text else ""
    body = body.replace("\\\n", " ")
    return [p.replace("\\ ", " ") for p in re.findall(r"(?:\\ |[^\s])+", body)]


def _inside(path: str, workdir: Path, roots: list[Path]) -> bool:
    real = os.path.realpath(path if os.path.isabs(path) else workdir / path)
    return any(real == str(r) or real.startswith(str(r).rstrip("/") + "/") for r in roots)


def _nvcc_passes(tc: Toolchain, workdir: Path, name: str, nvcc_flags: list[str], extra_roots: list[Path],
                 timeout_s: float) -> list[list[str]]:
    """nvcc's own preprocessing commands for `name` (its -dryrun), each writing its dependencies instead of its output,
    and each also without the __CUDA_ARCH__ family (the host's view). A pass of the host compiler alone lacks what nvcc
    adds: its macros (__CUDACC_VER_MAJOR__, __CUDA_ARCH_LIST__...) and its forced include of cuda_runtime.h, so an
    #include behind `#ifdef __CUDACC_VER_MAJOR__` left no dependency there while nvcc read the file."""
    if tc.nvcc is None:
        return []
    res = run_in_jail(tc, [tc.nvcc.path, "-dryrun", *nvcc_flags, name, "-o", "dryrun.ptx"], workdir, timeout_s,
                      extra_roots=tuple(extra_roots))
    passes = []
    for line in res.output.splitlines():
        if line.startswith("#$ ") and " -E " in line:
            argv = shlex.split(line[3:])
            if "-o" in argv:
                del argv[argv.index("-o"):argv.index("-o") + 2]
            device = argv[:1] + ["-M", "-MG", "-MF", "deps.d"] + argv[1:]
            passes += [device, [a for a in device if not a.startswith("-D__CUDA_ARCH")]]
    return passes


def outside_includes(tc: Toolchain, workdir: Path, name: str, arch: str, extra_roots: list[Path],
                     timeout_s: float, nvcc_flags: list[str] = ()) -> CompileIssue | None:
    """None when every file the preprocessor would read lies in the allowed roots, else the refusal. With
    `nvcc_flags` (what compile.py runs nvcc with), nvcc's own preprocessing commands are checked too."""
    source = (workdir / name).read_text()
    # read as the compiler does, backslash-newlines spliced first (`__has_inc\` + `lude` is one name)
    if (at := _existence_test(blank_comments(_SPLICE.sub("", source)))) is not None:
        return CompileIssue(line=LineIndex(source)(_unspliced(source, at)), message="__has_include, token pasting (##), "
                            "#pragma GCC dependency "
                            f"and _Pragma other than _Pragma(\"{'/'.join(ALLOWED_PRAGMAS)}\") are not allowed in a "
                            "solution here: this compiler has no filesystem view to hide host paths from them")
    host = which_host_compiler()
    paths = [t.path for n in TOOL_NAMES if (t := getattr(tc, n)) is not None]
    roots = allowed_roots(paths, extra_roots) + [Path(os.path.realpath(r)) for r in SYSTEM_ROOTS if os.path.isdir(r)]
    roots.append(Path(os.path.realpath(workdir)))
    cuda_include = [f"-I{r / 'cu13' / 'include'}" for r in roots if r.name == "nvidia"]
    cuda_include += [f"-I{Path(p).parent.parent / 'include'}" for p in paths]
    arch_num = re.sub(r"\D", "", arch) + "0"
    passes = [[host, "-M", "-MG", "-MF", "deps.d", "-x", "c++", "-std=c++17", "-D__CUDACC__", "-D__NVCC__",
               *([device] if device else []), *cuda_include, *[f"-I{r}" for r in extra_roots], name]
              for device in ("", f"-D__CUDA_ARCH__={arch_num}")]
    passes += _nvcc_passes(tc, workdir, name, list(nvcc_flags), extra_roots, timeout_s) if nvcc_flags else []
    for argv in passes:
        (workdir / "deps.d").unlink(missing_ok=True)
        res = run_in_jail(tc, argv, workdir, timeout_s, extra_roots=tuple(extra_roots), max_chars=2000)
        deps = workdir / "deps.d"
        if not deps.is_file():  # stopped before its dependency list: say why, never what it printed
            why = "timed out" if res.timed_out else f"stopped with status {res.returncode}"
            return CompileIssue(message=f"the preprocessor {why} (limits: {Limits().cpu_s} s CPU, "
                                        f"{Limits().address_space_mb} MB); this file cannot be compiled")
        outside = [p for p in _deps(deps.read_text()) if not _inside(p, workdir, roots)]
        if outside:
            return CompileIssue(message=f"#include of '{outside[0]}' is not allowed: only the allowed headers "
                                        "(cuda.h, cuda_bf16.h, ..., ptxbench/*.cuh) may be included")
    return None
