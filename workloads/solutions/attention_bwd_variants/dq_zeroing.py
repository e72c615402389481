"""st_walk: st_static with the fp32 dQ accumulator zeroed in the main kernel by walkers (each CTA's idle producer
warps), not by the preprocess."""
from __future__ import annotations

from .edits import apply_edits

# st_walk: st_static with the fp32 accumulator zeroed inside the main kernel, not by attn_bwd_pre (805 MB of zero
# writes at D = 128; under ncu the preprocess took 229 us of 7.27 ms with them). dq_zero (v13) did this with slices
# owned by key block and zeroed by the producer thread alone when their owner had not started, and lost 4.9% / 43%
# causal. Here the slices (128 rows of a query head, one int state each in the zeroed scratch dQflag: 0 untouched,
# 1 being zeroed, 2 zeroed) are walked: the three idle producer warps of every CTA go through the slices their CTA
# will reduce into, in the order it will, claim each one nobody has (atomicCAS 0 -> 1), zero it 96 threads wide,
# and release it (2). A walker never waits for anything, so every claimed slice is zeroed and every slice a CTA needs
# is claimed by someone (its own walker at the latest). The producer thread acquires a block's slice state before
# its arrival on the block's dO barrier (which every consumer waits on before its reduce-add), waiting while it is
# not 2: about a microsecond per slice of the walk against two blocks (5 us) per slice of the consumers.
ST_WALK_HELPERS = r"""// st_walk: the fp32 accumulator's slices (128 rows of a query head, DC floats a row, contiguous), zeroed in this
// kernel. A slice's state: 0 untouched, 1 being zeroed, 2 zeroed.
__device__ __forceinline__ int load_acquire(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.s32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void store_release(int* p, int v) {
  asm volatile("st.release.gpu.global.s32 [%0], %1;" :: "l"(p), "r"(v) : "memory");
}

// The dK / dV epilogue in 16-byte stores"""

ST_WALK_WALKER = r"""    } else if (t >= 32) {  // st_walk: warps 1-3 walk this CTA's slices in the order its blocks need them
      int* claimed = reinterpret_cast<int*>(empty + Stages<HD>::N);  // past the mbarriers
      constexpr int SPB = HD == 64 ? 1 : 2;  // query blocks a slice holds
      for (int it = 0; it < n_iter; it += SPB) {  // a slice per SPB blocks (q_first is a multiple of SPB)
        const int slice = ((GQA ? bkv * group : bkv) + it / per_head) * (S / BN) + (q_first + it % per_head) / SPB;
        if (t == 32) *claimed = atomicCAS(dQflag + slice, 0, 1) == 0;
        named_barrier_sync(6, 96);
        if (*reinterpret_cast<volatile int*>(claimed)) {
          float4* v = reinterpret_cast<float4*>(dQacc + static_cast<size_t>(slice) * BN * DC);
#pragma unroll 1  // the producer warpgroup's 24 registers
          for (int i = t - 32; i < 32 * DC; i += 96) v[i] = make_float4(0.f, 0.f, 0.f, 0.f);
          asm volatile("fence.proxy.async.global;" ::: "memory");  // the zeros before the bulk reduce-adds (async proxy)
          __threadfence();
        }
        named_barrier_sync(6, 96);  // every warp's zeros are published; `claimed` may be written again
        if (t == 32 && *reinterpret_cast<volatile int*>(claimed)) store_release(dQflag + slice, 2);
      }
    }
  } else {
    setmaxnreg_inc<CONSUMER_REGS>();"""

ST_WALK_PRODUCER = (r"""        mbar_arrive_expect_tx(&fulldO[st], QT + QR * 4);
#pragma unroll
        for (int s = 0; s < 2; ++s)
          tma_load_2d(sdO + st * QT + s * QSLAB, tmdO, &fulldO[st], HD == 128 ? 64 * s : 0, q_row + (HD == 128 ? 0 : 64 * s));
        bulk_load(sDr + st * QR, Dr + q_row, QR * 4, &fulldO[st]);""",
                    r"""        mbar_expect_tx(&fulldO[st], QT + QR * 4);
#pragma unroll
        for (int s = 0; s < 2; ++s)
          tma_load_2d(sdO + st * QT + s * QSLAB, tmdO, &fulldO[st], HD == 128 ? 64 * s : 0, q_row + (HD == 128 ? 0 : 64 * s));
        bulk_load(sDr + st * QR, Dr + q_row, QR * 4, &fulldO[st]);
        // st_walk: the block's accumulator slice is zeroed before the consumers, who wait on this barrier, reduce
        // into it (checked once per slice: consecutive blocks share one; a walker zeroes it, never waiting)
        const int slice = q_row / BN;  // of all B * H * S rows
        if (slice != ready) {
          while (load_acquire(dQflag + slice) != 2) __nanosleep(64);
          ready = slice;
        }
        mbar_arrive(&fulldO[st]);""")


def st_walk(text: str) -> str:
    """st_static's text (`text`) with the accumulator zeroed by walkers."""
    one = [
        ("// The dK / dV epilogue in 16-byte stores", ST_WALK_HELPERS),
        ("    setmaxnreg_dec<PRODUCER_REGS>();", "    setmaxnreg_dec<PRODUCER_REGS>();\n"
         "    constexpr int DC = HD == 64 ? 64 : KD;  // st_walk: floats a dQacc row"),
        ("    }\n  } else {\n    setmaxnreg_inc<CONSUMER_REGS>();", ST_WALK_WALKER),  # after the producer thread's loop
        # the slices are DC floats a row: D = 64's entries serve D = 64 only
        ("(HD == 128 && KD == 128 && D != 128))", "(HD == 128 && KD == 128 && D != 128) ||\n      (HD == 64 && D != 64))"),
        ("      for (int it = 0; it < n_iter; ++it) {\n        const int st = it % Stages<HD>::N;",
         "      int ready = -1;  // st_walk: the last slice found zeroed\n"
         "      for (int it = 0; it < n_iter; ++it) {\n        const int st = it % Stages<HD>::N;"),
        ST_WALK_PRODUCER,
        # attn_bwd_pre no longer zeroes the accumulator
        ("  float2* acc = reinterpret_cast<float2*>(dQacc + static_cast<size_t>(row) * D);\n", ""),
        ("    acc[i] = make_float2(0.f, 0.f);\n", ""),
        ("float* __restrict__ L2, float* __restrict__ dQacc, int rows, int D) {", "float* __restrict__ L2, int rows, int D) {"),
        ('"scratch:L2", "scratch:dQacc", "i32:B * H * S", "i32:D"]', '"scratch:L2", "i32:B * H * S", "i32:D"]'),
        # the main kernel takes the slice states
        ("__nv_bfloat16* __restrict__ dK, __nv_bfloat16* __restrict__ dV, int S, int D,\n",
         "__nv_bfloat16* __restrict__ dK, __nv_bfloat16* __restrict__ dV, int* __restrict__ dQflag, int S, int D,\n"),
        ('"scratch:dQacc", "dK", "dV", "i32:S"', '"scratch:dQacc", "dK", "dV", "scratch:dQflag", "i32:S"'),
        ('[scratch.dQacc]\ndtype = "float32"\nshape = ["B", "H", "S", "D"]\n',
         '[scratch.dQacc]\ndtype = "float32"\nshape = ["B", "H", "S", "D"]\n\n'
         '[scratch.dQflag]  # st_walk: per 128-row slice of the accumulator, 0 untouched, 1 being zeroed, 2 zeroed\n'
         'dtype = "int32"\nshape = ["B * H", "cdiv(S, 128)"]\nzero = true\n'),
        ("// VARIANT st_static (attention_bwd_variants.py): ",
         "// VARIANT st_walk (attention_bwd_variants.py): st_static with the fp32 dQ accumulator zeroed in the main "
         "kernel (each CTA's idle producer warps walk its slices, claiming by atomicCAS), not by attn_bwd_pre;\n"
         "// st_static: "),
    ]
    text = apply_edits(text, one, "st_walk")
    return apply_edits(text, [("__nv_bfloat16* __restrict__ dV, int S, int D, float scale",  # the 9 entry points
                               "__nv_bfloat16* __restrict__ dV, int* __restrict__ dQflag, int S, int D, float scale"),
                              ("dQacc, dK, dV, S, D, scale", "dQacc, dK, dV, dQflag, S, D, scale")], "st_walk", count=9)
