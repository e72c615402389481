"""The run manifest: what is needed to rebuild and trust a run (config, code, packages, GPU, toolchain)."""
from __future__ import annotations

from ptxbench.workloads.arch import DEFAULT_ARCH
import platform
import shutil
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from ...tools.redact import scrub

MANIFEST_VERSION = 1
PACKAGES = ("ptxbench", "langgraph", "langgraph-checkpoint-sqlite", "litellm", "pydantic", "tenacity", "torch",
            "cupy-cuda13x", "cuda-python", "numpy", "nvidia-cuda-nvcc", "nvidia-cuda-nvdisasm", "nvidia-cuda-cuobjdump")
# The folder the package is built from: agent/records/manifest.py sits two folders below it (the checkout's root, or
# site-packages/ptxbench when installed from a wheel).
PACKAGE_ROOT = Path(__file__).resolve().parents[2]


def _run(argv: list[str], cwd: Path | None = None) -> str:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=20, cwd=cwd)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def checkout_root() -> Path | None:
    """PACKAGE_ROOT when it is the top of a git checkout, else None. Asked of git rather than looked up as a .git
    folder: a worktree's .git is a file, and a wheel installed in a virtual environment inside some other repository
    sits below that repository's .git, whose revision says nothing of this code."""
    if not shutil.which("git"):
        return None
    top = _run(["git", "rev-parse", "--show-toplevel"], PACKAGE_ROOT)
    return PACKAGE_ROOT if top and Path(top).resolve() == PACKAGE_ROOT else None


def git_info() -> dict[str, Any]:
    """The revision and whether tracked files differ from it; {} when the code does not run from a checkout."""
    root = checkout_root()
    if root is None:
        return {}
    return {"revision": _run(["git", "rev-parse", "HEAD"], root),
            "dirty": bool(_run(["git", "status", "--porcelain", "--untracked-files=no"], root))}


def package_versions() -> dict[str, str]:
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


def gpu_info() -> dict[str, str]:
    if not shutil.which("nvidia-smi"):
        return {}
    line = _run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"])
    if not line:
        return {}
    names = [row.split(",")[0].strip() for row in line.splitlines()]
    first = [part.strip() for part in line.splitlines()[0].split(",")]
    return {"gpus": ", ".join(names), "driver": first[1] if len(first) > 1 else "", "memory": first[2] if len(first) > 2 else ""}


def toolchain_info(arch: str) -> dict[str, Any]:
    try:
        from ptxbench.tools.toolchain import toolchain_report

        return toolchain_report(arch)
    except Exception as exc:  # noqa: BLE001 - a manifest records what it can; a missing tool is a fact, not a crash
        return {"error": f"{type(exc).__name__}: {exc}"}


def library_versions() -> dict[str, str]:
    """CUDA runtime and cuDNN as torch sees them (only on a GPU machine: importing torch costs seconds)."""
    if not gpu_info():
        return {}
    try:
        import torch
    except ImportError:
        return {}
    info = {"torch_cuda": str(torch.version.cuda or "")}
    if torch.cuda.is_available():
        info["cudnn"] = str(torch.backends.cudnn.version())
    return info


def build_manifest(config: dict[str, Any], command: str, trajectories: list[str], arch: str = DEFAULT_ARCH) -> dict[str, Any]:
    return scrub({
        "manifest_version": MANIFEST_VERSION,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": command,
        "argv": sys.argv,
        "config": config,
        "trajectories": trajectories,
        "git": git_info(),
        "python": sys.version.split()[0],
        "host": platform.node(),
        "platform": platform.platform(),
        "packages": package_versions(),
        "gpu": gpu_info(),
        "libraries": library_versions(),
        "toolchain": toolchain_info(arch),
    })
