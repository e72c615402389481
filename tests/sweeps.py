"""bench/ scripts as modules, each loaded once: attention_sweep.py for the tests that check its rounds and TUNED
snapshots, and any other by name (`bench_script`)."""
from __future__ import annotations

import functools
import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


@functools.cache
def bench_script(name: str) -> ModuleType:
    """bench/<name>.py, imported from its file (bench/ is no package)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def attention_sweep() -> ModuleType:
    return bench_script("attention_sweep")
