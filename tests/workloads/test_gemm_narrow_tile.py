"""The GEMM template's 56-column tile (bn = 56, the wrapper header's m64n56k16): over N = 7168 it makes 128 tiles for
the decode GEMMs (M = 64 / 128) instead of 112 at 64 columns, so 128 SMs stream B instead of 112.

Here: it validates only with the direct epilogue (the TMA epilogue stores 64-column slabs), renders the 8-multiple
static_assert only where it is needed (every other render unchanged), assembles without spills for both decode
shapes' tiles, plans 128 CTAs on the M = 64 decode GEMM; on the GPU it matches torch on the decode shapes and a
ragged one."""
from __future__ import annotations

import pytest

from ptxbench.tools.solution.parse import parse_solution, resolve_plan
from ptxbench.workloads.registry import get_workload
from ptxbench.workloads.solutions import gemm_template as gt

from gemm_helpers import check_against_torch, clean_kernel, compile_points

M64 = "gemm_bf16_m64_n7168_k5120"
VARIANTS = {
    "n56_m64": {"bm": 64, "bn": 56, "consumers": 1, "stages": 8, "epilogue": "direct"},
    "n56_m128": {"bm": 128, "bn": 56, "consumers": 2, "stages": 8, "epilogue": "direct"},
}
SHAPES = [(64, 7168, 5120), (128, 7168, 5120), (200, 296, 328)]


def test_the_narrow_tile_needs_the_direct_epilogue_and_changes_no_other_render():
    assert 56 in gt.PARAM_SPACE["bn"]
    assert any("64-column slabs" in b for b in gt.validate(gt.GemmParams(bm=64, bn=56, consumers=1)))
    assert gt.validate(gt.GemmParams(**VARIANTS["n56_m64"]), (64, 7168, 5120)) == []
    assert "BN % 8 == 0" in gt.render(gt.GemmParams(**VARIANTS["n56_m64"]))
    assert "BN % 8 == 0" not in gt.render(gt.default_params())
    w = get_workload(M64)
    plan = resolve_plan(parse_solution(gt.render(gt.GemmParams(**VARIANTS["n56_m64"])), w).plan, w, 132, "sm_90a")
    assert tuple(plan.launches[0].grid)[0] == 128  # 7168 / 56 tiles, one CTA each


@pytest.fixture(scope="module")
def compiled() -> dict:
    return compile_points(VARIANTS, M64)


@pytest.mark.parametrize("name", list(VARIANTS))
def test_the_narrow_tile_assembles_without_spills(compiled, name):
    clean_kernel(compiled[name])


@pytest.mark.gpu
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("name", list(VARIANTS))
def test_the_narrow_tile_matches_torch(compiled, name, shape):
    check_against_torch(name, VARIANTS[name], compiled[name], shape, seed=7)
