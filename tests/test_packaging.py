"""What a wheel install carries: every code folder as a package with an __init__.py, and the data-only folders (the
`cuda` wrapper headers, the repair suite's task folders) as packages too, so that their files ship. setup.py finds
the list; an editable install would hide a missing entry, a wheel would not: one is built here and read."""
from __future__ import annotations

import runpy
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"agent": "ptxbench.agent", "tools": "ptxbench.tools", "workloads": "ptxbench.workloads",
           "prompts": "ptxbench.prompts"}


def setup_packages() -> list[str]:
    """The `packages` setup.py hands setuptools (its setup() call captured, nothing built)."""
    import setuptools

    got: dict = {}
    real = setuptools.setup
    setuptools.setup = lambda **kw: got.update(kw)
    try:
        runpy.run_path(str(ROOT / "setup.py"))
    finally:
        setuptools.setup = real
    return got["packages"]


def test_every_code_folder_is_a_listed_package():
    listed = set(setup_packages())
    found = set()
    for folder, package in FOLDERS.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            found.add(".".join([package, *rel.parts]))
        for py in (ROOT / folder).rglob("*.py"):
            assert (py.parent / "__init__.py").exists(), f"{py.parent} holds Python code but no __init__.py"
    assert found <= listed, f"not listed in setup.py's packages: {sorted(found - listed)}"


def test_every_data_folder_is_a_package_too():
    listed = set(setup_packages())
    tasks = sorted(p.name for p in (ROOT / "workloads" / "repairs").iterdir() if p.is_dir())
    assert tasks, "the repair suite has no task folder"
    assert "ptxbench.prompts.include.ptxbench" in listed
    missing = [t for t in tasks if f"ptxbench.workloads.repairs.{t}" not in listed]
    assert not missing, missing
    assert not any("__pycache__" in p for p in listed)


@pytest.mark.slow
def test_the_wheel_carries_the_code_and_the_data_without_a_warning(tmp_path):
    """Built from a copy of the tree by setuptools' own backend: no "Package would be ignored" warning, and the
    headers, a repair task's files and the code are in it."""
    pytest.importorskip("setuptools", minversion="77")  # pyproject's build-system; CI installs it
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md", *FOLDERS):
        copy = shutil.copytree if (ROOT / name).is_dir() else shutil.copy2
        copy(ROOT / name, src / name, **({"ignore": shutil.ignore_patterns("__pycache__")} if copy is shutil.copytree
                                         else {}))
    run = subprocess.run([sys.executable, "-c", "import sys; from setuptools import build_meta; "
                          "print(build_meta.build_wheel(sys.argv[1]))", str(tmp_path / "dist")],
                         cwd=src, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    log = run.stdout + run.stderr
    assert "would be ignored" not in log and "absent from the `packages` configuration" not in log, log[-3000:]
    assert "is deprecated" not in log, log[-3000:]  # e.g. the license as a TOML table (an error from 2027-02-18)
    wheel = tmp_path / "dist" / run.stdout.strip().splitlines()[-1]
    names = set(zipfile.ZipFile(wheel).namelist())
    task = sorted(p.name for p in (ROOT / "workloads" / "repairs").iterdir() if p.is_dir())[0]
    for expected in ("ptxbench/prompts/include/ptxbench/tma.cuh", f"ptxbench/workloads/repairs/{task}/task.json",
                     f"ptxbench/workloads/repairs/{task}/solution.cu", "ptxbench/tools/profile/range_check.py",
                     "ptxbench/agent/cli/__init__.py", "ptxbench/workloads/solutions/attention_bwd_wgmma.cu"):
        assert expected in names, expected
