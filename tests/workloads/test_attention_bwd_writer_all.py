"""The backward's writer_all variant (workloads/solutions/attention_bwd_variants/writer_all.py): the writer warp in the
D = 64 kernels too. Checked here: it assembles within the CTA's register pool, the D = 64 consumers arrive on the
writer's barrier and issue no reduction, the D = 128 / 96 kernels are writer_d96's, opcode for opcode, and the D = 64
kernels' spills stay the few prologue values ptxas 13.5 keeps across the warpgroups' parting (a change that spills
more fails here first). The barrier protocol is dq_writer's (test_attention_bwd_dq_writer.py's mirror). The speed:
the GPU (bench/gpu_round.sh bwd-variants)."""
from __future__ import annotations

import pytest

from ptxbench.tools.compile import compile_source
from ptxbench.tools.regpool import pool_shortfall, setmaxnreg_moves
from ptxbench.tools.sass import disassemble
from ptxbench.workloads.registry import get_workload
from ptxbench.workloads.solutions.attention_backward import fast_backward
from ptxbench.workloads.solutions.attention_bwd_variants.registry import variant_text

D64 = ("attn_bwd_wgmma_d64", "attn_bwd_wgmma_d64_causal", "attn_bwd_wgmma_d64_gqa")


@pytest.fixture(scope="module")
def compiled():
    return {v: compile_source(fast_backward(get_workload("mha_bwd_d64"), variant_text(v)), "cuda", "sm_90a")
            for v in ("writer_all+head_groups", "writer_d96+head_groups")}


def test_the_d64_kernels_leave_their_reductions_to_the_writer(compiled):
    mine, ref = compiled["writer_all+head_groups"], compiled["writer_d96+head_groups"]
    assert mine.status == "ok"
    listing = disassemble(mine.cubin_path)
    for name, k in mine.kernels.items():
        if name.startswith("attn_bwd_wgmma"):
            assert pool_shortfall(k.registers, 384, setmaxnreg_moves(listing[name])) == 0, name
    for name in D64:
        k, ops = mine.kernels[name], [i.opcode for i in listing[name]]
        assert k.spill_stores <= 20 and sum(op.startswith("STL") for op in ops) <= 3, (name, k.spill_stores)
        assert any(op.startswith("BAR.ARV") for op in ops), name
        assert k.sass_opcodes["HGMMA"] == ref.kernels[name].sass_opcodes["HGMMA"], name
        assert k.sass_opcodes["UBLKRED"] > ref.kernels[name].sass_opcodes["UBLKRED"] == 1, name  # the writer's, unrolled
    for name in ("attn_bwd_wgmma", "attn_bwd_wgmma_causal", "attn_bwd_wgmma_gqa", "attn_bwd_wgmma_d96",
                 "attn_bwd_wgmma_d96_causal", "attn_bwd_wgmma_d96_gqa"):
        assert mine.kernels[name].sass_opcodes == ref.kernels[name].sass_opcodes, name
        assert mine.kernels[name].spill_stores == 0, name


def test_the_d64_block_publishes_through_the_writer():
    text = variant_text("writer_all+head_groups")
    block = text[text.index("void consumer_block("):text.index("void store_dq_tile(")]
    assert "bulk_reduce_add(" not in block and "named_barrier_sync(3 + c, 128)" not in block
    assert block.index("named_barrier_sync(7 + c, 160);") < block.index("sts64(tile") < \
        block.index("named_barrier_arrive(5 + c, 160);")


def test_writer_exit_changes_only_the_writers_last_wait():
    import difflib

    base, mine = variant_text("writer_all+head_groups"), variant_text("writer_exit+head_groups")
    changed = [ln[0] + ln[1:].strip() for ln in difflib.unified_diff(base.splitlines(), mine.splitlines(), lineterm="", n=0)
               if ln[:1] in "+-" and ln[:3] not in ("+++", "---") and not ln[1:].startswith("//")]  # not the header
    assert changed == ["-if (issuer) bulk_wait_all();  // the last reductions are done before the CTA leaves",
                       "+if (issuer) bulk_wait_read();  // writer_exit: the last reductions have read their tiles (the "
                       "grid's end orders their adds)"]
