"""`bench --track repair`: every model on every suite task, each trajectory starting from the broken kernel
(OptimizeConfig.start_from, evaluated as turn 0) with a small turn budget and no early stop."""
from __future__ import annotations

from ..loop.state import OptimizeConfig
from .suite import SuiteMissing, load_suite

REPAIR_TURNS = 4


def expand_repair(config) -> list[OptimizeConfig]:
    """The repair matrix of a BenchConfig (models x tasks x prompts x trajectories), index-major."""
    try:
        suite = load_suite(config.suite)
    except SuiteMissing as exc:  # a bad matrix: the bench reports it before writing anything
        raise ValueError(str(exc)) from None
    tasks = [t for t in suite.tasks if not config.workloads or t.workload in config.workloads]
    if not tasks:
        raise ValueError(f"no repair task in {suite.folder} for workloads {', '.join(config.workloads) or '(any)'}")
    out = []
    for index in range(config.trajectories):
        for model in config.models:
            for task in tasks:
                for prompt in config.prompts:
                    seed = None if config.seed is None else config.seed + index
                    out.append(OptimizeConfig(
                        **{**config.optimize, "workload": task.workload, "model": model, "prompt": prompt, "index": index,
                           "turns": config.turns, "mode": config.mode, "arch": config.arch, "no_gpu": config.no_gpu,
                           "api_base": config.api_base, "target_speedup": None, "seed": seed,
                           "start_from": str(suite.solution_path(task).resolve()), "repair_task": task.id,
                           # the suite's own marks travel with the trajectory: export on another machine knows only
                           # its own HELD_OUT_CLASSES
                           "repair_held_out": task.held_out or task.bug_class in suite.held_out_classes}))
    return out
