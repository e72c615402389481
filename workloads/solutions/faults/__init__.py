"""The fault corpus: kernels that must each get their own verdict (see expected.toml)."""
from __future__ import annotations

import tomllib
from pathlib import Path

HERE = Path(__file__).resolve().parent


def load_corpus() -> tuple[str, dict[str, dict]]:
    """(workload id, {name: {file, status, error?, note?, plan?, source}})."""
    spec = tomllib.loads((HERE / "expected.toml").read_text())
    workload = spec.pop("workload")
    for entry in spec.values():
        entry["source"] = (HERE / entry["file"]).read_text()
    return workload, spec
