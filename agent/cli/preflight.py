"""Checks that this machine can do what a command asks, made after its input is checked and before a run folder is
written or a GPU worker started: each failure is one BadInput line (agent/cli/application.py prints it, exit status 2).

    writable(path)     a run folder that can be created and written here ("cannot create run folder PATH: why";
                       "cannot write into run folder PATH: why" for one already there)
    no_gpu_reason()    why there is no usable GPU, where the machine shows it without a GPU worker started
    gpu(hint)          BadInput when there is such a reason: "no GPU to evaluate on (why); hint"
    toolchain(arch)    BadInput when no ptxas here assembles for `arch` ("cannot compile here: why; how to install it"),
                       --no-gpu runs included: every turn would be an INFRA_ERROR, after its model call; and
                       compile_cache(): the compile cache, which holds every cubin the GPU loads, cannot be written
    cache_folder(folder, what)  a folder under the ptxbench cache that cannot be made or written (compile_cache's check)

and, once a run is under way, `storage_failure(exc)`: whether an exception is the run folder's storage giving out
(a full disk or quota, a file-size limit, a file system gone read-only or failing), said in one line with the
--resume that continues the run once there is room, not as SQLite's or the OS's traceback.
"""
from __future__ import annotations

from pathlib import Path

from ..records.storage import storage_failure  # noqa: F401 - said here by the commands
from .inputs import BadInput, RunFailed, write_probe

NO_GPU_HINT = "pass --no-gpu to compile only"
# a resumed run refuses --no-gpu (it goes on as it started): NO_GPU_HINT sent the user to an option then refused
RESUMED_GPU_RUN_HINT = ("the run was recorded to evaluate on a GPU and goes on as it started (its --no-gpu cannot "
                        "change): resume it on a machine with a GPU, or start a new run with --no-gpu")


def storage_stop(exc: Exception, resume: str, run_dir: str | Path | None = None) -> RunFailed:
    """The one line for storage that gave out mid-run (`storage_failure`: a permission refused counts inside
    `run_dir`), naming the `resume` command; anything else is re-raised as it is."""
    if (what := storage_failure(exc, run_dir)) is None:
        raise exc
    return RunFailed(f"cannot write the run any more: {what}; what was recorded is kept: once that is mended (room, "
                     f"permissions), resume with: {resume}")


def writable(path: str | Path, hint: str = "") -> Path:
    """`path` made (with its missing parents) and a file written into it, then all of that removed again: a folder
    that cannot be (a read-only or virtual file system, no permission) is said in one line before any work starts,
    not as the traceback of the first record written into it (`hint`: what to do instead, after a '; ')."""
    path = Path(path)
    existed = path.is_dir()
    made: list[Path] = []
    try:
        for p in reversed([p for p in (path, *path.parents) if not p.exists()]):
            try:
                p.mkdir()
            except FileExistsError:  # made meanwhile by someone else: theirs, not ours to remove
                continue
            made.append(p)
        write_probe(path)
    except OSError as exc:
        verb = "write into" if existed else "create"  # one already there is not to be made, only written into
        raise BadInput(f"cannot {verb} run folder {path}: {exc.strerror or exc}{'; ' + hint if hint else ''}") from None
    finally:
        for p in reversed(made):
            try:
                p.rmdir()
            except OSError:
                pass
    return path


def no_gpu_reason() -> str | None:
    """Why this machine has no usable GPU, where it shows that without a worker started (no NVIDIA driver, no CUDA
    bindings for the workers): the finding `bench` makes before its run folder (agent/bench/evaluators.py). None with
    GPUs in sight, or where only a worker can tell: one that cannot start reports why through the evaluation
    (INFRA_ERROR)."""
    from ptxbench.tools.gpu import pool

    return None if pool.visible_devices() else pool.missing_gpu()


def gpu(hint: str = NO_GPU_HINT) -> None:
    """BadInput when no_gpu_reason() finds one: 'no GPU to evaluate on (why); hint'."""
    if reason := no_gpu_reason():
        raise BadInput(f"no GPU to evaluate on ({reason}); {hint}")


def toolchain(arch: str) -> None:
    """BadInput when this machine has no CUDA compiler for `arch` (tools/toolchain.find_toolchain: the pip wheels,
    $PTXBENCH_CUDA_BIN, PATH, /usr/local/cuda/bin): said before a run folder is made, a model called or a worker
    started, not as the INFRA_ERROR of every evaluation."""
    from ptxbench.tools.toolchain import ToolchainError, find_toolchain

    try:
        find_toolchain(arch)
    except ToolchainError as exc:
        raise BadInput(f"cannot compile here: {exc}") from None
    compile_cache()


def compile_cache() -> Path:
    """The compile cache's folder ($PTXBENCH_CACHE, default ~/.cache/ptxbench/<install>: tools/cache.py), made and
    written to once: every cubin lands there (the GPU worker loads it from there), so one that cannot be written (a
    read-only home, a $PTXBENCH_CACHE on a virtual file system) is one line naming the variable, not the traceback of
    the first compile."""
    from ptxbench.tools.cache import cache_root

    return cache_folder(cache_root(), "the compile cache")


def cache_folder(folder: Path, what: str) -> Path:
    """A folder under the ptxbench cache, made and written to once: one that cannot be is one line, "cannot write
    `what` FOLDER", naming $PTXBENCH_CACHE (where it was set) as the variable to point elsewhere."""
    import os

    from ptxbench.tools.cache import ENV_CACHE

    try:
        folder.mkdir(parents=True, exist_ok=True)
        write_probe(folder)
    except OSError as exc:
        given = f" (${ENV_CACHE})" if os.environ.get(ENV_CACHE) else ""
        raise BadInput(f"cannot write {what} {folder}{given}: {exc.strerror or exc}; point ${ENV_CACHE} at a "
                       "folder you can write") from None
    return folder
