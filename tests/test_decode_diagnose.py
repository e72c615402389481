"""bench/decode_diagnose.py on the CPU: each variant's edits apply exactly once to params_for's decode renders (a
template change that moves an edited line fails here, not on the GPU), and each takes out what its name says and
nothing else: no_a / no_b drop one TMA load and tell the full barrier the other's bytes, no_mma keeps the loads and
drops the wgmma, no_load keeps the wgmma and drops the loads."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import decode_diagnose as dd  # noqa: E402
from ptxbench.workloads.solutions.gemm_template import params_for, render  # noqa: E402

A_LOAD = "tma_load_2d(sA + kc * A_CHUNK, &tmA, &full[stage], kx, m0);"
B_LOAD = "tma_load_2d(sB + kc * B_CHUNK, &tmB, &full[stage], kx, n0);"
WGMMA = "wgmma_m64k16_bf16<BN>(acc[ms]"


def _variant(key: str, name: str) -> str:
    return dd.edited(render(params_for(dd.WORKLOADS[key][0])), dd.VARIANTS[name])


@pytest.mark.parametrize("key", sorted(dd.WORKLOADS))
@pytest.mark.parametrize("name", sorted(dd.VARIANTS))
def test_each_variant_applies_once_and_takes_out_its_part(key, name):
    text = _variant(key, name)
    assert ("diagnose:" in text) == (name != "ref")
    loads_a, loads_b = A_LOAD in text, B_LOAD in text
    expect = {"ref": (True, True, True), "no_a": (False, True, True), "no_b": (True, False, True),
              "no_mma": (True, True, False), "no_load": (False, False, True), "empty": (False, False, False)}[name]
    # no_load keeps the load lines in a loop that runs zero times (gemm_diag_variants.NO_TMA)
    if name in ("no_load", "empty"):
        assert "for (int kc = 0; kc < 0; ++kc)" in text and "mbar_arrive(&full[stage]);" in text
        loads_a = loads_b = False
    assert (loads_a, loads_b, WGMMA in text) == expect


def test_one_load_variants_tell_the_barrier_the_bytes_they_still_load():
    assert "mbar_arrive_expect_tx(&full[stage], STAGE_BYTES - A_STAGE);" in _variant("m64", "no_a")
    assert "mbar_arrive_expect_tx(&full[stage], A_STAGE);" in _variant("m128", "no_b")
    assert "mbar_arrive_expect_tx(&full[stage], STAGE_BYTES);" in _variant("m64", "ref")


def test_the_workloads_are_the_registered_decode_shapes():
    from ptxbench.workloads.registry import get_workload
    for wid, (m, n, k) in dd.WORKLOADS.values():
        s = get_workload(wid).symbols
        assert (s["M"], s["N"], s["K"]) == (m, n, k)


def test_every_point_builds_for_its_workload():
    """POINTS are real template points: each validates against its decode shape (deep rings allowed as rounds 21-22
    ran), and the ones with 56-column tiles store directly (the TMA epilogue needs 64-column slabs)."""
    for key, points in dd.POINTS.items():
        for name, changes in points.items():
            p = dd.point_params(key, name)
            assert all(getattr(p, k) == v for k, v in changes.items()), (key, name)
            if p.bn % 64:
                assert p.epilogue == "direct", (key, name)
    from ptxbench.workloads.solutions import gemm_template as gt
    assert 12 not in gt.PARAM_SPACE["stages"]  # the wider space is put back


@pytest.mark.parametrize("key, name", [(k, n) for k in sorted(dd.A_MC) for n in dd.A_MC[k]])
def test_a_multicast_points_share_a_and_load_b_whole(key, name):
    """The a_mc points turn the template's cluster around: the launch's cluster and the kernel's CLUSTER_M are the
    point's size, A's box is 1/cm of the tile's rows (each CTA multicasts its slice to the cluster), B's box is the
    whole tile loaded by its own CTA, and the grid covers every tile (one tile row) in whole clusters."""
    cm, changes = dd.A_MC[key][name]
    p = params_for(dd.WORKLOADS[key][0], **changes)
    text = dd.a_multicast_source(key, name)
    assert f"cluster = [{cm}, 1, 1]" in text and f"constexpr int CLUSTER_M = {cm};" in text
    assert f'tensor = "A"\nbox = [64, {p.bm // cm}]' in text and f'tensor = "B"\nbox = [64, {p.bn}]' in text
    assert f"min(min(num_sms, 128) // {cm} * {cm}, cdiv(M, {p.bm}) * cdiv(N, {p.bn}))" in text
    assert "tma_load_2d_multicast(sA + kc * A_CHUNK + cta_rank * A_SLICE" in text
    assert B_LOAD in text and A_LOAD not in text and f"constexpr int STAGES = {p.stages};" in text
    assert text.count("tile_coords(ct, cluster_rows, tiles_n / CLUSTER_M, tm, tn);") == 2
    # the grid's CTAs are whole clusters and each takes one tile of the single tile row (N = 7168)
    assert (7168 // p.bn) % cm == 0 and min(128, 7168 // p.bn) % cm == 0
