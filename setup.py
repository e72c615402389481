"""The package list, found rather than written out: pyproject.toml keeps every other setting.

Each of the four top-level folders installs as a subpackage of the `ptxbench` namespace (pyproject's package-dir), and
so does every folder below them that holds a shipped file: the code packages, and the data-only folders (the `cuda`
wrapper headers under prompts/include/ptxbench/, one folder per repair task under workloads/repairs/). setuptools
carries a data folder's files only when the folder is a listed package; listed by hand, a new repair task would be
left out of the wheel, or warned about, until someone remembered it (tests/test_packaging.py checks the wheel).
"""
import tomllib
from pathlib import Path

from setuptools import setup

ROOT = Path(__file__).resolve().parent
# folder -> package, as pyproject's package-dir maps them (one place for the mapping)
FOLDERS = {folder: package for package, folder in
           tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"].items()}
SKIPPED = ("__pycache__", ".pytest_cache")


def packages(root: Path = ROOT) -> list[str]:
    """ptxbench.<folder>[.<subfolder>...] for each folder that holds a file, below none that is skipped or hidden."""
    found = []
    for folder, package in FOLDERS.items():
        for d in sorted([root / folder, *(root / folder).rglob("*")]):
            rel = d.relative_to(root / folder).parts
            if (d.is_dir() and not any(p in SKIPPED or p.startswith(".") or p.endswith(".egg-info") for p in rel)
                    and any(f.is_file() for f in d.iterdir())):
                found.append(".".join([package, *rel]))
    return found


setup(packages=packages())
