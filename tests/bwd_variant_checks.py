"""Shared checks of the attention backward's built variants on the CPU: compile a variant's text for a workload, and
the properties every warp-specialised variant must keep (no warnings or spills, setmaxnreg moves within the CTA's
register pool)."""
from __future__ import annotations

from ptxbench.tools.compile import compile_source
from ptxbench.tools.regpool import pool_shortfall, setmaxnreg_moves
from ptxbench.tools.sass import disassemble
from ptxbench.workloads.registry import get_workload
from ptxbench.workloads.solutions.attention_backward import fast_backward
from ptxbench.workloads.solutions.attention_bwd_variants.registry import variant_text

# the main kernel's entry points of one module, by head dim: the 128-wide kernels serve D = 128 and D = 96
D128 = ("attn_bwd_wgmma", "attn_bwd_wgmma_causal", "attn_bwd_wgmma_gqa")
D96 = ("attn_bwd_wgmma_d96", "attn_bwd_wgmma_d96_causal", "attn_bwd_wgmma_d96_gqa")
D64 = ("attn_bwd_wgmma_d64", "attn_bwd_wgmma_d64_causal", "attn_bwd_wgmma_d64_gqa")


def compile_variants(workload: str, *variants: str) -> dict:
    """variant -> its CompileResult for `workload`'s plan (one module holds every entry point)."""
    return {v: compile_source(fast_backward(get_workload(workload), variant_text(v)), "cuda", "sm_90a")
            for v in variants}


def assert_within_pool(result) -> dict:
    """Compiled, and every main kernel's setmaxnreg moves met by the CTA's pool (384 threads); returns the SASS listing
    by kernel."""
    assert result.status == "ok", [e.message for e in result.errors]
    listing = disassemble(result.cubin_path)
    for name, k in result.kernels.items():
        if name.startswith("attn_bwd_wgmma"):
            assert pool_shortfall(k.registers, 384, setmaxnreg_moves(listing[name])) == 0, name
    return listing


def assert_clean_within_pool(result) -> dict:
    """assert_within_pool, with no warnings and no spills."""
    assert not result.warnings, [w.message for w in result.warnings]
    for name, k in result.kernels.items():
        assert k.spill_stores == k.spill_loads == 0, name
    return assert_within_pool(result)
