"""Built-in models that need no key.

`builtin/reference` submits the workload's reference solution (an oracle that checks the set-up
end to end). `builtin/tuner` searches the parameters of the GEMM template
(workloads/solutions/gemm_template.py: PARAM_SPACE, default_params(), render(), validate()) guided
by the evaluator's outcomes: it moves one parameter at a time around the best passing point,
shrinking after resource failures and continuing in a direction that paid off. For workloads the
template does not cover (attention) it submits the reference solution: the wgmma + TMA forward where
its shape rule holds (workloads/solutions/attention.py fast_solution), else the plain CUDA-core one.
"""
from __future__ import annotations

import importlib
import json
import random
from types import ModuleType
from typing import Any

from ptxbench.tools.solution.language import detect_language

from .base import ModelError, ModelReply, ModelRequest, TurnOutcome

# Moves tried first around a point, from what helped hand-written Hopper GEMMs most (HOPPER-KERNELS.md):
# 2-CTA clusters with multicast, a deeper ring, the TMA-store epilogue, tile order; others follow.
PREFERRED_MOVES = [("cluster_m", 1), ("stages", 1), ("epilogue", 1), ("group_m", 1), ("stages", -1), ("group_m", -1),
                   ("consumers", 1), ("bm", 1), ("bn", -1), ("producer_regs", -1)]
RESOURCE_PARAMS = ("stages", "bn", "bm", "bk")
RESOURCE_WORDS = ("shared memory", "smem", "register", "spill", "C7511", "too many resources", "out of resources")
# Statuses whose parameters the search moves from: PASSED, and COMPILED when no GPU can say more.
SEARCH_FROM = ("PASSED", "COMPILED")


def fenced(source: str, note: str) -> str:
    return f"{note}\n\n```{detect_language(source)}\n{source.rstrip()}\n```\n"


def reference_source(workload_id: str) -> str:
    """The reference solution file of a workload, from ptxbench.workloads.solutions."""
    from ptxbench.workloads.registry import get_workload
    from ptxbench.workloads.solutions import attention

    workload = get_workload(workload_id)
    exact = attention.HERE / f"{workload.id}.cu"
    if exact.exists():
        return exact.read_text(encoding="utf-8")
    if workload.op == "gemm":  # the template is shape-generic: its default point is the reference
        template = importlib.import_module("ptxbench.workloads.solutions.gemm_template")
        return template.render(template.default_params())
    fast = attention.fast_solution(workload)  # the Hopper wgmma forward where it applies
    if fast is not None:
        return fast
    try:
        return attention.attention_solution(workload)
    except (KeyError, OSError) as exc:
        raise ModelError(f"no reference solution for {workload_id}: {exc}") from None


class ReferenceModel:
    name = "builtin/reference"

    def __init__(self, workload_id: str):
        self.workload_id = workload_id

    def query(self, request: ModelRequest) -> ModelReply:
        source = reference_source(self.workload_id)
        return ModelReply(content=fenced(source, f"The reference solution of {self.workload_id}."), tags={"reference": True})


class UnchangedModel:
    """The repair track's floor: resubmits the kernel it was given (--start-from) untouched, every turn."""

    name = "builtin/unchanged"

    def __init__(self, workload_id: str):
        self.workload_id = workload_id

    def query(self, request: ModelRequest) -> ModelReply:
        if not request.start_source:
            raise ModelError("builtin/unchanged resubmits the --start-from kernel, and this trajectory has none")
        return ModelReply(content=fenced(request.start_source, "The kernel as it was handed in, unchanged."),
                          tags={"unchanged": True})


def _as_dict(params: Any) -> dict[str, Any]:
    return params.model_dump() if hasattr(params, "model_dump") else dict(params)


def _key(params: dict[str, Any]) -> str:
    return json.dumps(params, sort_keys=True, default=str)


class TunerModel:
    name = "builtin/tuner"

    def __init__(self, workload_id: str, template: ModuleType | str | None = None, seed: int = 0):
        self.workload_id = workload_id
        self.seed = seed
        self.template = self._load_template(template)
        self.shape = self._shape()

    def _shape(self) -> tuple[int, int, int] | None:
        from ptxbench.workloads.registry import get_workload

        symbols = get_workload(self.workload_id).symbols
        return tuple(int(symbols[k]) for k in ("M", "N", "K")) if all(k in symbols for k in "MNK") else None

    def _load_template(self, template: ModuleType | str | None) -> ModuleType | None:
        from ptxbench.workloads.registry import get_workload

        if isinstance(template, ModuleType):
            return template
        if template is None and get_workload(self.workload_id).op != "gemm":
            return None  # the template covers GEMM only
        return importlib.import_module(template or "ptxbench.workloads.solutions.gemm_template")

    def query(self, request: ModelRequest) -> ModelReply:
        if self.template is None:
            source = reference_source(self.workload_id)
            return ModelReply(content=fenced(source, "No tunable template for this workload: the reference solution."),
                              tags={"reference": True})
        params, why, move = self.next_params(request.history)
        source = self.template.render(params)
        note = f"Tuner, turn {request.turn}: {why}\nparams = {_key(params)}"
        return ModelReply(content=fenced(source, note), tags={"params": params, "move": list(move) if move else None})

    # -- search ---------------------------------------------------------------------------------
    def _valid(self, params: dict[str, Any]) -> bool:
        try:
            try:
                verdict = self.template.validate(params, shape=self.shape)
            except TypeError:  # a template whose validate takes no shape
                verdict = self.template.validate(params)
        except (ValueError, AssertionError, KeyError, TypeError):
            return False
        if verdict is None or verdict is True:
            return True
        return False if verdict is False else not verdict  # a list of problems

    def next_params(self, history: list[TurnOutcome]) -> tuple[dict[str, Any], str, tuple | None]:
        """The next parameters to try, why, and the one-parameter move (name, step) that made them."""
        tried = [h for h in history if "params" in h.tags]
        seen = {_key(h.tags["params"]) for h in tried}
        default = _as_dict(self.template.default_params())
        if not tried:
            return default, "start from the template's default parameters", None
        passing = sorted((h for h in tried if h.status in SEARCH_FROM), key=lambda h: h.speedup or 0.0, reverse=True)
        last = tried[-1]
        resource_failure = last.status not in SEARCH_FROM and any(w.lower() in last.message.lower() for w in RESOURCE_WORDS)
        # A move that just produced the new best is worth repeating from there.
        momentum = tuple(last.tags["move"]) if passing and passing[0] is last and last.tags.get("move") else None
        for base in [h.tags["params"] for h in passing] or [default]:
            for params, why, move in self._moves(base, resource_failure, momentum):
                if _key(params) not in seen and self._valid(params):
                    return params, why, move
        rng = random.Random(self.seed + len(tried))
        space = self.template.PARAM_SPACE
        for _ in range(500):
            params = {name: rng.choice(list(values)) for name, values in space.items()}
            if _key(params) not in seen and self._valid(params):
                return params, "neighbourhood exhausted: a random valid point", None
        best = passing[0].tags["params"] if passing else default
        return dict(best), "search space exhausted: resubmit the best point", None

    def _moves(self, base: dict[str, Any], shrink_first: bool, momentum: tuple | None):
        """One-parameter moves around `base`, the most promising first."""
        moves: list[tuple[int, dict[str, Any], str, tuple]] = []
        for order, (name, values) in enumerate(self.template.PARAM_SPACE.items()):
            values = list(values)
            if base.get(name) not in values:
                continue
            i = values.index(base[name])
            for step in (-1, 1):
                if not 0 <= i + step < len(values):
                    continue
                preferred = (name, step) in PREFERRED_MOVES
                rank = PREFERRED_MOVES.index((name, step)) if preferred else 100 + order * 2 + (step > 0)
                why = f"{'lower' if step < 0 else 'raise'} {name}: {base[name]} -> {values[i + step]}"
                if shrink_first and step < 0 and name in RESOURCE_PARAMS:
                    rank -= 1000
                    why += " (the last try ran out of resources)"
                if momentum == (name, step):
                    rank -= 2000
                    why += " (the same move just improved the speedup)"
                moves.append((rank, {**base, name: values[i + step]}, why, (name, step)))
        for _, params, why, move in sorted(moves, key=lambda m: m[0]):
            yield params, why, move
