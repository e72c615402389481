"""The GEMM template's 32-deep k-blocks (gemm_template: bk=32, gemm_chunk32.py): each stage one 64-byte-wide chunk of
A and B under the 64B swizzle, so the ring's bytes make twice the slots.

Here: the option validates only where it is built (the cooperative loop), its plan asks TMA for 32-element boxes
with the 64B swizzle in the same shared memory as the 64-deep ring of half the stages, every operand descriptor is
the 64B one with a 512-byte atom, the point assembles for sm_90a without spills or serialised wgmma; on the GPU the
result matches torch on the main GEMM, a small, a ragged and a short-K shape, with and without the deferred epilogue,
the 2-CTA cluster and the stream-K tail."""
from __future__ import annotations

import re

import pytest

from ptxbench.workloads.solutions import gemm_template as gt

from gemm_helpers import check_against_torch, clean_kernel, compile_points

MAIN = "gemm_bf16_m8192_n7168_k5120"
VARIANTS = {
    "bk32_defer": {"bk": 32, "stages": 8, "defer": True},
    "bk32_s6": {"bk": 32, "stages": 6},
    "bk32_cluster": {"bk": 32, "stages": 8, "cluster_m": 2, "defer": True},
    "bk32_streamk": {"bk": 32, "stages": 8, "tail": "streamk"},
}
# (M, N, K): the main GEMM, the smoke one, a ragged one (K = 328: a last k-block of 8), K = 32 (one k-block)
SHAPES = [(8192, 7168, 5120), (256, 256, 512), (200, 296, 328), (1024, 1024, 32)]


def test_bk32_is_in_the_space_and_the_default_render_is_unchanged():
    assert 32 in gt.PARAM_SPACE["bk"]
    assert "make_desc_sw64" not in gt.render(gt.default_params())


@pytest.mark.parametrize("bad, phrase", [
    ({"bk": 32, "schedule": "pingpong", "bn": 128, "stages": 8}, "schedule='cooperative'"),
    ({"bk": 96}, "must be 32 (64B swizzle) or a multiple of 64"),
    ({"bk": 32, "stages": 10, "defer": True}, "shared memory"),
])
def test_validate_rejects_what_is_not_built(bad, phrase):
    reasons = gt.validate(gt.GemmParams(**bad))
    assert any(phrase in r for r in reasons), reasons


def test_the_plan_and_descriptors_are_the_64b_swizzles():
    p = gt.GemmParams(bk=32, stages=8, defer=True)
    src = gt.render(p)
    for name, rows in (("A_map", 128), ("B_map", 256)):
        block = src.split(f"[tmap.{name}]")[1].split("\n\n")[0]
        assert f"box = [32, {rows}]" in block and 'swizzle = "64B"' in block
    assert 'box = [64, 64]\nswizzle = "128B"' in src.split("[tmap.C_map]")[1]  # the epilogue's staging keeps 128B
    # the same ring bytes as the 64-deep reference's 4 stages; the barriers take 16 bytes a stage
    assert p.smem_bytes == gt.default_params().smem_bytes + 8 * 16 - 4 * 16
    assert f"smem = {p.smem_bytes}" in src
    kernel = src.split('extern "C" __global__')[1]
    assert "make_desc_sw128" not in kernel and kernel.count("make_desc_sw64(") == 2
    assert "desc |= static_cast<uint64_t>(512 >> 4) << 32;" in src and "static_cast<uint64_t>(2) << 62;" in src
    assert re.search(r"constexpr int KCH = 1;", src) and "for (int kk = 0; kk < BK / 16; ++kk)" in src


@pytest.fixture(scope="module")
def compiled() -> dict:
    return compile_points(VARIANTS, MAIN)


@pytest.mark.parametrize("name", list(VARIANTS))
def test_bk32_assembles_without_spills(compiled, name):
    k = clean_kernel(compiled[name])
    assert k.sass_opcodes.get("HGMMA", 0) >= 2  # two k16 steps a stage


@pytest.mark.gpu
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("name", list(VARIANTS))
def test_bk32_matches_torch(compiled, name, shape):
    check_against_torch(name, VARIANTS[name], compiled[name], shape, seed=7, calls=2)
