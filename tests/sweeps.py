"""bench/attention_sweep.py as a module, loaded once for the tests that check its rounds and TUNED snapshots."""
from __future__ import annotations

import functools
import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


@functools.cache
def attention_sweep() -> ModuleType:
    spec = importlib.util.spec_from_file_location("attention_sweep", ROOT / "bench" / "attention_sweep.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
