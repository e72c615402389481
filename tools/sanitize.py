"""compute-sanitizer (memcheck, racecheck, synccheck, initcheck) on one candidate, findings for the model.

The tools run the same replay program as the profiler (tools/profile/replay.py), with exact-size
allocations (`--exact`, PYTORCH_NO_CUDA_MEMORY_CACHING=1) so a write one element past a buffer is
outside every allocation. A `ptx` solution is re-assembled with a `.loc` on every instruction
(tools/profile/lineinfo.py) and ptxas -lineinfo, so the sanitizer names the line of the solution
file; a `cuda` solution's cubin already carries nvcc's -lineinfo. Findings are deduplicated (one
per tool, kind, kernel and line, with the number of reports) and never raise: a tool that could
not run is an outcome with ok=False and the reason (`infra error, no sanitizer ran: ...` when the compiler's jail
could not start to assemble the line-annotated cubin).
"""
from __future__ import annotations

from ptxbench.workloads.arch import DEFAULT_ARCH
import glob
import os
import re
import shutil
import tempfile
import time
from pathlib import Path

from pydantic import BaseModel, Field

from .results import EvalResult, SanitizerFinding
from .textcap import short_name
from .toolchain import ToolchainError

TOOLS = ("memcheck", "racecheck", "synccheck", "initcheck")
SOLUTION_PTX = "solution.ptx"
ERROR_EXIT = 86
_PREFIX = re.compile(r"^========= ?")
_AT = re.compile(r"\bat (.+?)\+0x[0-9a-fA-F]+(?: in (.+?):(\d+))?\s*$")
_RACE = re.compile(r"(Error|Warning): Race reported between (\w+) access at (.+?)\+0x[0-9a-fA-F]+(?: in (.+?):(\d+))?\s*$")
_RACE2 = re.compile(r"and (\w+) access at (.+?)\+0x[0-9a-fA-F]+(?: in (.+?):(\d+))?(?: \[(\d+) hazards?\])?")
_THREAD = re.compile(r"by thread \(([\d,]+)\) in block \(([\d,]+)\)")
_SUMMARY = re.compile(r"(?:ERROR|RACECHECK) SUMMARY: (\d+) (?:error|hazard)")
# API errors worth reporting: the ones a faulting kernel causes.
_FAULTS = ("LAUNCH_FAILED", "ILLEGAL_ADDRESS", "MISALIGNED_ADDRESS", "ILLEGAL_INSTRUCTION", "HARDWARE_STACK_ERROR",
           "INVALID_PC", "ASSERT", "LAUNCH_TIMEOUT", "INVALID_ADDRESS_SPACE")
_NOISE = ("COMPUTE-SANITIZER", "Saved host backtrace", "Host Frame", "Device Frame", "Target application returned")


class SanitizeOutcome(BaseModel):
    ok: bool = Field(description="every requested tool ran to the end")
    error: str = ""
    findings: list[SanitizerFinding] = Field(default_factory=list)
    errors_reported: dict[str, int] = Field(default_factory=dict, description="tool -> errors in its summary line")
    feedback: str = ""
    seconds: float = 0.0

    def apply_to(self, result: EvalResult) -> EvalResult:
        result.sanitizer = self.findings
        if self.feedback:
            result.feedback = (result.feedback + "\n\n" + self.feedback).strip()
        result.seconds["sanitize"] = round(self.seconds, 3)
        return result


def _blocks(text: str) -> list[list[str]]:
    blocks, cur = [], []
    for raw in text.splitlines():
        if not raw.startswith("========="):
            continue
        line = _PREFIX.sub("", raw).strip()
        if not line:
            if cur:
                blocks.append(cur)
            cur = []
            continue
        if line.startswith(("Saved host backtrace", "Host Frame", "Device Frame")):
            continue
        if _SUMMARY.search(line) or line.startswith("COMPUTE-SANITIZER"):
            if cur:
                blocks.append(cur)
            cur = []
            continue
        cur.append(line)
    if cur:
        blocks.append(cur)
    return blocks


def parse_sanitizer(text: str, tool: str) -> tuple[list[SanitizerFinding], int | None]:
    """Findings (deduplicated) and the error count of the summary line (None when there is none)."""
    summary = _SUMMARY.search(text)
    merged: dict[tuple, tuple[SanitizerFinding, int, str]] = {}
    for block in _blocks(text):
        head = block[0]
        if head.startswith(_NOISE):
            continue
        finding, where = _finding(tool, block)
        key = (finding.tool, finding.kind, finding.kernel, finding.ptx_line, finding.message if not finding.kernel else "")
        if key in merged:
            f, n, w = merged[key]
            merged[key] = (f, n + 1, w)
        else:
            merged[key] = (finding, 1, where)
    findings = []
    for f, n, where in merged.values():
        if f.kind in ("CUDA API error", "process") and not any(e in f.message for e in _FAULTS):
            continue  # a probe of the driver or the exit status: not the kernel's doing
        if f.kind == "process":
            continue
        extra = [where] if where else []
        if n > 1:
            extra.append(f"{n} reports")
        if extra:
            f.message += f" ({'; '.join(extra)})"
        findings.append(f)
    return findings, int(summary.group(1)) if summary else None


def _finding(tool: str, block: list[str]) -> tuple[SanitizerFinding, str]:
    head = block[0]
    race = _RACE.search(head)
    if race:
        sev, a_kind, kernel, file_, line = race.groups()
        kernel = short_name(kernel)
        msg = f"shared-memory race: {a_kind.lower()} at {_loc(file_, line)}"
        for ln in block[1:] + [head]:
            if m := _RACE2.search(ln):
                msg += f" and {m.group(1).lower()} at {_loc(m.group(3), m.group(4))} with no barrier between them"
                msg += f" [{m.group(5)} hazards]" if m.group(5) else ""
                break
        return SanitizerFinding(tool=tool, kind=f"race ({sev.lower()})", kernel=kernel,
                                message=msg, ptx_line=int(line) if line else None), ""
    if head.startswith("Program hit"):  # a CUDA API call failed, usually the launch the error above broke
        return SanitizerFinding(tool=tool, kind="CUDA API error", message=head.rstrip(".")), ""
    if head.startswith("Error: process didn't terminate successfully"):
        return SanitizerFinding(tool=tool, kind="process", message="the program exited with an error"), ""
    kind = re.sub(r"\s+of size \d+ bytes?$", "", head).strip().rstrip(".")
    kernel, line, where, details = "", None, "", []
    for ln in block[1:]:
        if (m := _AT.search(ln)) and not kernel:
            kernel, line = short_name(m.group(1)), int(m.group(3)) if m.group(3) else None
            file_ = m.group(2)
            details.insert(0, f"at {_loc(file_, m.group(3))}" if file_ else f"in {kernel}")
        elif m := _THREAD.search(ln):
            where = f"first by thread ({m.group(1)}) in block ({m.group(2)})"
        elif ln.startswith(("Access to", "and is", "Address", "is out of bounds")):
            details.append(re.sub(r"0x[0-9a-fA-F]+", "0x…", ln))
    message = head + (": " + ", ".join(details) if details else "")
    return SanitizerFinding(tool=tool, kind=kind, kernel=kernel, message=message, ptx_line=line), where


def _loc(file_: str | None, line: str | None) -> str:
    return f"{Path(file_).name}:{line}" if file_ and line else "an unknown line (no line info)"


def find_sanitizer() -> str | None:
    if (env := os.environ.get("PTXBENCH_COMPUTE_SANITIZER")) and Path(env).is_file():
        return env
    if found := shutil.which("compute-sanitizer"):
        return found
    hits = sorted(glob.glob("/usr/local/cuda*/bin/compute-sanitizer"))
    return hits[-1] if hits else None


def lineinfo_cubin(source: str, arch: str, workdir: Path) -> Path | None:
    """Assemble a `ptx` solution with a `.loc` per line and -lineinfo; None when that fails. ptxas reads model text
    here as in every compile, so it runs in the compiler's jail (limits, no keys in its environment, its own folder);
    a jail that cannot start raises JailError (a ToolchainError), never a quiet fallback."""
    from .jail import Workspace, run_in_jail
    from .profile.lineinfo import annotate_ptx
    from .toolchain import find_toolchain

    tc = find_toolchain(arch)
    out = workdir / "lineinfo.cubin"
    with Workspace(prefix="ptxbench-lineinfo-") as jailed:
        (jailed / SOLUTION_PTX).write_text(annotate_ptx(source, SOLUTION_PTX))
        res = run_in_jail(tc, [tc.ptxas.path, f"-arch={arch}", "-lineinfo", SOLUTION_PTX, "-o", out.name], jailed,
                          timeout_s=120)
        if res.returncode != 0 or not (jailed / out.name).is_file():
            return None
        shutil.copyfile(jailed / out.name, out)
    return out


def sanitize_feedback(findings: list[SanitizerFinding], errors: dict[str, int], limit: int = 8) -> str:
    if not findings:
        clean = ", ".join(f"{t}: no errors" for t, n in errors.items() if not n)
        return f"compute-sanitizer: {clean}." if clean else ""
    lines = ["compute-sanitizer found problems (fix these first; they make results undefined):"]
    for f in findings[:limit]:
        where = f" in kernel {f.kernel}" if f.kernel else ""
        lines.append(f"- {f.tool}{where}: {f.message}")
    if len(findings) > limit:
        lines.append(f"- ... and {len(findings) - limit} more")
    return "\n".join(lines)


def sanitize_candidate(
    workload_id: str,
    source: str,
    *,
    language: str = "ptx",
    cubin_path: str | Path | None = None,
    arch: str = DEFAULT_ARCH,
    tools: list[str] | tuple[str, ...] = ("memcheck",),
    timeout_s: float = 180.0,
    seed: int = 0,
    workdir: str | Path | None = None,
    device: int | None = None,
    dist: str = "normal",
) -> SanitizeOutcome:
    """Run each compute-sanitizer tool in `tools` on one replay of the candidate (this machine's GPU).

    `cubin_path` is the compiled module (needed for `cuda` solutions, a fallback for `ptx`, which
    are re-assembled with line info). Returns the parsed findings and short feedback naming the
    kernel and the solution line; `timeout_s` applies to each tool run."""
    from .profile.candidate import device_env, replay_argv
    from .profile.runner import _run

    start = time.perf_counter()
    bad = [t for t in tools if t not in TOOLS]
    if bad:
        return SanitizeOutcome(ok=False, error=f"unknown sanitizer tool(s) {bad}; known: {list(TOOLS)}")
    san = find_sanitizer()
    if san is None:
        return SanitizeOutcome(ok=False, error="compute-sanitizer was not found (set PTXBENCH_COMPUTE_SANITIZER)")
    findings: list[SanitizerFinding] = []
    errors: dict[str, int] = {}
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="ptxbench-sanitize-") as tmp:
        work = Path(workdir) if workdir is not None else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        try:
            cubin = lineinfo_cubin(source, arch, work) if language == "ptx" else None
        except ToolchainError as e:  # a jail that cannot start, no ptxas: the machine's problem, said in one line
            return SanitizeOutcome(ok=False, error=f"infra error, no sanitizer ran: {e}",
                                   seconds=time.perf_counter() - start)
        cubin = cubin or (Path(cubin_path) if cubin_path else None)
        if cubin is None:
            return SanitizeOutcome(ok=False, error="no cubin to run (the solution did not assemble)")
        (work / "solution.txt").write_text(source)
        env = device_env(device, PYTORCH_NO_CUDA_MEMORY_CACHING="1")
        for tool in tools:
            # API errors off: the harness probes the driver (cuFuncGetParamInfo past the last parameter,
            # cuGetProcAddress) and those failures are expected; kernel errors are reported regardless.
            argv = [san, "--tool", tool, "--error-exitcode", str(ERROR_EXIT), "--show-backtrace", "device",
                    "--report-api-errors", "no",
                    *replay_argv(workload_id, work / "solution.txt", cubin, arch, seed, exact=True, dist=dist), "--no-nvtx",
                    "--no-scrub-above"]  # memcheck reads the scrub's stores above its frame as out of bounds (run 36)
            rc, out = _run(argv, timeout_s, env)
            (work / f"{tool}.txt").write_text(out or "")
            found, count = parse_sanitizer(out or "", tool)
            findings += found
            if rc is None:
                problems.append(f"{tool} timed out after {timeout_s:g} s")
            elif count is None and not found:
                problems.append(f"{tool} ended without a summary (status {rc}): {(out or '').strip()[-300:]}")
            errors[tool] = count if count is not None else len(found)
    return SanitizeOutcome(ok=not problems, error="; ".join(problems), findings=findings, errors_reported=errors,
                           feedback=sanitize_feedback(findings, errors), seconds=time.perf_counter() - start)
