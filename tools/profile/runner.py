"""Run Nsight Compute on the replay program and read its report into a ProfileSummary.

One ncu run profiles every kernel launched inside the NVTX range `ptxbench` (the replay program
pushes it around the plan's launches, so input set-up and library calls are never profiled), with
unmodified clocks (`--clock-control none`: the GPU is not pinned to base clocks) and a time limit.
The report is then exported three ways (raw metrics with per-opcode instances, details with rule
results, SASS source page) and parsed. Any failure -- no ncu, no counter permission, a timeout, a
replay that crashed, no kernel in the range -- is a summary with ok=False and the reason; the
verdicts built on it are then "unknown", never a silent pass or fail.

Two levels: `full` (the sections, the rules, the source page: feedback and hot lines) and `verdict`
(VERDICT_METRICS and the families' counters only, the raw page only: what verdict.py decides on).
Given `hold` (a context manager taking the GPU), the replay runs with the ready/go/done handshake
(gated.py): the GPU is held only while the plan's launches are replayed. Each device gets its own
ncu lock folder (TMPDIR): ncu serialises every profile that shares `$TMPDIR/nsight-compute-lock`,
which would queue the GPUs behind each other; PTXBENCH_NCU_LOCK=shared keeps the one lock.
"""
from __future__ import annotations

import functools
import glob
import os
import re
import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .gated import kill_group, run_gated
from .ncu_csv import parse_details, parse_raw, parse_source
from .summary import OPCODE_METRIC, OPCODE_TRUE_METRIC, ProfileSummary, build_summary

NVTX_RANGE = "ptxbench"
SECTIONS = ["SpeedOfLight", "Occupancy", "LaunchStats", "WarpStateStats", "MemoryWorkloadAnalysis",
            "ComputeWorkloadAnalysis", "InstructionStats", "SourceCounters"]
# Always collected: per-opcode executed counts (the verdict) and the figures feedback quotes.
BASE_METRICS = [OPCODE_METRIC, OPCODE_TRUE_METRIC, "gpu__time_duration.sum", "dram__bytes_read.sum",
                "dram__bytes_write.sum", "launch__registers_per_thread"]
# The verdict level: the kernels' times and (added per arch) the families' hardware counters, which decide there
# (verdict.py); no per-opcode metric, since those patch the kernel and cost most of the GPU time of the pass.
VERDICT_METRICS = ["gpu__time_duration.sum"]
IMPORT_TIMEOUT_S = 60.0
ENV_LOCK = "PTXBENCH_NCU_LOCK"


def find_ncu() -> str | None:
    """$PTXBENCH_NCU, then PATH, then the usual install folders."""
    if (env := os.environ.get("PTXBENCH_NCU")) and Path(env).is_file():
        return env
    if found := shutil.which("ncu"):
        return found
    for pattern in ("/usr/local/cuda/bin/ncu", "/usr/local/cuda*/bin/ncu", "/opt/nvidia/nsight-compute/*/ncu"):
        hits = sorted(glob.glob(pattern))
        if hits:
            return hits[-1]
    return None


def ncu_command(ncu: str, target: list[str], report: Path, metrics: list[str], full: bool,
                replay: str = "kernel") -> list[str]:
    """`replay`: `kernel` (each launch of the range profiled on its own, a row each) or `range` (the NVTX range's
    launches back to back, one row for the range: range_check.py)."""
    cmd = [ncu, "--clock-control", "none", "--nvtx", "--nvtx-include", f"{NVTX_RANGE}/", "-f", "-o", str(report)]
    if replay != "kernel":
        cmd += ["--replay-mode", replay]
    if full:
        for s in SECTIONS:
            cmd += ["--section", s]
    cmd += ["--metrics", ",".join(dict.fromkeys(metrics))]
    return cmd + target


def _run(cmd: list[str], timeout_s: float, env: dict | None = None, cwd: str | None = None) -> tuple[int | None, str]:
    """(returncode or None on timeout, combined output); the whole process group dies on timeout."""
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env, cwd=cwd, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout_s)
        return proc.returncode, out
    except subprocess.TimeoutExpired:
        kill_group(proc)
        out, _ = proc.communicate()
        return None, out or ""


# A metric this ncu or GPU lacks, or one range replay does not collect (ncu 2025.3 names nine: run 36)
_UNKNOWN_METRIC = re.compile(r"Failed to find metric (?:regex:)?([\w.]+)|Metric ([\w.]+) is not supported")


def refused_metrics(log: str) -> list[str]:
    """The metrics ncu's log names as unknown or unsupported."""
    return [a or b for a, b in _UNKNOWN_METRIC.findall(log or "")]


def failure_reason(returncode: int | None, log: str, timeout_s: float) -> str:
    """Why a profiling run gave no usable report, in one line (empty when it did)."""
    if returncode is None:
        notes = [ln.split("==PTXBENCH== ", 1)[1] for ln in log.splitlines() if ln.startswith("==PTXBENCH== ")]
        return notes[-1] if notes else f"ncu timed out after {timeout_s:g} s"
    if "ERR_NVGPUCTRPERM" in log:
        return "no permission to read the GPU performance counters (ERR_NVGPUCTRPERM)"
    if "No kernels were profiled" in log or "No ranges were profiled" in log:
        return "ncu profiled no kernel: nothing was launched inside the NVTX range (did the replay fail early?)"
    if returncode != 0:
        errors = [ln for ln in log.splitlines() if "ERROR" in ln or "Error" in ln or "error" in ln]
        tail = " | ".join((errors or log.strip().splitlines() or ["no output"])[-3:])
        return f"ncu exited with status {returncode}: {tail[-600:]}"
    return ""


def _version(ncu: str) -> str:
    """ncu's version, asked once per ncu path and file state (a process start per profile otherwise)."""
    try:
        stat = os.stat(ncu)
        return _version_of(ncu, stat.st_mtime_ns, stat.st_size)
    except OSError:
        return ""


@functools.lru_cache(maxsize=8)
def _version_of(ncu: str, _mtime_ns: int, _size: int) -> str:
    rc, out = _run([ncu, "--version"], 30)
    m = re.search(r"Version ([\d.]+)", out or "")
    return m.group(1) if m else ""


def _export(ncu: str, report: Path, page: list[str]) -> str:
    rc, out = _run([ncu, "--import", str(report), "--csv", "--print-units", "base", *page], IMPORT_TIMEOUT_S)
    return out if rc == 0 else ""


def lock_env(env: dict | None) -> dict | None:
    """`env` with TMPDIR set to a folder of the one GPU it shows (ncu's lock file lives in $TMPDIR)."""
    if env is None or os.environ.get(ENV_LOCK, "device") == "shared":
        return env
    visible = env.get("CUDA_VISIBLE_DEVICES", "")
    if not visible or "," in visible:
        return env
    import tempfile

    folder = Path(tempfile.gettempdir()) / f"ptxbench-ncu-gpu{re.sub(r'[^0-9A-Za-z-]', '_', visible)}"
    folder.mkdir(parents=True, exist_ok=True)
    return {**env, "TMPDIR": str(folder)}


def profile_command(target: list[str], *, counters: list[str], full: bool = True, timeout_s: float = 120.0,
                    workdir: Path, env: dict | None = None, hold=None, replay: str = "kernel") -> ProfileSummary:
    """Profile `target` (argv of the replay program) and parse the report. Never raises for a failed run.

    `hold`: a callable returning a context manager that takes the GPU; with it the replay runs gated
    (gated.py) and the summary records how long the GPU was held and waited for. `replay`: ncu's replay mode
    (ncu_command); under `range` the summary has one row, the range's."""
    start = time.perf_counter()
    mode = "full" if full else "verdict"
    ncu = find_ncu()
    if ncu is None:
        return ProfileSummary(ok=False, mode=mode, error="Nsight Compute (ncu) was not found (set PTXBENCH_NCU)")
    workdir.mkdir(parents=True, exist_ok=True)
    env = lock_env(env)
    report = workdir / "profile"
    metrics = (BASE_METRICS if full else VERDICT_METRICS) + counters
    held = waited = 0.0
    ready = None
    log, cmd, rc = "", [], None
    for attempt in range(2):  # the second only when ncu named a counter this ncu/GPU lacks: profile without it
        left = max(1.0, timeout_s - (time.perf_counter() - start)) if attempt else timeout_s
        if hold is None:
            cmd = ncu_command(ncu, target, report, metrics, full, replay)
            rc, log = _run(cmd, left, env)
        else:
            folder = workdir / f"handshake{attempt}"
            cmd = ncu_command(ncu, target + ["--handshake", str(folder)], report, metrics, full, replay)
            rc, log, times = run_gated(cmd, env=env, folder=folder, hold=hold, limit_s=left)
            held, waited = held + times.held_s, waited + times.wait_s
            ready = times.ready_s if ready is None else ready
        dropped = refused_metrics(log)
        if attempt or rc in (0, None) or not dropped:
            break
        metrics = [m for m in metrics if m.rsplit(".", 1)[0] not in dropped and m not in dropped]
    gate = dict(gpu_held_s=round(held, 3), gpu_wait_s=round(waited, 3),
                gpu_ready_s=round(ready, 3) if ready is not None else None) if hold is not None else {}
    (workdir / "ncu.log").write_text(log or "")
    reason = failure_reason(rc, log or "", timeout_s)
    report_file = report.with_suffix(".ncu-rep")
    if not reason and not report_file.is_file():
        reason = "ncu wrote no report: " + " | ".join((log or "no output").strip().splitlines()[-3:])
    if reason:
        return ProfileSummary(ok=False, mode=mode, error=reason, command=cmd, seconds=time.perf_counter() - start, **gate)
    pages = {"raw": ["--page", "raw", "--print-metric-instances", "details"]}
    if full:
        pages |= {"details": ["--page", "details", "--print-details", "all"], "source": ["--page", "source", "--print-source", "sass"]}
    with ThreadPoolExecutor(len(pages) + 1) as pool:
        futures = {name: pool.submit(_export, ncu, report_file, args) for name, args in pages.items()}
        version = pool.submit(_version, ncu)
        texts = {name: f.result() for name, f in futures.items()}
    for name, text in texts.items():
        (workdir / f"{name}.csv").write_text(text)
    summary = summarize(texts.get("raw", ""), texts.get("details", ""), texts.get("source", ""), counters, mode=mode,
                        command=cmd, seconds=time.perf_counter() - start, ncu_version=version.result())
    return summary.model_copy(update=gate)


def summarize(raw_csv: str, details_csv: str, source_csv: str, counters: list[str], *, mode: str = "full",
              command: list[str] | None = None, seconds: float = 0.0, ncu_version: str = "") -> ProfileSummary:
    """The ProfileSummary of exported CSV pages (also what the tests feed with saved real outputs)."""
    raw = parse_raw(raw_csv)
    if not raw:
        return ProfileSummary(ok=False, mode=mode, error="ncu's report has no profiled kernel (empty raw page)",
                              command=command or [], seconds=seconds, ncu_version=ncu_version)
    kernels = build_summary(raw, parse_details(details_csv), parse_source(source_csv), counters, mode)
    gpu = raw[0].values.get("device__attribute_display_name", ("", ""))[1]
    return ProfileSummary(ok=True, mode=mode, kernels=kernels, gpu=gpu, command=command or [], seconds=round(seconds, 3),
                          ncu_version=ncu_version)
