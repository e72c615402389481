"""The evaluator a bench run uses (the local GPU pool or Ray actors), and the bench's start-up error.

Kept apart from runner.py, whose imports pull in the agent loop (LangGraph): the CLI makes the evaluator
first, so the GPU workers start while the loop's modules import (the first GPU job waits for them).
"""
from __future__ import annotations

from .matrix import BenchConfig


class BenchError(RuntimeError):
    """The bench cannot start (a run folder in the way, no GPU for a GPU run, a bad matrix)."""


class RunStopped(BenchError):
    """A cause no trajectory's retry can mend stopped the bench mid-run, as Ctrl-C does: what ran is recorded, and
    --resume goes on once the cause is mended (the message says which)."""


class NoWorkerLeft(RunStopped):
    """The evaluator has no GPU worker left (a Ray cluster's nodes lost): the bench stops as on Ctrl-C, what ran is
    recorded, and --resume goes on once there are GPUs again; retrying every trajectory meanwhile would only spend
    their retries."""


class StorageGaveOut(RunStopped):
    """The run folder's storage gave out (a full disk or quota, a file system gone read-only): every trajectory would
    fail its retries on it, and a model reply made meanwhile could not be recorded, so the bench stops."""


class HostUnreached(RunStopped):
    """A model of the matrix could not be reached at all (agent/bench/unreached.py: a machine offline, a proxy out of
    reach) before any call of it answered: its trajectories wait for --resume, none counted as infra-failed, while
    the other models ran."""


def make_evaluator(config: BenchConfig):
    from ptxbench.tools.redact import register_secret_env

    # Before any worker starts (the trajectories register it only later): the GPU workers' fork server erases the
    # variables registered by then from its memory (tools/gpu/keyless.py), a name like any other's among them
    register_secret_env(config.optimize.get("api_key_env"))
    if config.backend == "ray":
        return _ray_evaluator(config)
    if config.backend != "local":
        raise BenchError(f"unknown backend {config.backend!r}: local or ray")
    from ptxbench.tools.evaluate import LocalEvaluator
    from ptxbench.tools.gpu.pool import NoGpuError, PoolConfig, missing_gpu, visible_devices

    evaluator = LocalEvaluator(pool_config=PoolConfig(devices=list(range(config.gpus))) if config.gpus else None)
    if config.no_gpu:
        return evaluator
    seen = visible_devices()
    if seen and config.gpus and config.gpus > len(seen):
        raise BenchError(f"--gpus {config.gpus} asks for more GPUs than the {len(seen)} in sight")
    if seen:  # GPUs are there: their workers start while the first turns ask their models and compile
        evaluator.start_in_background()
        return evaluator
    if reason := missing_gpu():  # the machine shows it has none: said without starting a worker
        raise BenchError(f"no GPU to evaluate on ({reason}); pass --no-gpu to compile only")
    try:  # no sign of a GPU: find out now, before a run folder is made
        evaluator.pool
    except NoGpuError as exc:
        raise BenchError(f"no GPU to evaluate on ({exc}); pass --no-gpu to compile only") from exc
    return evaluator


def _ray_evaluator(config: BenchConfig):
    """The Ray actors, or BenchError in one line: Ray missing, a cluster that cannot be reached, too few GPUs in it."""
    try:
        import ray
        from ...tools.ray_evaluator import RayEvaluator
    except ImportError as exc:
        raise BenchError(f"--backend ray needs Ray ({exc}): pip install 'ptxbench[bench]'") from None
    if config.ray_address and not ray.is_initialized():
        _reachable(config.ray_address)
    started = not ray.is_initialized()
    try:
        return RayEvaluator(address=config.ray_address, workers=config.gpus, fake_gpus=config.no_gpu and not config.ray_address,
                            placement_wait_s=config.ray_placement_wait_s)
    except Exception as exc:  # noqa: BLE001 - ConnectionError, a Ray client's own errors, too few GPUs
        if started:  # the Ray instance this call started (or joined) is left
            try:
                ray.shutdown()
            except Exception:  # noqa: BLE001 - leaving is best effort
                pass
        where = f"at {config.ray_address}" if config.ray_address else "(a local Ray instance)"
        text = " ".join(str(exc).split())[:300]
        raise BenchError(f"--backend ray: no usable Ray cluster {where}: {type(exc).__name__}: {text}") from None


def _reachable(address: str, timeout_s: float = 10.0) -> None:
    """BenchError when a host:port (or ray://host:port) address takes no connection: ray.init would wait minutes for
    its GCS before it says so. 'auto', 'local' and the like are left to Ray."""
    import socket

    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not host or not port.isdigit():
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise BenchError(f"--backend ray: no usable Ray cluster at {address}: nothing answers there "
                         f"({type(exc).__name__}: {exc})") from None
