"""Estimates over repair tasks: the task, not the trajectory, is the unit an interval is drawn over.

Trajectories of one task share its broken kernel, so they are not independent: a task fixed every time, run 12
times, says little more than once. Drawn one by one, 57 tasks each always or never fixed read 49.1% [45.4, 52.9]
from 12 trajectories a task and [36.6, 61.7] from one: the repeats narrowed the interval with no new information.
Here each task is one unit: its value is the mean of its trajectories' (each trajectory of a task weighs alike), its
weight 1 (each task alike) or what `task_weight` gives it (1 / the tasks of its bug class: each class alike), and the
bootstrap draws tasks with replacement, all of a task's trajectories with it (stats.ratio_estimate over tasks: its
expanded tails, MIN_BOOTSTRAP and Wilson fallback count tasks). Tasks in name order, so a run scores the same
whatever order its records were read in.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Callable, Iterable, Protocol

from .stats import Estimate, ratio_estimate


class HasTask(Protocol):
    task: str


def task_estimate(rows: Iterable[HasTask], value: Callable[[HasTask], float], share: bool = True,
                  task_weight: Callable[[str], float] | None = None) -> Estimate:
    """The weighted mean over tasks of each task's mean `value`, with a bootstrap interval over tasks (`share`: the
    value is 0 or 1, and where the bootstrap gives no width, Wilson's interval over the tasks). `ci_method` says
    'over tasks'; `n` is the tasks it rests on."""
    by_task: dict[str, list[float]] = defaultdict(list)
    for row in rows:
        by_task[row.task].append(float(value(row)))
    tasks = sorted(by_task)
    weights = [1.0 if task_weight is None else float(task_weight(t)) for t in tasks]
    means = [sum(by_task[t]) / len(by_task[t]) for t in tasks]
    est = ratio_estimate([w * m for w, m in zip(weights, means)], weights, share=share)
    return est.model_copy(update={"ci_method": f"{est.ci_method} over tasks" if est.ci_method else ""})


def class_weights(rows: Iterable, key: Callable = lambda r: r.bug_class) -> Callable[[str], float]:
    """task -> 1 / (tasks of its bug class among `rows`): each bug class weighs alike, its tasks alike within it."""
    class_of = {r.task: key(r) for r in rows}
    tasks_in: dict[str, int] = defaultdict(int)
    for cls in class_of.values():
        tasks_in[cls] += 1
    return lambda task: 1.0 / tasks_in[class_of[task]]
