"""Shared fixtures. Tests marked `gpu` need an NVIDIA GPU; they are skipped automatically without one
(CI also deselects them with -m "not gpu")."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / "data"


def _has_gpu() -> bool:
    if not shutil.which("nvidia-smi"):
        return False
    try:
        return subprocess.run(["nvidia-smi", "-L"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def pytest_collection_modifyitems(config, items):
    if _has_gpu():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU (nvidia-smi -L failed or is missing)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def data_dir() -> Path:
    return DATA


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """A CLI test's working folder: the current directory, with the runs root ($PTXBENCH_RUNS) inside it."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PTXBENCH_RUNS", str(tmp_path / "runs"))
    return tmp_path
