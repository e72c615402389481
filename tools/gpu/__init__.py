"""GPU evaluation: a worker process per GPU (worker.py, runner.py) behind a pool with a watchdog (pool.py).

The public surface is the pool; LocalEvaluator (tools/evaluate.py) wraps it. Importing this package
does not import torch or touch CUDA (only the worker processes do).
"""
from .pool import GpuPool, NoGpuError, PoolConfig

__all__ = ["GpuPool", "NoGpuError", "PoolConfig"]
