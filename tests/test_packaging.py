"""Every code folder is a package that a wheel install carries: listed in pyproject's `packages`, with an
__init__.py (an editable install would hide a missing entry; a wheel would not)."""
from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"agent": "ptxbench.agent", "tools": "ptxbench.tools", "workloads": "ptxbench.workloads",
           "prompts": "ptxbench.prompts"}


def test_every_code_folder_is_a_listed_package():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = set()
    for folder, package in FOLDERS.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            found.add(".".join([package, *rel.parts]))
        for py in (ROOT / folder).rglob("*.py"):
            assert (py.parent / "__init__.py").exists(), f"{py.parent} holds Python code but no __init__.py"
    assert found <= listed, f"not listed in pyproject's packages: {sorted(found - listed)}"
    assert listed <= found, f"listed but missing: {sorted(listed - found)}"
