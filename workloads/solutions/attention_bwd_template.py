"""The Hopper attention backward's parameter space, over the built versions of attention_bwd_wgmma.cu.

A point carries the problem it is built for (head_dim, causal, gqa: `params_for(workload)` sets them, never
searched) and four searched levers, each a way the kernel can be built (attention_bwd_variants/):

    dq        "vector": each consumer thread adds its dQ rows with float2 atomics (16 per query block);
              "bulk": dQ through shared memory and bulk reduce-adds (`cp.reduce.async.bulk .add.f32`): one per
              consumer and query block from its own swizzled tile (tiles_d96; at D = 64 only with 3 stages, the
              2-stage build is bulk_dq, one per block in the 128-wide kernels and D = 64's float2 atomics)
    stages    the Q / dO ring depth of the 128-wide kernels: 2 or 3 (D = 64 runs 2 either way)
    schedule  "cooperative": both consumers meet on a named barrier every query block; "decoupled": each
              computes the previous block's dQ and waits on the other only for that block's dS^T
    order     "head_fastest": grid [B * H, S / 128], 132 heads in flight, each re-reading its Q / dO / dQ rows
              from DRAM; "head_groups": the key blocks of 4 heads side by side, longest-first across the group
              (they share those rows in L2: -27% time at D = 128 on the H200)

Not every combination is built: `BUILT` lists those that are (the checked-in file, bulk_dq, tiles_d96,
decoupled, each in either order; the reference is pair_d64_r40+head_groups), and `validate` names the others, so builtin/tuner's repairs move to the nearest built
one. `render` is fast_backward's text for the point's problem from its variant. The default point is the reference
(`reference_backward`: bulk dQ, a 3-deep ring, cooperative, head groups); the weak point is the checked-in file
(vector dQ, 2 stages, head-fastest grid), about 0.6x the reference's speed at D = 128 on the H200, where a climb starts
(tests/workloads/test_attention_bwd_template.py keeps both equal to their texts).
"""
from __future__ import annotations

from typing import Any, Mapping

from pydantic import BaseModel, ConfigDict, Field

from .attention_backward import HEAD_DIMS, REFERENCE_VARIANT, backward_text, covers
from .attention_template import problem_of, space_problems

PROBLEM = ("head_dim", "causal", "gqa")


class BwdParams(BaseModel):
    """One point: the problem it is built for, then the searched parameters (see PARAM_SPACE)."""

    # an unknown name (a misspelt option, or one deleted after its measurement) is an error, never a silent default
    model_config = ConfigDict(extra="forbid")

    head_dim: int = Field(128, description="D: 64, 96 (the 128-wide kernels, TMA zero-fills the rest) or 128")
    causal: bool = Field(False, description="top-left aligned mask, key j <= query i")
    gqa: bool = Field(False, description="K / V have HKV heads; dK / dV summed over the query heads of a group")
    dq: str = Field("bulk", description="'vector' (float2 atomics per thread) or 'bulk' (bulk reduce-adds from "
                                        "shared memory)")
    stages: int = Field(3, description="Q / dO ring depth of the 128-wide kernels")
    schedule: str = Field("cooperative", description="'cooperative' (a named barrier per block) or 'decoupled' "
                                                     "(each consumer runs the previous block's dQ)")
    order: str = Field("head_groups", description="'head_fastest' (grid [B * H, S / 128]) or 'head_groups' (the key "
                                                  "blocks of 4 heads side by side, longest-first)")


PARAM_SPACE: dict[str, list] = {"dq": ["vector", "bulk"], "stages": [2, 3], "schedule": ["cooperative", "decoupled"],
                                "order": ["head_fastest", "head_groups"]}
SEARCHED = ("dq", "stages", "schedule", "order")
# (dq, stages, schedule) -> the variant of attention_bwd_variants/ that builds it (None: the checked-in file).
# bulk_dq (2 stages) keeps D = 64's float2 atomics: at D = 64 only the 3-stage point reduces dQ in bulk.
_BUILDS: dict[tuple[str, int, str], str | None] = {
    ("vector", 2, "cooperative"): None,
    ("bulk", 2, "cooperative"): "bulk_dq",
    # tiles_d96 (dq_tiles with D = 64's 128-row blocks, D = 96's own k-steps, 16 B stores) with each 128-wide block's
    # S^T issued by the block before it, a warp-uniform consumer index, the dQ tile's stores straight there and the
    # dS^T tile by stmatrix (st_static, ds_stmatrix), the preprocess in 16-byte accesses (pre_plain), and at D = 96
    # dq_late's block with the dead causal block (late_d96), and in the 128-wide kernels the dQ tiles reduced by a
    # writer warp of the producer warpgroup (dq_writer), at D = 96 too (writer_d96), and in the D = 64 kernels by two
    # writer warps, one per consumer, their warpgroup at 40 registers (pair_d64_r40)
    ("bulk", 3, "cooperative"): "pair_d64_r40",
    ("vector", 3, "decoupled"): "decoupled",
}
# Every build in either launch order (attention_bwd_variants.ORDERS): "X+head_groups" is X launched by head groups.
BUILT: dict[tuple[str, int, str, str], str | None] = {
    **{(*k, "head_fastest"): v for k, v in _BUILDS.items()},
    **{(*k, "head_groups"): f"{v or 'checked-in'}+head_groups" for k, v in _BUILDS.items()},
}

# builtin/tuner (agent/models/tuner_rules.py): role -> (parameter, favoured value or None).
TUNER_LEVERS: dict[str, tuple[str, Any]] = {
    "dq_reduce": ("dq", "bulk"), "ring": ("stages", None), "schedule": ("schedule", "decoupled"),
    "order": ("order", "head_groups"),
}
# Regions of the rendered file a profile's hot lines are matched to (substrings of the source lines).
TUNER_LINES: dict[str, tuple[str, ...]] = {
    "stage_wait": ("mbar_wait(&fullQ", "mbar_wait(&fulldO"),
    "softmax": ("ex2(fmaf(", "named_barrier_sync(1, 256)"),  # the exponentials, and the consumers' meeting
    "dq_reduce": ("atomicAdd(reinterpret_cast<float2*>", "bulk_reduce_add(", "bulk_wait_read("),
    "mma_issue": ("wgmma_",),
}
# Before any evidence of this run (fraction of the time): what each move gave on the H200 (bench/results/attention_bwd.md,
# "v2 candidates": the bulk reduction -17% time at D = 128 and -21% at D = 64; "v4": head groups -27% at D = 128,
# decoupled consumers -6% once both run in head order, -2% before); predicted from the v1 profile they were 0.05, 0.01
# and 0.10 (schedule), and 0.20 for the order (from the v3 profile).


def _ring_worth(old: int, new: int, params: Mapping[str, Any]) -> float:
    """2 -> 3 stages moves to another build, not only a deeper ring. With bulk dQ the 3-stage point is the reference
    (pair_d64_r40, every step measured faster since bulk_dq): 8.46 -> 6.65 ms at D = 128 in head groups, -21%
    (late_d96 before it: 7.16 ms, -15%; attention_bwd.md "v26-v27 measured"). With vector
    dQ it is the decoupled build: 10.30 -> 9.81 ms, -5% (docs/examples/tuner-climb-mha_bwd_d128, 2026-12-02). The
    ring alone was worth about 1% (v2)."""
    return 0.21 if params.get("dq") == "bulk" else 0.05


def _ring_words(params: Mapping[str, Any]) -> str:
    build = _BUILDS.get((params.get("dq"), params.get("stages"), params.get("schedule")))
    if build == REFERENCE_VARIANT.partition("+")[0]:
        return ("the 3-stage build, the reference: a deeper Q / dO ring with the steps measured faster on it (each "
                "block's S^T issued by the block before, a warp-uniform consumer index, the dS^T tile by stmatrix, a "
                "16-byte preprocess, the dQ tiles reduced by a writer warp of the producer warpgroup)")
    return "a deeper Q / dO ring (more TMA loads in flight ahead of the math)"


TUNER_PRIORS: dict[str, Any] = {"dq_reduce": 0.17, "schedule": 0.06, "ring": _ring_worth, "order": 0.27}
TUNER_WORDS: dict[str, Any] = {
    "dq_reduce": "dQ through shared memory and bulk reduce-adds (instead of 16 float2 atomics per thread and query "
                 "block)",
    "ring": _ring_words,
    "order": "the key blocks of 4 heads launched side by side, longest-first (they share each head's Q, dO and "
             "dQ rows in L2 instead of 132 heads in flight re-reading them from DRAM)",
    "schedule": "decoupled consumers (each runs the previous block's dQ, so one's exponentials overlap the other's "
                "tensor work instead of meeting on a barrier every block)",
}


def default_params(workload: Any | None = None) -> BwdParams:
    """The reference point for a workload (without one: mha_bwd_d128)."""
    return BwdParams(**problem_of(workload))


def weak_params(workload: Any | None = None) -> BwdParams:
    """The checked-in file's point (float2 atomics for dQ, a 2-deep ring, head-fastest grid): where a climb starts."""
    return default_params(workload).model_copy(update={"dq": "vector", "stages": 2, "order": "head_fastest"})


def params_for(workload: Any, **changes: Any) -> BwdParams:
    """default_params(workload) with some searched parameters changed."""
    return default_params(workload).model_copy(update=changes)


def _key(p: BwdParams) -> tuple:
    return tuple(getattr(p, k) for k in SEARCHED)


def _words(key: tuple) -> str:
    return ", ".join(f"{k}={v}" for k, v in zip(SEARCHED, key))


def _coerce(params: BwdParams | Mapping[str, Any]) -> BwdParams:
    return params if isinstance(params, BwdParams) else BwdParams(**params)


def variant_of(params: BwdParams | Mapping[str, Any]) -> str | None:
    """The variant name that builds this point (None: the checked-in file); KeyError when none does."""
    p = _coerce(params)
    return BUILT[_key(p)]


def validate(params: BwdParams | Mapping[str, Any], shape: Any = None) -> list[str]:
    """Reasons this point cannot be built or run (empty when it can). `shape`: a Workload (or None)."""
    p = _coerce(params)
    bad = space_problems(p, PARAM_SPACE, HEAD_DIMS)
    if not bad and _key(p) not in BUILT:
        built = "; ".join(_words(k) for k in BUILT)
        bad.append(f"{_words(_key(p))} is not built (built: {built})")
    if not bad and p.head_dim == 64 and p.dq == "bulk" and (variant_of(p) or "").split("+")[0] == "bulk_dq":
        bad.append("at D = 64 dQ is reduced in bulk only with stages=3 (the 2-stage build keeps D = 64's float2 "
                   "atomics; D = 64 runs 2 stages either way)")
    if shape is not None and hasattr(shape, "symbols"):
        rule = covers(shape)
        if rule:
            bad.append(rule)
        elif problem_of(shape) != {k: getattr(p, k) for k in PROBLEM}:
            bad.append(f"the point is built for {({k: getattr(p, k) for k in PROBLEM})}, the workload is {problem_of(shape)}")
    return bad


def render(params: BwdParams | Mapping[str, Any]) -> str:
    """The solution file of this point (the variant's text with the plan lines of its problem)."""
    p = _coerce(params)
    bad = validate(p)
    if bad:
        raise ValueError("; ".join(bad))
    name = variant_of(p)
    base = None
    if name is not None:
        from .attention_bwd_variants import variant_text

        base = variant_text(name)
    return backward_text(p.head_dim, p.causal, p.gqa, base)
