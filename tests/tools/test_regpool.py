"""tools/regpool.py: setmaxnreg's moves read from SASS, and the CTA pool's arithmetic (no GPU: the hang it predicts
was seen on the H200, bench/results/attention_bwd.md v27)."""
from __future__ import annotations

import pytest

from ptxbench.tools.regpool import SetmaxnregMoves, pool_note, pool_shortfall, setmaxnreg_moves
from ptxbench.tools.sass import SassInstruction


def _listing(dec: int, inc: int) -> list[SassInstruction]:
    return [SassInstruction(opcode="BAR.SYNC.DEFER_BLOCKING", operands="0x0"),
            SassInstruction(opcode="USETMAXREG.TRY_ALLOC.CTAPOOL", operands=f"UP0,{hex(inc)}"),
            SassInstruction(opcode="USETMAXREG.DEALLOC.CTAPOOL", operands=hex(dec))]


def test_moves_are_read_from_the_immediates():
    assert setmaxnreg_moves(_listing(24, 240)) == SetmaxnregMoves(dec=[24], inc=[240])
    assert setmaxnreg_moves([SassInstruction(opcode="HGMMA.64x64x16.F32.BF16", operands="gdesc[UR4], RZ")]) == \
        SetmaxnregMoves()


def test_the_reference_layout_fits_and_a_producer_at_32_does_not():
    # 384 threads at 168 registers: 64,512. 24 / 240 / 240 is exactly that; 32 / 240 / 240 is 1,024 over.
    assert pool_shortfall(168, 384, setmaxnreg_moves(_listing(24, 240))) == 0
    assert pool_shortfall(168, 384, setmaxnreg_moves(_listing(32, 240))) == 1024
    assert pool_shortfall(168, 384, setmaxnreg_moves(_listing(32, 232))) == 0
    # two warpgroups: one producer feeds one consumer
    assert pool_shortfall(168, 256, setmaxnreg_moves(_listing(40, 296 - 8))) == 0
    assert pool_shortfall(128, 256, setmaxnreg_moves(_listing(40, 232))) == 128 * (104 - 88)


def test_no_moves_or_one_warpgroup_is_never_flagged():
    assert pool_shortfall(168, 384, SetmaxnregMoves()) == 0
    assert pool_shortfall(168, 128, setmaxnreg_moves(_listing(24, 240))) == 0
    assert pool_note("k", 168, 384, setmaxnreg_moves(_listing(24, 240))) is None


def test_the_note_gives_the_arithmetic():
    note = pool_note("attn_bwd_wgmma", 168, 384, setmaxnreg_moves(_listing(32, 240)))
    assert note is not None
    assert "384 x 168 = 64,512" in note and "frees 17,408" in note and "ask 18,432" in note and "1,024 more" in note
    assert "waits forever" in note


OVER_THE_POOL = '''/* ptxbench
language = "cuda"

[[launch]]
kernel = "gemm"
grid = [1]
block = [BLOCK]
args = ["A", "B", "C", "i32:M", "i32:N", "i32:K"]
*/
#include <cuda_bf16.h>

extern "C" __global__ void __launch_bounds__(384, 1) gemm(const __nv_bfloat16* __restrict__ A,
                                                         const __nv_bfloat16* __restrict__ B,
                                                         __nv_bfloat16* __restrict__ C, int M, int N, int K) {
  if (threadIdx.x < 128) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 DEC;");
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 240;");
    const int i = threadIdx.x - 128;
    if (i < N) C[i] = __float2bfloat16(__bfloat162float(A[i]) * __bfloat162float(B[i]) * K);
  }
}
'''


def _evaluated(dec: int, block: int):
    from ptxbench.tools.evaluate import LocalEvaluator
    from ptxbench.tools.evaluator import EvalOptions

    source = OVER_THE_POOL.replace("DEC", str(dec)).replace("BLOCK", str(block))
    return LocalEvaluator().evaluate("smoke_gemm_bf16_m256_n256_k512", source, EvalOptions(no_gpu=True))


def test_a_plan_over_the_pool_gets_the_arithmetic_in_its_compile_warnings():
    from ptxbench.agent.loop.feedback import render_eval

    r = _evaluated(32, 384)
    assert r.status == "COMPILED"
    k = r.compile.kernels["gemm"]
    assert (k.registers, k.setmaxnreg_dec, k.setmaxnreg_inc) == (168, [32], [240])
    notes = [w.message for w in r.compile.warnings if "setmaxnreg cannot be met" in w.message]
    assert len(notes) == 1 and "1,024 more than the pool can hold" in notes[0]
    assert "setmaxnreg cannot be met" in render_eval(r, turn=1, no_gpu=True)
    # at 24 the same layout fits; launched as 256 threads (one consumer) 32 fits too
    for dec, block in ((24, 384), (32, 256)):
        r = _evaluated(dec, block)
        assert r.status == "COMPILED" and not any("setmaxnreg" in w.message for w in r.compile.warnings), (dec, block)


@pytest.mark.gpu
def test_on_the_gpu_the_kernel_over_the_pool_hangs_and_the_one_within_it_runs():
    """What the note says, on the hardware: at dec 32 the consumers' inc never returns (TIMEOUT, the run goes on);
    at dec 24 the same kernel runs to its (wrong: it writes one row) answer."""
    from gpu_helpers import shared_evaluator
    from ptxbench.tools.evaluator import EvalOptions

    ev = shared_evaluator()
    source = OVER_THE_POOL.replace("BLOCK", "384")
    hung = ev.evaluate("smoke_gemm_bf16_m256_n256_k512", source.replace("DEC", "32"), EvalOptions(timeout_s=3, time=False))
    assert hung.status == "TIMEOUT", (hung.status, hung.message)
    ran = ev.evaluate("smoke_gemm_bf16_m256_n256_k512", source.replace("DEC", "24"), EvalOptions(timeout_s=3, time=False))
    assert ran.status in ("INCORRECT_NUMERICAL", "INCORRECT_NAN"), (ran.status, ran.message)


def test_a_hang_over_the_pool_names_the_likely_cause_in_its_message():
    from fake_workers import evaluator
    from ptxbench.tools.evaluator import EvalOptions

    ev, _ = evaluator("TIMEOUT")  # a stand-in worker that answers every evaluation as a hang
    source = OVER_THE_POOL.replace("BLOCK", "384")
    try:
        over = ev.evaluate("smoke_gemm_bf16_m256_n256_k512", source.replace("DEC", "32"), EvalOptions(time=False))
        within = ev.evaluate("smoke_gemm_bf16_m256_n256_k512", source.replace("DEC", "24"), EvalOptions(time=False))
    finally:
        ev.close()
    assert over.status == "TIMEOUT" and "Likely cause, from the compile warnings: gemm: setmaxnreg cannot be met" in \
        over.message
    assert within.status == "TIMEOUT" and "Likely cause" not in within.message  # another hang: no guess


def test_a_kernel_short_of_registers_is_told_how_far_the_pool_lets_its_consumers_go():
    from ptxbench.tools.regpool import headroom_note, max_inc, plan_pool_notes
    from ptxbench.tools.results import CompileIssue, CompileResult, KernelResources

    assert max_inc(168, 384, 24) == 240 and max_inc(168, 384, 40) == 232 and max_inc(168, 384, 32) == 232
    assert max_inc(248, 256, 24) == 256  # one consumer: setmaxnreg's own ceiling
    assert headroom_note("k", 168, 384, SetmaxnregMoves([24], [240])) is None  # already at the pool's limit
    note = headroom_note("k", 168, 384, SetmaxnregMoves([24], [208]))
    assert note is not None and "setmaxnreg.inc 240 (now 208), 32 registers more" in note

    class Launch:  # what plan_pool_notes reads of a ResolvedLaunch
        kernel, block = "k", (384, 1, 1)

    starved = KernelResources(name="k", registers=168, setmaxnreg_dec=[24], setmaxnreg_inc=[208])
    serialised = CompileIssue(message="potential performance loss (C7512): wgmma.mma_async instructions are serialized "
                                      "due to insufficient register resources for the function 'k'", severity="warning")
    ok = CompileResult(status="ok", arch="sm_90a", kernels={"k": starved})
    assert plan_pool_notes([Launch()], ok) == []  # not short of registers: nothing to say
    assert plan_pool_notes([Launch()], ok.model_copy(update={"warnings": [serialised]})) == [
        headroom_note("k", 168, 384, SetmaxnregMoves([24], [208]))]
    spills = ok.model_copy(update={"kernels": {"k": starved.model_copy(update={"spill_stores": 8})}})
    assert len(plan_pool_notes([Launch()], spills)) == 1


def test_spills_are_counted_by_the_side_of_the_setmaxnreg_move_they_follow():
    from ptxbench.tools.regpool import spills_by_side
    from ptxbench.tools.sass import SassInstruction

    def ins(op, operands=""):
        return SassInstruction(opcode=op, operands=operands)

    listing = [ins("STL.64", "[R1],R2"),  # the prologue, before either branch: neither side's
               ins("USETMAXREG.TRY_ALLOC.CTAPOOL", "UP0,0xf0"), ins("HGMMA.64x64x16.F32.BF16"), ins("LDL", "R3,[R1]"),
               ins("USETMAXREG.DEALLOC.CTAPOOL", "0x18"), ins("LDL.LU.64", "R4,[R1]"), ins("STL", "[R1+0x8],R5"),
               ins("BRA", "0x100"), ins("LDL", "R6,[R1+0x8]")]  # an out-of-line stub after the last move
    assert spills_by_side(listing) == (3, 1)
    assert spills_by_side([ins("STL", "[R1],R2"), ins("LDL", "R2,[R1]")]) == (0, 0)  # no moves: nothing to place


def test_spills_in_the_released_warpgroup_get_the_other_move():
    """The attention backward's pair_d64 (writer warps in the producer warpgroup at 24 registers) spilled there; the
    note names the dec that fixed it on the H200 (40, with the consumers at 232)."""
    from ptxbench.tools.regpool import plan_pool_notes, released_note
    from ptxbench.tools.results import CompileResult, KernelResources

    note = released_note("k", 168, 384, SetmaxnregMoves([24], [240]), 7)
    assert note is not None and "setmaxnreg.dec leaves 24" in note and "With dec 40" in note and \
        "setmaxnreg.inc 232" in note

    class Launch:
        kernel, block = "k", (384, 1, 1)

    k = KernelResources(name="k", registers=168, setmaxnreg_dec=[24], setmaxnreg_inc=[240], spill_stores=24,
                        spills_after_dec=7, spills_after_inc=2)
    comp = CompileResult(status="ok", arch="sm_90a", kernels={"k": k})
    assert plan_pool_notes([Launch()], comp) == [note]
    # spills on the consumers' side, or about as many on each (the reference's 40 / 232 build: 3 and 2, prologue
    # values read back on both): the headroom note as before (none here: they are at the pool's limit already)
    for after_dec in (0, 3, 4):
        consumers = comp.model_copy(update={"kernels": {"k": k.model_copy(update={"spills_after_dec": after_dec})}})
        assert plan_pool_notes([Launch()], consumers) == [], after_dec


def test_a_real_build_places_its_spills_after_the_dec():
    """pair_d64 at 24 / 240 (workloads/solutions/attention_bwd_variants/pair_d64.py): its D = 64 writers' warpgroup
    spills; the 40 / 232 split (the reference) leaves the causal kernel none."""
    from bwd_variant_checks import compile_variants

    built = compile_variants("mha_bwd_d64", "pair_d64+head_groups", "pair_d64_r40+head_groups")
    before, after = built["pair_d64+head_groups"].kernels, built["pair_d64_r40+head_groups"].kernels
    from ptxbench.tools.regpool import spills_mostly_released

    for name in ("attn_bwd_wgmma_d64", "attn_bwd_wgmma_d64_causal", "attn_bwd_wgmma_d64_gqa"):
        assert spills_mostly_released(before[name]), (name, before[name])
        assert not spills_mostly_released(after[name]), (name, after[name])  # what is left: a few on each side
    assert after["attn_bwd_wgmma_d64_causal"].spills_after_dec == after["attn_bwd_wgmma_d64_causal"].spill_stores == 0
