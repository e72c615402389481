"""The backward's dq_writer variant (workloads/solutions/attention_bwd_variants/dq_writer.py): the 128-wide kernels'
dQ tiles reduced by a writer warp of the producer warpgroup. Checked here: it assembles without spills, the consumers
of the D = 128 kernels arrive (bar.arrive) where they met, their bulk reductions move to the writer, and the D = 96 /
D = 64 kernels keep late_d96's opcode counts; a mirror of the barrier protocol shows every named
barrier's generations filled by the right arrivals, with no wait that cannot end, for every block count. The speed
and the absence of a hang on the hardware: the GPU (bench/gpu_round.sh bwd-variants)."""
from __future__ import annotations

import pytest

from ptxbench.tools.compile import compile_source
from ptxbench.tools.regpool import pool_shortfall, setmaxnreg_moves
from ptxbench.tools.sass import disassemble
from ptxbench.workloads.registry import get_workload
from ptxbench.workloads.solutions.attention_backward import fast_backward
from ptxbench.workloads.solutions.attention_bwd_variants.registry import variant_text


@pytest.fixture(scope="module")
def compiled():
    return {v: compile_source(fast_backward(get_workload("mha_bwd_d128"), variant_text(v)), "cuda", "sm_90a")
            for v in ("dq_writer+head_groups", "late_d96+head_groups")}


def test_the_128_wide_kernels_arrive_and_the_others_are_late_d96s(compiled):
    mine, ref = compiled["dq_writer+head_groups"], compiled["late_d96+head_groups"]
    assert mine.status == "ok" and not mine.warnings, [w.message for w in mine.warnings]
    for name, k in mine.kernels.items():
        assert k.spill_stores == k.spill_loads == 0, name
    listing = disassemble(mine.cubin_path)
    for name in ("attn_bwd_wgmma", "attn_bwd_wgmma_causal", "attn_bwd_wgmma_gqa"):
        assert any(i.opcode.startswith("BAR.ARV") for i in listing[name]), name
        assert mine.kernels[name].sass_opcodes["HGMMA"] == ref.kernels[name].sass_opcodes["HGMMA"]
    # the D = 96 / 64 kernels are late_d96's, opcode for opcode (the producer's stepped rows are the writer kernels')
    for name in ("attn_bwd_wgmma_d96", "attn_bwd_wgmma_d96_causal", "attn_bwd_wgmma_d64", "attn_bwd_wgmma_d64_causal"):
        assert mine.kernels[name].sass_opcodes == ref.kernels[name].sass_opcodes, name


def test_the_register_moves_fit_the_ctas_pool(compiled):
    """The first build gave the producer warpgroup 32 registers: the consumers' setmaxnreg.inc to 240 then asked the
    CTA's pool for 1,024 registers more than it held, and every 128-wide kernel hung on the H200. The producer
    warpgroup keeps the reference's 24."""
    listing = disassemble(compiled["dq_writer+head_groups"].cubin_path)
    for name in ("attn_bwd_wgmma", "attn_bwd_wgmma_causal", "attn_bwd_wgmma_gqa", "attn_bwd_wgmma_d96"):
        moves = setmaxnreg_moves(listing[name])
        assert moves.dec == [24] and moves.inc == [240], (name, moves)
        assert pool_shortfall(compiled["dq_writer+head_groups"].kernels[name].registers, 384, moves) == 0, name


def _run_protocol(n_iter: int, lag: int) -> list[str]:
    """A mirror of the protocol: consumers 0 and 1 and the writer as step lists over named barriers 5 + c (FULL: the
    consumers arrive, the writer syncs) and 7 + c (FREE: the writer arrives, the consumers sync), and barrier 1 (both
    consumers, every block). Runs them interleaved, consumer 1 started `lag` steps late, and returns what is left of each
    when nothing can move (empty lists: every thread finished)."""
    def consumer(c):
        for _ in range(n_iter):
            yield ("sync", 1, 2)            # named_barrier_sync(1, 256): both consumers
            yield ("sync", 7 + c, 2)        # FREE: this consumer and the writer
            yield ("arrive", 5 + c, 2)      # FULL: the tile is stored and fenced

    def writer():
        if n_iter > 0:
            yield ("arrive", 7, 2)
            yield ("arrive", 8, 2)
        for it in range(n_iter):
            for c in (0, 1):
                yield ("sync", 5 + c, 2)
                if it + 1 < n_iter:
                    yield ("arrive", 7 + c, 2)

    threads = {"c0": list(consumer(0)), "c1": [("idle",)] * lag + list(consumer(1)), "w": list(writer())}
    count: dict[int, int] = {}        # arrivals in the barrier's current generation
    waiting: dict[str, tuple] = {}    # thread -> (barrier, generation) it waits for
    gen: dict[int, int] = {}
    moved = True
    while moved:
        moved = False
        for name, steps in threads.items():
            if name in waiting:
                bar, g = waiting[name]
                if gen.get(bar, 0) > g:
                    del waiting[name]
                    moved = True
                continue
            if not steps:
                continue
            step = steps.pop(0)
            moved = True
            if step[0] == "idle":
                continue
            kind, bar, need = step
            count[bar] = count.get(bar, 0) + 1
            g = gen.get(bar, 0)
            if count[bar] == need:
                count[bar], gen[bar] = 0, g + 1
            elif kind == "sync":
                waiting[name] = (bar, g)
    assert not count or set(count.values()) == {0}, count  # no partial generation left behind
    return [name for name, steps in threads.items() if steps or name in waiting]


@pytest.mark.parametrize("n_iter", [1, 2, 3, 64, 256])
@pytest.mark.parametrize("lag", [0, 1, 5])
def test_the_barrier_protocol_ends_with_every_generation_full(n_iter, lag):
    assert _run_protocol(n_iter, lag) == []
