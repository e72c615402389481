"""Built-in models that need no key.

`builtin/reference` submits the workload's reference solution (an oracle that checks the set-up
end to end); `builtin/unchanged` resubmits the --start-from kernel. `builtin/tuner` (and
`builtin/tuner:weak`) lives in tuner.py: a template search that chooses each point from the last
evaluations' evidence; for workloads no template covers it submits `reference_source(workload)`: the
wgmma + TMA forward or backward where its shape rule holds (workloads/solutions/attention.py fast_solution,
attention_backward.py reference_backward), else the plain CUDA-core one.
"""
from __future__ import annotations

import importlib

from ptxbench.tools.solution.language import detect_language

from .base import ModelError, ModelReply, ModelRequest


def fenced(source: str, note: str) -> str:
    return f"{note}\n\n```{detect_language(source)}\n{source.rstrip()}\n```\n"


def reference_source(workload_id: str) -> str:
    """The reference solution file of a workload, from ptxbench.workloads.solutions."""
    from ptxbench.workloads.registry import get_workload
    from ptxbench.workloads.solutions import attention, attention_backward

    workload = get_workload(workload_id)
    exact = attention.HERE / f"{workload.id}.cu"
    if exact.exists():
        return exact.read_text(encoding="utf-8")
    if workload.op == "gemm":  # the template's point for the shape: default_params(), narrower tiles for small M
        template = importlib.import_module("ptxbench.workloads.solutions.gemm_template")
        return template.render(template.params_for(workload))
    # the Hopper wgmma forward or backward where it applies
    fast = attention.fast_solution(workload) or attention_backward.reference_backward(workload)
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


from .tuner import TunerModel, WeakTunerModel  # noqa: E402  (their old home: imports of builtin.TunerModel keep working)

__all__ = ["ReferenceModel", "UnchangedModel", "TunerModel", "WeakTunerModel", "fenced", "reference_source"]
