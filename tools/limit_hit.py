"""Whether the compiler jail's limits (tools/jail.py Limits: CPU time, address space, file size; the caller's wall
clock) stopped a tool that read model text or its output (nvcc, ptxas, nvdisasm), read from the tool's exit status
and its own lines only: nvcc quotes the model's text in its diagnostics, and a phrase in it must not read as a
limit hit."""
from __future__ import annotations

import dataclasses
import re
import signal
from collections.abc import Callable
from pathlib import Path

from .jail import Limits, Workspace, jail_mode
from .toolchain import ProcResult, Toolchain, ToolchainError

# A diagnostic located in a file: `solution.cu(3): error: ...` (nvcc's front end), `solution.cu:1:2: error: ...` (the
# host compiler's preprocessing), `ptxas solution.ptx, line 5; error : ...`; its message may quote the model's text
_LOCATED = re.compile(r"^(?:[^\s(][^(]*\(\d+\): |[^\s:][^:]*:\d+:(?:\d+:)? |ptxas\s+.+?, line \d+; )")
_CARET = re.compile(r"^\s*\^\s*$")
# ptxas's (and nvdisasm's) words for an allocation the address-space limit refused, on a fatal line of its own
_TOOL_OUT_OF_MEMORY = re.compile(r"^\w+ fatal\s*: Memory allocation failure$", re.MULTILINE)
# A tool that dies of one of these under the address-space limit most likely hit it (an allocation it did not check,
# a stack or mapping refused): as Python's -N or a shell's 128 + N, or nvcc's word for a child (`'cicc' died due to
# signal 11`), or the dynamic loader's refused mapping
_CRASH_SIGNALS = (signal.SIGSEGV, signal.SIGBUS, signal.SIGABRT)
_CRASH_SAID = re.compile(r"^(?:Segmentation fault|Bus error|Aborted)\b|died due to signal (?:%s)\b|failed to map segment"
                         % "|".join(str(int(s)) for s in _CRASH_SIGNALS), re.MULTILINE)


def own_lines(output: str) -> str:
    """The lines of a tool's output that hold no text of the model's: nvcc's front end quotes it in its diagnostics
    (a static_assert's or #error's message, the source line under each, indented), and a raw string's line breaks
    carry such a message over unindented lines of their own, even a blank one or a caret; the source line and caret
    always close a diagnostic, so only what follows the last caret can be the tool's own, less located and indented
    lines (the host compiler's and ptxas's diagnostics, which have no caret)."""
    lines = output.splitlines()
    carets = [i for i, line in enumerate(lines) if _CARET.match(line)]
    tail = lines[carets[-1] + 1:] if carets else lines
    return "\n".join(line for line in tail if line[:1] not in (" ", "\t") and not _LOCATED.match(line))


def limit_hit(tool: str, res: ProcResult, timeout_s: float) -> str:
    """Why the jail stopped a tool ("" when it did not): wall time, CPU time, memory or output size. The phrases are
    read in the tools' own lines only (own_lines), and only of a tool that failed: a limit never lets one succeed."""
    limits, out = Limits(), own_lines(res.output) if res.returncode != 0 else ""
    if res.timed_out:
        return f"{tool} timed out after {timeout_s:g} s"
    if res.returncode in (-24, 152, -9, 137) or "CPU time limit" in out or "signal 24" in out or "Killed signal" in out:
        return (f"{tool} ran past the compiler's CPU-time limit ({limits.cpu_s} s per process): fewer template "
                "instantiations, entry points or unrolled loops compile faster")
    if res.returncode in (-25, 153) or "File size limit" in out or "signal 25" in out:
        return f"{tool} wrote past the compiler's output-size limit ({limits.file_size_mb} MB per file)"
    if ("memory exhausted" in out or "out of memory" in out.lower() or "std::bad_alloc" in out
            or "Cannot allocate memory" in out or _TOOL_OUT_OF_MEMORY.search(out)):
        return f"{tool} ran out of its memory limit ({limits.address_space_mb} MB address space)"
    if crash := _crash(res.returncode) or ((said := _CRASH_SAID.search(out)) and said.group(0)):
        return (f"{tool} crashed ({crash}), most likely at its memory limit ({limits.address_space_mb} MB address "
                "space): a smaller kernel (fewer instructions, unrolled loops or entry points) needs less; a small "
                "module that crashes it holds a construct it cannot assemble (ptxas crashes on a store to parameter "
                "space through a register, for one)")
    return ""


def _crash(returncode: int) -> str:
    """The crash signal's name of an exit status (Python's -N or a shell's 128 + N), "" for any other."""
    signum = -returncode if returncode < 0 else returncode - 128 if returncode > 128 else 0
    return signal.Signals(signum).name if signum in _CRASH_SIGNALS else ""


_SMALLEST_FITS: dict[tuple, bool] = {}  # the probes that passed


class LimitsBelowTheTool(ToolchainError):
    """The jail's limits stop a tool on the smallest input too: the machine's configuration, not the source's verdict
    (INFRA_ERROR, never cached)."""


def smallest_ptx(arch: str) -> str:
    """The smallest module a tool's probe reads: one empty kernel."""
    from ptxbench.workloads.arch import get_arch

    return (f".version {get_arch(arch).ptx_version_min}\n.target {arch}\n.address_size 64\n"
            ".visible .entry smallest()\n{\n ret;\n}\n")


def smallest_fits(tool: str, arch: str, tc: Toolchain, probe: Callable[[Path], bool], variant: str = "") -> bool:
    """Whether `tool` still runs on the smallest input under the jail's current limits: `probe(workdir)` in a fresh
    Workspace; a pass is remembered per tool (and `variant`: its options), arch, limits and jail mode in a process."""
    key = (tool, getattr(tc, tool).path, variant, arch, dataclasses.astuple(Limits()), jail_mode())
    if key in _SMALLEST_FITS:
        return True
    with Workspace(prefix="ptxbench-smallest-") as workdir:
        fits = probe(workdir)
    if fits:  # a failed probe is asked again: one that failed by chance (a loaded machine) never turns every verdict
        _SMALLEST_FITS[key] = True  # into an infra error for the rest of the process
    return fits


def kernels_limit_hit(tool: str, res: ProcResult, timeout_s: float, arch: str, tc: Toolchain,
                      probe: Callable[[Path], bool], variant: str = "") -> str:
    """limit_hit, when it is the kernel's verdict. A limit the smallest kernel hits too (an address space below what
    the tool needs to start: nvdisasm needs about 82 MB for any cubin, ptxas about 67 MB) says nothing of this kernel:
    LimitsBelowTheTool (INFRA_ERROR, never cached), naming the limits. Only a failed run pays for the probe."""
    limit = limit_hit(tool, res, timeout_s)
    if limit and not res.timed_out and not smallest_fits(tool, arch, tc, probe, variant):
        raise LimitsBelowTheTool(f"the compiler jail's limits ({dataclasses.asdict(Limits())}; $PTXBENCH_JAIL_AS_MB, "
                                 f"$PTXBENCH_JAIL_CPU_S) are below what {tool} needs for any kernel: on the smallest "
                                 f"one too, {limit.split(': ', 1)[0]}")
    return limit
