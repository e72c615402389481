"""The backward's late_d96 variant (workloads/solutions/attention_bwd_variants/late_d96.py): dq_late's block and
causal_skip's dead block in the D = 96 entry points only, on pre_plain. Checked here: the D = 128 and D = 64 kernels
are pre_plain's instruction for instruction; the D = 96 ones assemble without spills or wgmma serialisation and carry
causal_skip's products, reductions and fences (a second reduce-add for the last tile, one fence left in the loop);
the text gates every change on KD == 96. Speed: the GPU (attention_bwd.md v23)."""
from __future__ import annotations

import pytest

from ptxbench.tools.compile import compile_source
from ptxbench.workloads.registry import get_workload
from ptxbench.workloads.solutions.attention_backward import fast_backward
from ptxbench.workloads.solutions.attention_bwd_variants.registry import variant_text


@pytest.fixture(scope="module")
def kernels():
    out = {}
    for name in ("late_d96+head_groups", "pre_plain+head_groups", "causal_skip+head_groups"):
        r = compile_source(fast_backward(get_workload("mha_bwd_d96"), variant_text(name)), "cuda", "sm_90a")
        assert r.status == "ok" and not r.warnings, (name, [w.message for w in r.warnings])
        out[name] = r.kernels
    return out


def test_the_d128_and_d64_kernels_are_pre_plains(kernels):
    late, base = kernels["late_d96+head_groups"], kernels["pre_plain+head_groups"]
    assert late.keys() == base.keys()
    for name, k in late.items():
        assert k.spill_stores == k.spill_loads == 0, name
        if "_d96" not in name:
            assert k.sass_opcodes == base[name].sass_opcodes, name
        else:
            assert k.sass_opcodes != base[name].sass_opcodes, name


@pytest.mark.parametrize("kernel", ["attn_bwd_wgmma_d96", "attn_bwd_wgmma_d96_causal", "attn_bwd_wgmma_d96_gqa"])
def test_the_d96_kernels_carry_causal_skips_products_reductions_and_fences(kernels, kernel):
    late, skip = kernels["late_d96+head_groups"][kernel], kernels["causal_skip+head_groups"][kernel]
    for op in ("HGMMA", "UBLKRED", "FENCE", "BAR"):
        assert late.sass_opcodes.get(op) == skip.sass_opcodes.get(op), (op, late.sass_opcodes.get(op))


def test_every_change_is_gated_on_d96():
    text = variant_text("late_d96+head_groups")
    assert "constexpr bool LATE = KD == 96;" in text and "if (!(LATE && CAUSAL) || c == 0) {" in text
    assert "if constexpr (LATE && CAUSAL) {" in text and "if constexpr (LATE)\n          consumer_block_late<" in text
    late = text[text.index("void consumer_block_late("):]
    late = late[:late.index("\n}\n")]
    assert "pending = dq_rows" in late and "if (!CAUSAL || q0 > key0) {" in late
    pf = text[text.index("void consumer_block_pf("):]
    assert "pending" not in pf[:pf.index("\n}\n")]  # pre_plain's block, unchanged
