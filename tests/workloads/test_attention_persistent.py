"""The attention forward template's persistent option (attention_persistent.py): one CTA per SM taking query tiles
from an atomic counter, each consumer issuing a tile's last P V product with the next tile's first S.

Here: the option is left out of default dumps and renders; validate() refuses it off the cooperative schedule, the TMA
epilogue, q_regs and a 40-register producer; the plan has a grid of at most the SMs, the O staging's shared memory, the
B * H argument and a zeroed int32 counter; every cooperative reference point assembles with it (no spills, no ptxas
warnings, the cross-tile step's S and P V products beside the loop's); the launch order it walks gives every (query
tile, head) one index; and on the GPU each point passes the harness's checks (the main shapes have 47 tiles per CTA, so
the cross-tile step runs thousands of times per call). Speed: attention_template.md round 21."""
from __future__ import annotations

import re

import pytest

from ptxbench.tools.compile import compile_source
from ptxbench.tools.evaluator import EvalOptions
from ptxbench.tools.solution.parse import parse_solution, resolve_plan
from ptxbench.workloads.registry import get_workload
from ptxbench.workloads.solutions import attention_template as at

from sass_order import loop_exponentials_under_product
from sweeps import attention_sweep

COOPERATIVE = ["mha_fwd_d128", "mha_fwd_d128_causal", "mha_fwd_d96", "mha_fwd_d96_causal", "mha_fwd_d128_gqa_h32_kv8"]
WALK = {"q_regs": True, "persistent": True, "producer_regs": at.PERSISTENT_PRODUCER_REGS}


def persistent_point(wid: str, q_ahead: bool = False, producer_fn: bool = False) -> at.AttnParams:
    w = get_workload(wid)
    p = at.default_params(w)
    if p.schedule == "pingpong":  # the smoke shapes' D = 64 points: a cooperative neighbour
        p = p.model_copy(update={"schedule": "cooperative", "consumers": 2, "bn": 128, "stages": 2, "epilogue": "tma"})
    return p.model_copy(update={**WALK, "q_ahead": q_ahead, "producer_fn": producer_fn})


def before_round_26(p: at.AttnParams) -> at.AttnParams:
    """The point with the row-reduction split rounds 21-24 built it with (bench/attention_sweep.py's TUNED_ROUND_25:
    D = 128 split_max, causal split_rows, which round 26 swapped)."""
    then = attention_sweep().TUNED_ROUND_25.get((p.head_dim, p.causal, p.gqa), {})
    return p.model_copy(update={k: then.get(k, False) for k in ("split_rows", "split_max")})


def test_persistent_is_an_option_left_out_of_default_dumps():
    assert at.OPTION_SPACE["persistent"] == [False, True] and "persistent" not in at.plain_params().model_dump()
    assert "tile_of(" not in at.render(at.plain_params()) and "tile_counter" not in at.render(at.plain_params())
    assert "q_ahead" not in at.single_tile(at.default_params()).model_dump()
    p = persistent_point("mha_fwd_d128")
    text = at.render(p)
    assert "'persistent': True" in text and "atomicAdd(tile_counter, 1)" in text
    plan = text.split("*/")[0]
    assert 'grid = ["min(num_sms, cdiv(S, 128) * B * H)"]' in plan
    assert '"i32:B * H", "scratch:tile_counter"]' in plan
    assert '[scratch.tile_counter]' in plan and 'dtype = "int32"\nshape = [1]\nzero = true' in plan
    assert f'smem = "1024 + {p.q_bytes} * 2 + ' in plan and p.smem_bytes <= at.SMEM_LIMIT


@pytest.mark.parametrize("change, words", [({"schedule": "pingpong", "stagger": False}, "cooperative"),
                                           ({"epilogue": "direct"}, "TMA epilogue"),
                                           ({"q_regs": False}, "q_regs"),
                                           ({"producer_regs": 24}, "producer_regs=40")])
def test_validate_refuses_what_the_walk_is_not_built_for(change, words):
    p = persistent_point("mha_fwd_d128").model_copy(update=change)
    bad = at.validate(p)
    assert any(words in b for b in bad), bad


def test_in_tuned_at_every_cooperative_point_with_q_ahead():
    """Round 22: the walk with q_ahead beat each cooperative point without it by kernel time (-0.4 to -1.2%)."""
    walking = sorted(k for k, pt in at.TUNED.items() if pt.get("persistent"))
    assert walking == [(96, False, False), (96, True, False), (128, False, False), (128, False, True), (128, True, False)]
    for wid in COOPERATIVE:
        p = at.default_params(get_workload(wid))
        assert p.persistent and p.q_ahead and p.producer_fn and p.q_regs and at.validate(p, get_workload(wid)) == []
        assert not at.single_tile(p).persistent and at.validate(at.single_tile(p), get_workload(wid)) == []
    text = at.render(at.default_params())  # the checked-in attention_fwd_wgmma.cu
    assert "atomicAdd(tile_counter, 1)" in text and "every consumer warp holds this tile's Q in registers" in text
    assert any("q_ahead" in b for b in at.validate(at.plain_params().model_copy(update={"q_ahead": True})))
    assert any("producer_fn" in b for b in at.validate(at.plain_params().model_copy(update={"producer_fn": True})))
    assert "__device__ __noinline__ void producer_walk(" in text


@pytest.mark.parametrize("q_ahead, producer_fn", [(False, False), (True, False), (True, True)])
@pytest.mark.parametrize("wid", COOPERATIVE)
def test_each_cooperative_reference_point_assembles_persistent(wid, q_ahead, producer_fn):
    w = get_workload(wid)
    p = persistent_point(wid, q_ahead, producer_fn)
    assert at.validate(p, w) == []
    plan = resolve_plan(parse_solution(at.render(p), w).plan, w, 132, "sm_90a")
    assert tuple(plan.launches[0].grid)[0] == 132  # more tiles than SMs on every main shape
    assert [s.name for s in plan.scratch] == ["tile_counter"] and plan.scratch[0].zero
    r = compile_source(at.render(p), "cuda", "sm_90a")
    assert r.status == "ok" and not r.warnings, (r.errors, r.warnings)
    k = r.kernels[at.kernel_name(p)]
    assert k.spill_stores == 0 and k.spill_loads == 0
    plain = at.single_tile(p)
    ref = compile_source(at.render(plain), "cuda", "sm_90a").kernels[at.kernel_name(p)]
    # the cross-tile step issues the next tile's first S (D / 16 k16 steps) in place of the last P V's lone issue
    assert k.sass_opcodes.get("HGMMA") == ref.sass_opcodes.get("HGMMA") + p.head_dim // 16
    assert k.sass_opcodes.get("ATOMG", 0) + k.sass_opcodes.get("ATOM", 0) + k.sass_opcodes.get("RED", 0) >= 1


@pytest.mark.parametrize("wid, q_ahead, producer_fn", [("mha_fwd_d128", False, False), ("mha_fwd_d128_causal", False, False),
                                                       ("mha_fwd_d128_causal", True, False), ("mha_fwd_d96", True, False),
                                                       ("mha_fwd_d128", True, True), ("mha_fwd_d128_causal", True, True)])
def test_the_walk_keeps_the_loops_exponentials_under_the_product(wid, q_ahead, producer_fn):
    """ptxas 13.5 scheduled the key-tile loop by what surrounds it: with the cross-tile step's products issued on two
    branches it put the loop's wait for the previous P V product ahead of all 66 exponentials; with one issue site (as
    rendered) it keeps as many under the product as the non-persistent kernel does (round 8 measured that overlap).
    q_ahead's producer (its Q load inside the ring's loop) changes the consumers' loop too: at D = 128 it keeps 17 of
    66 under the product (46 without it), at the other points as many as persistent alone; round 22 measured it.
    producer_fn (the walk called as a function of its own) gives the loop back its 46 with q_ahead. Pinned on the
    points rounds 21-24 built: round 26's faster splits keep fewer there (test_attention_split_rows.py)."""
    p = before_round_26(persistent_point(wid, q_ahead, producer_fn))
    plain = at.single_tile(p)
    products = (p.head_dim + p.bn) // 16
    walk = loop_exponentials_under_product(at.render(p), at.kernel_name(p), products)
    ref = loop_exponentials_under_product(at.render(plain), at.kernel_name(p), products)
    assert ref > 0 and walk >= 0.8 * ref, (walk, ref)


@pytest.mark.parametrize("wid", ["mha_fwd_d128", "mha_fwd_d128_causal"])
def test_the_called_walk_fits_the_producers_registers(wid):
    """producer_walk runs after the producer warpgroup's setmaxnreg.dec: every register it names must be below
    PRODUCER_REGS, and it keeps nothing in local memory (ptxas compiles a called function to the kernel's count)."""
    import subprocess

    from ptxbench.tools.toolchain import find_toolchain

    p = persistent_point(wid, True, True)
    text = at.render(p)
    assert text.count("producer_walk(") == 2 and "__device__ __noinline__ void producer_walk(" in text
    r = compile_source(text, "cuda", "sm_90a")
    assert r.status == "ok" and not r.warnings
    listing = subprocess.run([find_toolchain().nvdisasm.path, "-c", r.cubin_path], capture_output=True, text=True,
                             check=True).stdout
    start = next(i for i, ln in enumerate(listing.splitlines()) if "producer_walk" in ln and ln.endswith(":"))
    body = []
    for ln in listing.splitlines()[start + 1:]:
        if ln.startswith("$") and ln.endswith(":"):  # the next function
            break
        body.append(ln)
    regs = {int(x) for ln in body for x in re.findall(r"\bR(\d+)\b", ln)}
    assert sum("CALL" not in ln and "/*" in ln for ln in body) > 50  # the walk itself, not a stub
    assert regs and max(regs) < p.producer_regs, max(regs)
    assert not any(op in ln for ln in body for op in ("LDL", "STL"))


def _tile_of(lin: int, n_q: int, bh_count: int, causal: bool, lpt: int) -> tuple[int, int]:
    """tile_of's lines."""
    if causal and lpt > 0:
        grp, in_grp = lin // (lpt * n_q), lin % (lpt * n_q)
        g_heads = min(lpt, bh_count - grp * lpt)
        return n_q - 1 - in_grp // g_heads, grp * lpt + in_grp % g_heads
    return (n_q - 1 - lin % n_q if causal else lin % n_q), lin // n_q


@pytest.mark.parametrize("causal, lpt", [(False, 0), (True, 0), (True, 8), (True, 4)])
def test_the_launch_order_gives_every_tile_one_index(causal, lpt):
    text = at.render(persistent_point("mha_fwd_d128_causal" if causal else "mha_fwd_d128"))
    for line in ("const int grp = lin / (LPT_GROUP * n_q), in_grp = lin % (LPT_GROUP * n_q);",
                 "const int g_heads = min(LPT_GROUP, BH - grp * LPT_GROUP);",
                 "q_tile = n_q - 1 - in_grp / g_heads;", "bh = grp * LPT_GROUP + in_grp % g_heads;",
                 "q_tile = CAUSAL ? n_q - 1 - lin % n_q : lin % n_q;  // causal: each head's longest rows first",
                 "bh = lin / n_q;", "const int next = gridDim.x + atomicAdd(tile_counter, 1);"):
        assert line in text, line
    for n_q, bh_count in ((32, 192), (4, 10), (2, 3)):
        tiles = [_tile_of(lin, n_q, bh_count, causal, lpt) for lin in range(n_q * bh_count)]
        assert len(set(tiles)) == n_q * bh_count
        assert all(0 <= q < n_q and 0 <= bh < bh_count for q, bh in tiles)
        if causal:  # longest first: a query tile's key tiles never grow along the order within a head group
            assert tiles[0][0] == n_q - 1


@pytest.mark.gpu
@pytest.mark.parametrize("q_ahead, producer_fn", [(False, False), (True, False), (True, True)])
@pytest.mark.parametrize("wid", ["smoke_mha_fwd_d64", "smoke_mha_fwd_d64_causal"] + COOPERATIVE)
def test_persistent_points_pass_on_the_gpu(wid, q_ahead, producer_fn):
    from gpu_helpers import shared_evaluator

    r = shared_evaluator().evaluate(wid, at.render(persistent_point(wid, q_ahead, producer_fn)),
                                    EvalOptions(timeout_s=120, trials=1, profile_on_pass=False))
    t = r.timing
    print("RESULT", wid, "q_ahead" if q_ahead else "", "producer_fn" if producer_fn else "", r.status, r.message, t and (t.candidate.median_ms, t.speedup, t.speedup_ci))
    assert r.status == "PASSED", (r.message, r.runtime_error, r.plan_errors)
