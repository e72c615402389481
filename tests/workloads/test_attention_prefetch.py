"""The attention forward's prefetch_next option (workloads/solutions/attention_prefetch.py): once the producer has issued
its last K / V loads it prefetches into L2 the Q tile and first K / V tiles of the CTA one wave later. Checked here:
the launch-index decode it applies is the kernel's own text (blockIdx replaced by the next CTA's coordinates), and a
mirror of that decode lands on exactly the (query tile, head) that CTA computes, for every launch index of the
plain, causal and longest-first grids; it assembles at every TUNED point without spills or warnings, with 3 x SLABS
UTMAPF (Q, K, V per 64-wide slab) in the producer and the consumers' key-tile loop kept (the same exponentials under
the pending P V product, its lines in order but for the S issue's placement). Speed: the GPU (attention_template.md
round 20)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ptxbench.tools.compile import compile_source
from ptxbench.workloads.registry import get_workload
from ptxbench.workloads.solutions import attention_template as at
from ptxbench.workloads.solutions.attention_prefetch import decode_block, helper

from sass_order import ex2_under_pending_product, sass_ops

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from loop_schedule import abstract, in_order  # noqa: E402

BODY = at.BODY.read_text()


def test_the_decode_is_the_kernels_own_text():
    decode = decode_block(BODY)
    assert "blockIdx.x" in decode and "blockIdx.y" in decode
    text = helper(BODY)
    assert decode.replace("blockIdx.x", "bx").replace("blockIdx.y", "by") in text
    assert "const int bx = next % gridDim.x, by = next / gridDim.x;" in text  # lin = by * gridDim.x + bx, inverted
    assert "cp.async.bulk.prefetch.tensor.2d.L2.global.tile" in text


def _decode(bx: int, by: int, grid_x: int, n_q: int, causal: bool, lpt: int) -> tuple[int, int]:
    """The kernel's decode (attention_template.cu.in), mirrored."""
    if causal and lpt > 0:
        heads = grid_x // n_q
        grp, in_grp = bx // (lpt * n_q), bx % (lpt * n_q)
        g_heads = min(lpt, heads - grp * lpt)
        return n_q - 1 - in_grp // g_heads, grp * lpt + in_grp % g_heads
    return (n_q - 1 - bx if causal else bx), by


@pytest.mark.parametrize("causal,lpt", [(False, 0), (True, 0), (True, 8), (True, 4)])
def test_every_launch_index_the_helper_can_name_is_a_tile_of_the_grid(causal, lpt):
    """The decode is a bijection from launch index onto (query tile, head) on the main workloads' grids, so the index
    lin + SMs (kept below the CTA count) always names a tile some CTA computes, and a different one for every lin."""
    n_q, heads, nsm = 32, 192, 132
    grid_x, grid_y = (n_q * heads, 1) if lpt else (n_q, heads)
    tiles = [_decode(lin % grid_x, lin // grid_x, grid_x, n_q, causal, lpt) for lin in range(grid_x * grid_y)]
    assert sorted(tiles) == sorted((q, h) for q in range(n_q) for h in range(heads))
    named = [tiles[lin + nsm] for lin in range(grid_x * grid_y) if lin + nsm < grid_x * grid_y]
    assert len(set(named)) == len(named) == grid_x * grid_y - nsm
    assert "(CAUSAL && LPT_GROUP > 0)" in BODY and "q_tile = CAUSAL ? n_q - 1 - blockIdx.x : blockIdx.x;" in BODY


@pytest.mark.parametrize("wid", ["mha_fwd_d128", "mha_fwd_d128_causal", "mha_fwd_d96", "mha_fwd_d64",
                                 "mha_fwd_d128_gqa_h32_kv8", "mha_fwd_d128_gqa_h32_kv8_causal"])
def test_prefetch_assembles_in_the_producer_and_keeps_the_loop(wid):
    w = get_workload(wid)
    p = at.default_params(w)
    q = p.model_copy(update={"prefetch_next": True})
    assert at.validate(q, w) == []
    text = at.render(q)
    assert text.count("prefetch_next(tmQ, tmK, tmV, S, n_q, group);") == 1
    r = compile_source(text, "cuda", "sm_90a")
    k = r.kernels[at.kernel_name(q)]
    assert r.status == "ok" and not r.warnings and k.spill_stores == k.spill_loads == 0, r.warnings
    assert k.sass_opcodes.get("UTMAPF") == 3 * p.slabs
    base = compile_source(at.render(p), "cuda", "sm_90a").kernels[at.kernel_name(p)]
    assert k.sass_opcodes["HGMMA"] == base.sass_opcodes["HGMMA"] and "UTMAPF" not in base.sass_opcodes
    ops = {pt.prefetch_next: sass_ops(at.render(pt), at.kernel_name(pt)) for pt in (p, q)}
    assert ex2_under_pending_product(ops[True]) == ex2_under_pending_product(ops[False])
    if wid == "mha_fwd_d128":  # the whole kernel in order but for the producer's additions (the key-tile loop: 454 of
        a, b = abstract(ops[False]), abstract(ops[True])  # its 461 lines, the S issue placed a few lines earlier)
        assert in_order(a, b) >= 0.97 * len(a)


def test_round_20_pairs_tuned_with_and_without_it():
    import importlib.util

    spec = importlib.util.spec_from_file_location("attention_sweep", Path(__file__).resolve().parents[2] / "bench" / "attention_sweep.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    points = mod.ROUNDS[20]
    smoke, pairs = points[:3], points[3:]
    assert all(wid.startswith("smoke_") and ch == {"prefetch_next": True} for wid, ch, _ in smoke)
    for (wid, tuned, _), (wid2, with_it, predicted) in zip(pairs[::2], pairs[1::2]):
        w = get_workload(wid)
        assert wid2 == wid and tuned == at.TUNED[tuple(at.problem_of(w).values())]
        assert with_it == {**tuned, "prefetch_next": True} and predicted > 0
        assert at.validate(at.params_for(w, **with_it), w) == []
