"""The GEMM template's L2 eviction priorities (l2_hints=True, workloads/solutions/gemm_l2_hints.py): A's TMA loads
evict_last, B's (unicast) loads and C's TMA stores evict_first, each policy made by createpolicy.fractional.

Here: the option validates only where it can run and renders every copy it names with its policy (and no other);
the renders assemble for sm_90a without spills, and leave the consumers' loop as it was; on the GPU the result
matches torch on the main GEMM, a small and a ragged shape and a short K."""
from __future__ import annotations

import pytest

from ptxbench.workloads.solutions import gemm_template as gt

from gemm_helpers import check_against_torch, clean_kernel, compile_points

MAIN = "gemm_bf16_m8192_n7168_k5120"
VARIANTS = {
    "hints": {**gt.default_params().model_dump(), "l2_hints": True},
    "hints_plain_epilogue": {"l2_hints": True},
    "hints_cluster": {"l2_hints": True, "defer": True, "cluster_m": 2},
    "hints_bk32": {"l2_hints": True, "bk": 32, "stages": 8},
}
SHAPES = [(8192, 7168, 5120), (256, 256, 512), (200, 296, 328), (1024, 1024, 128)]


def test_l2_hints_is_an_option_off_in_gemm_params_itself():
    assert gt.OPTION_SPACE["l2_hints"] == [False, True] and "l2_hints" not in gt.GemmParams().model_dump()
    assert "createpolicy" not in gt.render(gt.GemmParams())


def test_validate_rejects_ping_pong():
    reasons = gt.validate(gt.GemmParams(l2_hints=True, schedule="pingpong", bn=128, stages=5))
    assert any("schedule='cooperative'" in r for r in reasons), reasons


@pytest.mark.parametrize("name", list(VARIANTS))
def test_every_copy_of_a_b_and_c_carries_its_policy(name):
    src = gt.render(gt.GemmParams(**VARIANTS[name]))
    kernel = src[src.index('extern "C" __global__'):]
    assert "tma_load_2d(sA" not in src and "tma_load_2d(sB" not in src and "tma_store_2d(tmC" not in src
    assert "tma_load_2d_hint(sA + kc * A_CHUNK, &tmA, &full[stage], kx, m0, keep);" in kernel
    assert "tma_load_2d_hint(sB + kc * B_CHUNK, &tmB, &full[stage], kx, n0, stream);" in kernel
    assert "const uint64_t keep = l2_policy<true>(), stream = l2_policy<false>();" in kernel
    # C's stores: store_tile_tma's, and with defer the deferred slabs'
    assert src.count("l2_policy<false>());") == (2 if VARIANTS[name].get("defer") else 1)
    assert "createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" in src
    assert "createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" in src
    if VARIANTS[name].get("cluster_m", 1) > 1:  # B's multicast keeps the default priority
        assert "tma_load_2d_multicast(sB" in kernel


@pytest.fixture(scope="module")
def compiled() -> dict:
    return compile_points(VARIANTS, MAIN)


@pytest.mark.parametrize("name", list(VARIANTS))
def test_l2_hints_assemble_without_spills(compiled, name):
    k = clean_kernel(compiled[name])
    assert k.registers <= 168


@pytest.mark.gpu
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("name", list(VARIANTS))
def test_l2_hints_match_torch(compiled, name, shape):
    check_against_torch(name, VARIANTS[name], compiled[name], shape, seed=9, calls=2)
