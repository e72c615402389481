"""The attention forward template's persistent option (attention_persistent.py): one CTA per SM walks the query
tiles in the non-persistent launch order, Q double-buffered, the K / V ring running on across tiles.

Here: the option is left out of default dumps and renders; validate refuses ping-pong; the plan has a grid of at most
the SMs, two Q buffers' shared memory and the B * H argument; every cooperative reference point assembles with it
(no spills, no ptxas warnings, the same wgmma count); a model of the walk (tile_of's lines, mirrored) gives every
(query tile, head) to exactly one CTA, in each CTA the launch order, for every grid size; and on the GPU each point
passes the harness's checks (the smoke shapes have fewer tiles than CTAs)."""
from __future__ import annotations

import pytest

from ptxbench.tools.compile import compile_source
from ptxbench.tools.evaluator import EvalOptions
from ptxbench.tools.solution.parse import parse_solution, resolve_plan
from ptxbench.workloads.registry import get_workload
from ptxbench.workloads.solutions import attention_template as at

# the cooperative reference points (TUNED) and a smoke shape of each kind
COOPERATIVE = ["mha_fwd_d128", "mha_fwd_d128_causal", "mha_fwd_d96", "mha_fwd_d96_causal", "mha_fwd_d128_gqa_h32_kv8"]


def persistent_point(wid: str) -> at.AttnParams:
    w = get_workload(wid)
    p = at.default_params(w)
    if p.schedule == "pingpong":  # the smoke shapes' D = 64 points: their cooperative neighbour
        p = p.model_copy(update={"schedule": "cooperative", "consumers": 2, "bn": 128, "stages": 4})
    return p.model_copy(update={"persistent": True})


def test_persistent_is_an_option_left_out_of_default_dumps():
    assert at.OPTION_SPACE["persistent"] == [False, True] and "persistent" not in at.default_params().model_dump()
    assert "tile_of(" not in at.render(at.default_params())
    p = persistent_point("mha_fwd_d128")
    text = at.render(p)
    assert "'persistent': True" in text and "tile_of(lin, n_q, BH, q_tile, bh);" in text
    plan = text.split("*/")[0]
    assert 'grid = ["min(num_sms, cdiv(S, 128) * B * H)"]' in plan and '"i32:B * H"]' in plan
    assert f'smem = "1024 + {p.q_bytes} * 2 + ' in plan and p.smem_bytes <= at.SMEM_LIMIT


def test_validate_refuses_ping_pong():
    bad = at.validate(at.default_params(get_workload("mha_fwd_d128_gqa_h32_kv8_causal")).model_copy(
        update={"persistent": True}))  # its reference point is ping-pong
    assert any("schedule='cooperative'" in b for b in bad), bad


@pytest.mark.parametrize("wid", COOPERATIVE)
def test_each_cooperative_reference_point_assembles_persistent(wid):
    w = get_workload(wid)
    p = persistent_point(wid)
    assert at.validate(p, w) == []
    plan = resolve_plan(parse_solution(at.render(p), w).plan, w, 132, "sm_90a")
    assert tuple(plan.launches[0].grid)[0] == 132  # more tiles than SMs on every main shape
    r = compile_source(at.render(p), "cuda", "sm_90a")
    assert r.status == "ok" and not r.warnings, (r.errors, r.warnings)
    k = r.kernels[at.kernel_name(p)]
    assert k.spill_stores == 0 and k.spill_loads == 0
    ref = compile_source(at.render(p.model_copy(update={"persistent": False})), "cuda", "sm_90a").kernels[at.kernel_name(p)]
    assert k.sass_opcodes.get("HGMMA") == ref.sass_opcodes.get("HGMMA")


def _tile_of(lin: int, n_q: int, bh_count: int, causal: bool, lpt: int) -> tuple[int, int]:
    """tile_of's lines."""
    if causal and lpt > 0:
        grp, in_grp = lin // (lpt * n_q), lin % (lpt * n_q)
        g_heads = min(lpt, bh_count - grp * lpt)
        return n_q - 1 - in_grp // g_heads, grp * lpt + in_grp % g_heads
    return (n_q - 1 - lin % n_q if causal else lin % n_q), lin // n_q


@pytest.mark.parametrize("causal, lpt", [(False, 0), (True, 0), (True, 8), (True, 4)])
def test_the_walk_gives_every_tile_to_one_cta_in_launch_order(causal, lpt):
    text = at.render(persistent_point("mha_fwd_d128_causal" if causal else "mha_fwd_d128"))
    for line in ("const int grp = lin / (LPT_GROUP * n_q), in_grp = lin % (LPT_GROUP * n_q);",
                 "const int g_heads = min(LPT_GROUP, BH - grp * LPT_GROUP);",
                 "q_tile = n_q - 1 - in_grp / g_heads;", "bh = grp * LPT_GROUP + in_grp % g_heads;",
                 "q_tile = CAUSAL ? n_q - 1 - lin % n_q : lin % n_q;  // causal: each head's longest rows first",
                 "bh = lin / n_q;", "for (int lin = blockIdx.x, i = 0; lin < n_all; lin += gridDim.x, ++i) {"):
        assert line in text, line
    for n_q, bh_count in ((32, 192), (4, 10), (2, 3)):
        for grid in (1, 7, 132, n_q * bh_count + 5):
            seen = set()
            for cta in range(grid):
                for lin in range(cta, n_q * bh_count, grid):
                    tile = _tile_of(lin, n_q, bh_count, causal, lpt)
                    assert 0 <= tile[0] < n_q and 0 <= tile[1] < bh_count and tile not in seen
                    seen.add(tile)
            assert len(seen) == n_q * bh_count


@pytest.mark.gpu
@pytest.mark.parametrize("wid", ["smoke_mha_fwd_d64", "smoke_mha_fwd_d64_causal", "smoke_mha_fwd_d64_gqa_h4_kv2"]
                         + COOPERATIVE)
def test_persistent_points_pass_on_the_gpu(wid):
    from gpu_helpers import shared_evaluator

    r = shared_evaluator().evaluate(wid, at.render(persistent_point(wid)),
                                    EvalOptions(timeout_s=120, trials=1, profile_on_pass=False))
    t = r.timing
    print("RESULT", wid, r.status, r.message, t and (t.candidate.median_ms, t.speedup, t.speedup_ci))
    assert r.status == "PASSED", (r.message, r.runtime_error, r.plan_errors)
