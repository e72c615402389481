"""Find the CUDA command-line tools (ptxas, nvcc, nvdisasm, cuobjdump) and run them with a timeout.

Search order: $PTXBENCH_CUDA_BIN (one directory, used alone when set), the pip wheels
(nvidia-cuda-nvcc & co. install nvidia/cu13/bin or nvidia/cuda_nvcc/bin inside site-packages),
then PATH and /usr/local/cuda/bin. Among what is found, the newest ptxas that supports the
target wins, so a machine with the wheel installed assembles with the same pinned ptxas as any
other; nvcc, nvdisasm and cuobjdump are taken from ptxas's own directory when it has them.
"""
from __future__ import annotations

from ptxbench.workloads.arch import DEFAULT_ARCH
import functools
import importlib.util
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

from pydantic import BaseModel

from .textcap import CappedText

TOOL_NAMES = ("ptxas", "nvcc", "nvdisasm", "cuobjdump")
ENV_BIN = "PTXBENCH_CUDA_BIN"
CUDA_HOME_BIN = Path("/usr/local/cuda/bin")
# Wheel layouts: CUDA 13 puts every tool in nvidia/cu13/bin; CUDA 12 has one folder per wheel.
WHEEL_BIN_DIRS = ("cu13/bin", "cu12/bin", "cuda_nvcc/bin", "cuda_nvdisasm/bin", "cuda_cuobjdump/bin")
# The oldest CUDA release whose ptxas knows each target.
MIN_PTXAS = {"sm_90a": (12, 0), "sm_100a": (12, 8)}


class ToolchainError(RuntimeError):
    """A tool the task needs is missing (an environment problem, not a kernel failure)."""


class Tool(BaseModel):
    name: str
    path: str
    version: str = ""
    source: str = ""  # env | wheel | path | cuda_home

    @property
    def version_tuple(self) -> tuple[int, ...]:
        return tuple(int(p) for p in self.version.split(".") if p.isdigit()) or (0,)

    def describe(self) -> str:
        return f"{self.path} ({self.version or 'unknown version'})"


class Toolchain(BaseModel):
    ptxas: Tool
    nvcc: Tool | None = None
    nvdisasm: Tool | None = None
    cuobjdump: Tool | None = None

    def tools(self) -> dict[str, str]:
        """tool -> 'path (version)', as CompileResult.tools records it."""
        return {n: t.describe() for n in TOOL_NAMES if (t := getattr(self, n)) is not None}

    def versions(self) -> dict[str, str]:
        return {n: t.version for n in TOOL_NAMES if (t := getattr(self, n)) is not None}


class ProcResult(BaseModel):
    returncode: int
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False

    @property
    def output(self) -> str:
        return (self.stdout + ("\n" if self.stdout and self.stderr else "") + self.stderr).strip()


def run_tool(argv: list[str], timeout_s: float = 60.0, cwd: str | Path | None = None,
             env: dict[str, str] | None = None, max_chars: int | None = None) -> ProcResult:
    """Run a compiler in its own process group, stdin from /dev/null (a tool must never wait on the
    harness's terminal); on timeout the whole group is killed. `env` None keeps the harness's
    environment: only for trusted input (version probes); tools/jail.py wraps the rest. With `max_chars`, each
    stream is cut as it is read (textcap.CappedText), never held whole."""
    proc = subprocess.Popen(
        argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        errors="replace", start_new_session=True, env=env,
    )
    out, err = CappedText(max_chars), CappedText(max_chars)
    readers = [threading.Thread(target=_drain, args=(stream, capped), daemon=True)
               for stream, capped in ((proc.stdout, out), (proc.stderr, err))]
    for reader in readers:
        reader.start()
    finished = _finished(proc, readers, timeout_s)
    if not finished:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
    for reader in readers:
        reader.join()
    if finished:
        return ProcResult(returncode=proc.returncode, stdout=out.text(), stderr=err.text())
    return ProcResult(returncode=-9, stdout=out.text(), stderr=err.text() + f"\n{argv[0]} timed out after {timeout_s:g} s",
                      timed_out=True)


READ_CHARS = 1 << 16


def _drain(stream, capped: CappedText) -> None:
    with stream:
        for piece in iter(lambda: stream.read(READ_CHARS), ""):
            capped.add(piece)


def _finished(proc: subprocess.Popen, readers: list[threading.Thread], timeout_s: float) -> bool:
    """Whether the tool exited and closed its output within `timeout_s` (what communicate(timeout) waited for)."""
    deadline = time.monotonic() + timeout_s
    for reader in readers:
        reader.join(max(0.0, deadline - time.monotonic()))
    try:
        proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        return False
    return not any(reader.is_alive() for reader in readers)


def _wheel_bin_dirs() -> list[Path]:
    spec = importlib.util.find_spec("nvidia")
    roots = list(spec.submodule_search_locations or []) if spec else []
    return [Path(r) / d for r in roots for d in WHEEL_BIN_DIRS if (Path(r) / d).is_dir()]


def _search_dirs() -> list[tuple[Path, str]]:
    env = os.environ.get(ENV_BIN)
    if env:
        return [(Path(env), "env")]
    dirs = [(d, "wheel") for d in _wheel_bin_dirs()]
    dirs += [(Path(p), "path") for p in os.environ.get("PATH", "").split(os.pathsep) if p]
    dirs.append((CUDA_HOME_BIN, "cuda_home"))
    return dirs


@functools.lru_cache(maxsize=64)
def _tool_version(path: str, mtime: float) -> str:
    res = run_tool([path, "--version"], timeout_s=30)
    m = re.search(r"V(\d+\.\d+\.\d+)", res.output) or re.search(r"release (\d+\.\d+)", res.output)
    return m.group(1) if m else ""


def find_candidates(name: str) -> list[Tool]:
    """Every distinct `name` executable in the search order (same file reached twice counts once)."""
    seen: set[str] = set()
    found: list[Tool] = []
    for d, source in _search_dirs():
        p = d / name
        if not (p.is_file() and os.access(p, os.X_OK)):
            continue
        real = os.path.realpath(p)
        if real in seen:
            continue
        seen.add(real)
        # A shell wrapper (e.g. /usr/local/bin/ptxas -> exec /usr/local/cuda-13.0/bin/ptxas) is
        # reported by its own path; its version comes from what it runs.
        found.append(Tool(name=name, path=str(p), version=_tool_version(str(p), p.stat().st_mtime), source=source))
    return found


def _pick_newest(cands: list[Tool], ceiling: tuple[int, ...] | None = None) -> Tool | None:
    ok = [c for c in cands if ceiling is None or c.version_tuple <= ceiling]
    # max() keeps the first of equals, so the search order breaks ties.
    return max(ok, key=lambda c: c.version_tuple) if ok else None


def _companion(name: str, ptxas: Tool, ceiling: bool) -> Tool | None:
    cands = find_candidates(name)
    same_dir = [c for c in cands if Path(c.path).parent == Path(ptxas.path).parent]
    if same_dir:
        return same_dir[0]
    # nvcc must not emit a PTX .version newer than ptxas reads; disassemblers may be newer.
    return _pick_newest(cands, ptxas.version_tuple if ceiling else None) or _pick_newest(cands)


def find_toolchain(arch: str = DEFAULT_ARCH) -> Toolchain:
    """The toolchain for `arch`: the newest ptxas that supports it, and its companions."""
    return _find_toolchain(arch, os.environ.get(ENV_BIN, ""), os.environ.get("PATH", ""))


@functools.lru_cache(maxsize=16)
def _find_toolchain(arch: str, _env: str, _path: str) -> Toolchain:
    cands = find_candidates("ptxas")
    need = MIN_PTXAS.get(arch, (0,))
    ptxas = _pick_newest([c for c in cands if c.version_tuple >= need])
    if ptxas is None:
        where = f"${ENV_BIN}={os.environ[ENV_BIN]}" if os.environ.get(ENV_BIN) else "the nvidia-cuda-nvcc wheel, PATH or /usr/local/cuda/bin"
        have = ", ".join(c.describe() for c in cands) or "none"
        raise ToolchainError(
            f"no ptxas that supports {arch} (needs CUDA {'.'.join(map(str, need))} or later) in {where}; found: {have}. "
            "Install it with `pip install nvidia-cuda-nvcc nvidia-cuda-nvdisasm nvidia-cuda-cuobjdump` "
            f"or point ${ENV_BIN} at a CUDA bin directory."
        )
    return Toolchain(
        ptxas=ptxas,
        nvcc=_companion("nvcc", ptxas, ceiling=True),
        nvdisasm=_companion("nvdisasm", ptxas, ceiling=False),
        cuobjdump=_companion("cuobjdump", ptxas, ceiling=False),
    )


def toolchain_report(arch: str = DEFAULT_ARCH) -> dict:
    """What `ptxbench compile --json` and run manifests record: the chosen tools and every candidate."""
    from .jail import jail_mode  # imported here: jail.py imports this module

    report: dict = {"arch": arch, "env_override": os.environ.get(ENV_BIN) or None, "jail": jail_mode()}
    try:
        tc = find_toolchain(arch)
        report["chosen"] = {n: t.model_dump() for n in TOOL_NAMES if (t := getattr(tc, n)) is not None}
        report["error"] = None
    except ToolchainError as e:
        report["chosen"] = {}
        report["error"] = str(e)
    report["candidates"] = {n: [c.model_dump() for c in find_candidates(n)] for n in TOOL_NAMES}
    return report


def which_host_compiler() -> str | None:
    """nvcc preprocesses with a host C++ compiler even for -ptx."""
    return shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")
