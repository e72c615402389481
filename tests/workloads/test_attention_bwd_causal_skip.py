"""The backward's causal_skip variant (workloads/solutions/attention_bwd_variants/block_causal_skip.py): consumer 1's
first block of a causal key block, whose keys no query row of the block sees, runs without its products. Checked here:
that block is the only (consumer, query block) pair whose keys are all masked, at every key block of the causal
workloads' shapes; the non-causal kernels are dq_late's instruction for instruction; the causal ones assemble without
spills or ptxas's wgmma serialisation, with the dead block's dQ product (4 k16 steps) and next S^T (8) added; in the
text consumer 1 issues no first S^T, and the live block's dQ product stops after consumer 0's keys only on the
diagonal's first block. skip_plain, the same skip on pre_plain (no dq_late), is held to the same checks against its
own base. Correctness and speed are measured on the GPU (attention_bwd.md v18, v22)."""
from __future__ import annotations

import pytest

from ptxbench.tools.compile import compile_source
from ptxbench.workloads.registry import get_workload
from ptxbench.workloads.solutions.attention_backward import fast_backward
from ptxbench.workloads.solutions.attention_bwd_variants.registry import variant_text

BN, BM = 128, 64  # keys per CTA (two consumers of 64), query rows per block


def _all_masked(key_lo: int, q0: int) -> bool:
    """Every (key, query) pair of 64 keys from key_lo and the block's 64 rows from q0 is masked (key > query)."""
    return all(k > q for k in range(key_lo, key_lo + 64) for q in range(q0, q0 + BM))


@pytest.mark.parametrize("seq", [256, 4096])
def test_only_consumer_1s_first_block_sees_no_key(seq):
    for key0 in range(0, seq, BN):
        q_first = key0 // BM  # the kernel's first causal query block
        for qb in range(q_first, seq // BM):
            q0 = qb * BM
            dead = {c for c in range(2) if _all_masked(key0 + 64 * c, q0)}
            assert dead == ({1} if q0 == key0 else set()), (key0, q0, dead)
            # the live block's condition for keys 64.. (`!CAUSAL || q0 > key0`) is "consumer 1 is not dead"
            assert (q0 > key0) == (1 not in dead)


PAIRS = [("causal_skip", "dq_late"), ("skip_plain", "pre_plain")]  # (variant, the variant it is built on)


@pytest.mark.parametrize("name", [v for v, _ in PAIRS])
def test_the_text_skips_consumer_1s_first_s_and_halves_only_that_dq_product(name):
    text = variant_text(f"{name}+head_groups")
    assert f"if (!CAUSAL || c == 0) {{  // {name}: consumer 1's first block is dead" in text
    assert f"if (CAUSAL && c == 1 && n_iter > 0) {{  // {name}" in text and "for (; it < n_iter; ++it) {" in text
    block = text[text.index("void consumer_block_pf("):text.index("void consumer_block_dead(")]
    assert "if (!CAUSAL || q0 > key0) {  // causal_skip: keys 64.." in block
    dead = text[text.index("void consumer_block_dead("):]
    dead = dead[:dead.index("\n}\n")]
    assert "issue_nt<HD, 64, KD>(p," not in dead and "ex2(" not in dead and "issue_tn" not in dead  # no dP^T, P, dV / dK
    assert "for (int kk = 0; kk < 4; ++kk) wgmma_ss_tt(dq," in dead and "named_barrier_sync(1, 256);" in dead
    # its dQ tile: sent by itself (skip_plain), or left for the next block to send (dq_late's)
    assert ("bulk_reduce_add(dq_rows" in dead) == (name == "skip_plain") != ("pending = dq_rows" in dead)


def _kernels(name: str):
    r = compile_source(fast_backward(get_workload("mha_bwd_d128"), variant_text(name)), "cuda", "sm_90a")
    assert r.status == "ok" and not r.warnings, (name, [w.message for w in r.warnings])  # no C7512 serialisation
    return r.kernels


@pytest.mark.parametrize("name,on", PAIRS)
def test_non_causal_kernels_are_the_bases_and_causal_ones_gain_only_the_dead_block(name, on):
    base, skip = _kernels(f"{on}+head_groups"), _kernels(f"{name}+head_groups")
    for kernel, k in skip.items():
        assert k.spill_stores == k.spill_loads == 0 and k.registers == base[kernel].registers, kernel
        if "causal" not in kernel:
            assert k.sass_opcodes == base[kernel].sass_opcodes, kernel
    # the dead block's dQ product (4 k16 steps) and next S^T (KD / 16), and one more where ptxas 13.5 builds the
    # live block's split dQ product
    for kernel, kd in (("attn_bwd_wgmma_causal", 128), ("attn_bwd_wgmma_d96_causal", 96)):
        extra = skip[kernel].sass_opcodes["HGMMA"] - base[kernel].sass_opcodes["HGMMA"]
        assert extra == 4 + kd // 16 + 1, (kernel, extra)
