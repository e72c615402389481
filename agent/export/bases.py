"""Correct kernels the bug-injection recipe breaks besides each workload's reference.

A base is a correct solution file of a workload and the bug classes made from it. Every workload's own base is
its reference (`reference_source`, every class). A GEMM workload has one more: the GEMM template rendered with
2-CTA clusters and TMA multicast of B (`default_params()` with `cluster_m = 2`; it PASSED on the H200 at about
the default's speed), the base of the cluster / multicast classes (mutations.py CLUSTER_CLASSES), whose code the
unclustered reference holds only as dead `if constexpr (CLUSTER_M > 1)` branches. An attention backward has one
more: the checked-in file's point (dQ by float2 atomics, attention_backward.fast_backward), the base of the float2
dQ classes, code its reference no longer has (dQ by bulk reduce-adds). Only those classes are made
on an extra base, so a candidate's id (workload__class) stays unique. Used by agent/repairs/candidates.py (the repair suite),
agent/export/synth.py (synth-repairs) and bench/check_mutations.py.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass

REFERENCE = "reference"
CLUSTER2 = "cluster2"
VECTOR_DQ = "vector_dq"
VECTOR_DQ_CLASSES = ("bwd_dq_plain_store", "bwd_dq_nonatomic_add")


@dataclass(frozen=True)
class Base:
    name: str
    description: str
    classes: tuple[str, ...] | None  # the bug classes made on this base; None: every class


def _gemm_template():
    return importlib.import_module("ptxbench.workloads.solutions.gemm_template")


def clustered_gemm_params():
    """The template's default point with 2-CTA clusters along M sharing each B tile through TMA multicast."""
    return _gemm_template().default_params().model_copy(update={"cluster_m": 2})


def extra_bases(workload_id: str) -> list[Base]:
    """The bases of a workload other than its reference."""
    from ptxbench.workloads.registry import get_workload
    from ptxbench.workloads.solutions.attention_backward import covers as backward_covers

    from .mutations import CLUSTER_CLASSES

    workload = get_workload(workload_id)
    if workload.op == "gemm":
        return [Base(CLUSTER2, "the GEMM template's default point with cluster_m = 2 (2-CTA clusters, B multicast)",
                     CLUSTER_CLASSES)]
    if workload.op == "mha_bwd" and backward_covers(workload) is None:
        return [Base(VECTOR_DQ, "the attention backward's checked-in file (dQ by float2 atomics, 2 stages)",
                     VECTOR_DQ_CLASSES)]
    return []


def base_source(workload_id: str, base: str = REFERENCE) -> str:
    """The correct solution file of `workload_id` that base `base` names."""
    from ..models.builtin import reference_source

    if base == REFERENCE:
        return reference_source(workload_id)
    if base == CLUSTER2 and any(b.name == base for b in extra_bases(workload_id)):
        return _gemm_template().render(clustered_gemm_params())
    if base == VECTOR_DQ and any(b.name == base for b in extra_bases(workload_id)):
        from ptxbench.workloads.registry import get_workload
        from ptxbench.workloads.solutions.attention_backward import fast_backward

        return fast_backward(get_workload(workload_id))
    raise KeyError(f"{workload_id} has no base {base!r} (bases: {REFERENCE}, "
                   f"{', '.join(b.name for b in extra_bases(workload_id)) or 'no other'})")
