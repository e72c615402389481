"""One LocalEvaluator (and its worker pool) shared by every GPU test of a session."""
from __future__ import annotations

import atexit
import functools
from pathlib import Path

from ptxbench.tools.evaluate import LocalEvaluator
from ptxbench.tools.gpu.pool import GpuPool, PoolConfig

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "workloads" / "solutions"


@functools.lru_cache(maxsize=1)
def shared_evaluator() -> LocalEvaluator:
    ev = LocalEvaluator(GpuPool(PoolConfig(spares=1)))
    atexit.register(ev.close)
    return ev
