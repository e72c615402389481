"""`bench --track repair`: every model on every suite task, each trajectory starting from the broken kernel
(OptimizeConfig.start_from, evaluated as turn 0) with a small turn budget and no early stop.

With --no-gpu only the tasks whose recorded verdict needs no GPU (suite.NO_GPU_VERDICTS: COMPILE_ERROR,
PLAN_ERROR) run: a runtime failure's repair cannot be judged without running it (`left_out` says which went).
A builtin/ model answers the same input the same way, so with `builtin_trajectories` set (the CLI sets 1 unless
--trajectories is given) it runs that many trajectories per task instead of `trajectories`."""
from __future__ import annotations

from collections import Counter

from ..bench.matrix import model_timeout
from ..loop.state import OptimizeConfig
from .suite import RepairSuite, RepairTask, SuiteMissing, judged_without_gpu, load_suite

REPAIR_TURNS = 4


def deterministic(model: str) -> bool:
    """A model whose reply is a function of its input (the builtin/ models: reference, unchanged, the tuners)."""
    return model.startswith("builtin/")


def trajectories_of(config, model: str) -> int:
    """Trajectories per (model, task, prompt) cell of the repair matrix."""
    if config.builtin_trajectories is not None and deterministic(model):
        return config.builtin_trajectories
    return config.trajectories


def repair_tasks(config) -> tuple[list[RepairTask], list[RepairTask], RepairSuite]:
    """(the tasks the matrix runs, the tasks --no-gpu leaves out, the suite)."""
    try:
        suite = load_suite(config.suite)
    except SuiteMissing as exc:  # a bad matrix: the bench reports it before writing anything
        raise ValueError(str(exc)) from None
    tasks = [t for t in suite.tasks if not config.workloads or t.workload in config.workloads]
    if not tasks:
        raise ValueError(f"no repair task in {suite.folder} for workloads {', '.join(config.workloads) or '(any)'}")
    every = not (config.no_gpu and config.no_gpu_judged_only)  # with a GPU (or a run recorded before): all

    def judged(t: RepairTask) -> bool:
        return every or judged_without_gpu(t.verdict.status)

    kept = [t for t in tasks if judged(t)]
    left_out = [t for t in tasks if not judged(t)]
    if not kept:
        raise ValueError(f"--no-gpu: none of the {len(tasks)} repair tasks can be judged without a GPU (their recorded "
                         f"verdicts: {_counts(left_out)}); run them on a GPU")
    return kept, left_out, suite


def suite_flush(config) -> str:
    """The L2 flush a new repair run is timed from unless its `optimize` table names one: the suite's own (its
    unbroken speedups were timed from it, and a fix's "speed kept" compares only with a speedup timed alike), or ""
    when the suite does not record one or cannot be read (the matrix's own check reports an unreadable suite)."""
    try:
        return load_suite(config.suite).l2_flush
    except (ValueError, OSError):
        return ""


def left_out_line(config) -> str:
    """One line on the tasks this repair matrix leaves out (--no-gpu), or "" when it runs them all."""
    kept, left_out, _ = repair_tasks(config)
    if not left_out:
        return ""
    return (f"--no-gpu: {len(left_out)} of {len(kept) + len(left_out)} repair tasks left out: their broken kernels "
            f"fail only when run ({_counts(left_out)}), so a repair cannot be judged without a GPU; "
            f"{len(kept)} compile / plan failures run")


def _counts(tasks: list[RepairTask]) -> str:
    return ", ".join(f"{status} {n}" for status, n in Counter(t.verdict.status for t in tasks).most_common())


def expand_repair(config) -> list[OptimizeConfig]:
    """The repair matrix of a BenchConfig (models x tasks x prompts x trajectories), index-major."""
    tasks, _, suite = repair_tasks(config)
    out = []
    for index in range(max(trajectories_of(config, m) for m in config.models)):
        for model in config.models:
            if index >= trajectories_of(config, model):
                continue
            for task in tasks:
                for prompt in config.prompts:
                    seed = None if config.seed is None else config.seed + index
                    out.append(OptimizeConfig(
                        **{**config.optimize, "workload": task.workload, "model": model, "prompt": prompt, "index": index,
                           "turns": config.turns, "mode": config.mode, "arch": config.arch, "no_gpu": config.no_gpu,
                           "api_base": config.api_base, "target_speedup": None, "seed": seed,
                           **model_timeout(config),
                           "start_from": str(suite.solution_path(task).resolve()), "repair_task": task.id,
                           # the suite's own marks travel with the trajectory: export on another machine knows only
                           # its own HELD_OUT_CLASSES
                           "repair_held_out": task.held_out or task.bug_class in suite.held_out_classes}))
    return out
