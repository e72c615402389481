"""bench/gemm_diagnose.py on the CPU: every variant's edits apply exactly once to today's reference render (a template
change that moves an edited line fails here, not on the GPU), each variant changes the render, and the real kernels
among them (checked against torch on the GPU) keep every wgmma and TMA load of the reference."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import gemm_diagnose as gd  # noqa: E402
from ptxbench.workloads.solutions.gemm_template import default_params, render  # noqa: E402


@pytest.mark.parametrize("name", sorted(gd.VARIANTS))
def test_each_variants_edits_apply_once_to_the_reference(name):
    edits, changes = gd.VARIANTS[name]
    base = render(default_params().model_copy(update=changes))
    text = gd.edited(base, edits)
    assert (text != base) == bool(edits)
    assert ("diagnose:" in text) == bool(edits)


def test_an_edit_that_no_longer_applies_is_an_error():
    with pytest.raises(ValueError, match="applies 0 times"):
        gd.edited("int x;", [("int y;", "int z;")])


@pytest.mark.parametrize("name", [n for n in gd.CHECKED if gd.VARIANTS[n][0]])
def test_the_real_kernels_keep_the_references_loads_and_products(name):
    text = gd.edited(render(default_params()), gd.VARIANTS[name][0])
    kernel = text.split('extern "C" __global__')[1]
    assert kernel.count("wgmma_m64k16_bf16<BN>(") == 1
    assert kernel.count("tma_load_2d") - kernel.count("tma_load_2d_multicast") >= 2
    assert "mbar_arrive_expect_tx(&full[stage], STAGE_BYTES);" in kernel
