"""The template side of builtin/tuner: which values a lever moves to, validity, and repairs.

Works for any template module with PARAM_SPACE, default_params(), render(params) and
validate(params[, shape]) (a list of problems, empty when the point can be built). A move changes one
lever; when that leaves the point unbuildable (a deeper ring over the shared-memory limit, a taller
tile whose accumulators no longer fit), `fit` changes the fewest other parameters, the nearest values
first, shrinking the ring before anything else, never undoing a lever already at its favoured value
if another repair exists.
"""
from __future__ import annotations

import itertools
import json
from types import ModuleType
from typing import Any, Callable

Params = dict[str, Any]


def as_dict(params: Any) -> Params:
    return params.model_dump() if hasattr(params, "model_dump") else dict(params)


def key(params: Params) -> str:
    return json.dumps(params, sort_keys=True, default=str)


def is_valid(template: ModuleType, params: Params, shape: tuple[int, int, int] | None) -> bool:
    try:
        try:
            verdict = template.validate(params, shape=shape)
        except TypeError:  # a template whose validate takes no shape
            verdict = template.validate(params)
    except (ValueError, AssertionError, KeyError, TypeError):
        return False
    return verdict is None or verdict is True or (verdict is not False and not verdict)


def ordered(values: list) -> list:
    """The values of one parameter, smallest first when they are numbers (booleans keep their order)."""
    numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
    return sorted(values) if numeric else list(values)


def shifted(values: list, current: Any, steps: int) -> Any | None:
    """The value `steps` places up (or down) the ordered values; the last one there is when it runs out;
    None when `current` is already at that end or is not a value of the space."""
    vals = ordered(values)
    if current not in vals:
        return None
    i = vals.index(current)
    j = max(0, min(len(vals) - 1, i + steps))
    return None if j == i else vals[j]


def fit(params: Params, moved: str | set[str], space: dict[str, list], valid: Callable[[Params], bool],
        ring: str | None = None, goals: dict[str, Any] | None = None) -> tuple[Params, list[str]] | None:
    """`params` made buildable by changing the fewest other parameters (their nearest values first);
    the repair's description; None when no change of one or two other parameters does it."""
    if valid(params):
        return params, []
    goals = goals or {}
    moved = {moved} if isinstance(moved, str) else moved
    others = [n for n in space if n not in moved and n in params]

    def options(name: str) -> list[tuple[float, Any]]:
        vals = ordered(space[name])
        if params[name] not in vals:
            return []
        i = vals.index(params[name])
        out = []
        for j, v in enumerate(vals):
            if j == i:
                continue
            cost = abs(j - i) * (0.5 if name == ring and j < i else 1.0)  # a shallower ring is the cheapest repair
            if name in goals and params[name] == goals[name]:
                cost += 10.0  # leave a favoured value alone unless nothing else works
            out.append((cost, v))
        return out

    for depth in (1, 2):
        best: tuple[float, Params, list[str]] | None = None
        for names in itertools.combinations(others, depth):
            for combo in itertools.product(*(options(n) for n in names)):
                cost = sum(c for c, _ in combo)
                if best is not None and cost >= best[0]:
                    continue
                candidate = {**params, **{n: v for n, (_, v) in zip(names, combo)}}
                if valid(candidate):
                    best = (cost, candidate, [f"{n} {params[n]} -> {v}" for n, (_, v) in zip(names, combo)])
        if best is not None:
            return best[1], best[2]
    return None
