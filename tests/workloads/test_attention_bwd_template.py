"""The attention backward as a template (workloads/solutions/attention_bwd_template.py): its default point is the
reference (reference_backward) and its weak point the checked-in file for every backward workload, each built point
is its variant with the workload's plan lines,
and every other combination or a mismatched problem is named, never rendered."""
from __future__ import annotations

import pytest

from ptxbench.tools.solution.parse import parse_solution
from ptxbench.tools.solution.plan import Solution
from ptxbench.workloads.registry import get_workload, list_workloads
from ptxbench.workloads.solutions import attention_bwd_template as bt
from ptxbench.workloads.solutions.attention_backward import REFERENCE_VARIANT, fast_backward, reference_backward
from ptxbench.workloads.solutions.attention_bwd_variants import VARIANTS, variant_text

BACKWARD = [w.id for w in list_workloads() if w.op == "mha_bwd"]


@pytest.mark.parametrize("wid", BACKWARD)
def test_the_default_point_renders_the_reference_and_every_built_point_its_variant(wid):
    workload = get_workload(wid)
    assert bt.validate(bt.default_params(workload), workload) == []
    assert bt.render(bt.default_params(workload)) == reference_backward(workload)
    assert bt.render(bt.weak_params(workload)) == fast_backward(workload)  # the checked-in file
    for key, name in bt.BUILT.items():
        point = bt.params_for(workload, **dict(zip(bt.SEARCHED, key)))
        if (name or "").split("+")[0] == "bulk_dq" and point.head_dim == 64:  # its D = 64 kernels keep the float2 atomics: not a bulk point
            assert bt.validate(point, workload) and "only with stages=3" in bt.validate(point, workload)[0]
            continue
        assert bt.validate(point, workload) == []
        text = bt.render(point)
        assert text == fast_backward(workload, variant_text(name) if name else None)
        assert isinstance(parse_solution(text, workload, "sm_90a"), Solution)  # its plan is one this workload takes


def test_every_variant_is_a_point_the_reference_is_the_default_and_the_checked_in_file_the_weak_start():
    # bulk_dq_s3 and bulk_dq_d64 are the reference's bases, not points (dq_tiles, on them, measured faster at every
    # D); the candidates are builds measured beside the reference and not promoted (own_keys lost 6-9%). Every build is a point in either launch order
    # (head_major lost to head_groups on the H200: an order for measurements only).
    builds = {n.partition("+")[0] for n in bt.BUILT.values() if n} - {"checked-in"}
    candidates = {"own_keys", "own_keys_s3", "own_keys_wide", "dq_tiles_wide", "q128_d64", "d96_ksteps",
                  "tiles_stack", "dv_early", "dv_uniform", "dq_static"}
    # dv_early, dv_uniform and dq_static were faster, with dS from bf16 P: their dQ missed the harness's rule on some
    # causal inputs (attention_bwd.md v12). dq_tiles, q128_d64, tiles_stack, tiles_d96, st_ahead and st_uniform are
    # the reference's bases too (pair_d64_r40 is pair_d64 with its D = 64 kernels' registers split 40 / 232, pair_d64 is
    # writer_d96 with two writer warps in the D = 64 kernels, writer_d96 is dq_writer with the writer warp in the D = 96
    # kernels too, dq_writer is
    # late_d96 with the 128-wide kernels' dQ tiles reduced by a writer warp,
    # late_d96 is pre_plain with dq_late's and the dead causal block at D = 96 only,
    # pre_plain is ds_stmatrix with the preprocess in 16-byte accesses, ds_stmatrix is
    # st_static with the dS^T tile by stmatrix, st_static is st_uniform with the dQ tile's stores straight, st_uniform
    # is st_ahead with a warp-uniform consumer index, st_ahead is tiles_d96 with each block's S^T issued by the block
    # before it; tiles_d96 is dq_tiles + q128_d64 + D = 96's k-steps + the wide epilogue: level or faster at every D on
    # the H200, bench/results/attention_bwd.md v6-v23)
    bases = {"bulk_dq_s3", "bulk_dq_d64", "dq_tiles", "tiles_d96", "st_ahead", "st_uniform", "st_static", "ds_stmatrix",
             "pre_plain", "late_d96", "dq_writer", "writer_d96", "pair_d64"}
    # measured beside the reference and slower where it counts (attention_bwd.md v21-v22): stats_wide's layout and
    # dq_late outside D = 96, the causal skip without dq_late at D = 128 causal
    measured = {"stats_wide", "pre_wide", "dq_late", "causal_skip", "skip_plain"}
    assert sorted(builds | bases | candidates | measured) == sorted(VARIANTS)
    for key, name in bt.BUILT.items():
        if key[-1] == "head_groups":
            assert name.endswith("+head_groups") and bt.BUILT[(*key[:-1], "head_fastest")] == (
                None if name.startswith("checked-in+") else name.partition("+")[0])
    wl = get_workload("mha_bwd_d128")
    assert bt.render(bt.default_params()) == reference_backward(wl) == fast_backward(wl, variant_text(REFERENCE_VARIANT))
    assert bt.variant_of(bt.default_params()) == REFERENCE_VARIANT and bt.variant_of(bt.weak_params(wl)) is None


def test_combinations_not_built_and_mismatched_problems_are_named():
    wl = get_workload("mha_bwd_d128")
    bad = bt.validate(bt.params_for(wl, dq="vector", stages=3), wl)
    assert len(bad) == 1 and "is not built" in bad[0] and "dq=bulk, stages=3, schedule=cooperative" in bad[0]
    assert "is not one of" in bt.validate(bt.params_for(wl, stages=4))[0]
    assert "the workload is" in bt.validate(bt.default_params(get_workload("mha_bwd_d64")), wl)[0]
    with pytest.raises(ValueError, match="is not built"):
        bt.render(bt.params_for(wl, dq="bulk", schedule="decoupled"))
