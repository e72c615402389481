"""Variants of the attention backward, as text edits of the checked-in file (attention_bwd_wgmma.cu), so that the
file stays the one copy of the kernel (an edit whose text has moved fails loudly) and the reference's
per-workload plan edits (attention_backward.py) apply to each unchanged. attention_bwd_template.py names them as
points of its parameter space, which builtin/tuner searches:

- `bulk_dq`: for the 128-wide kernels (D = 96, 128) dQ_partial goes through shared memory (fp32, the
  accumulator's row-major layout) and one `cp.reduce.async.bulk ... .add.f32` per query block, issued by one
  consumer thread, instead of 16 vector reductions per thread (D = 64 keeps them); L2 / Dr and dS^T through
  `ld/st.shared` (the generic accesses cost an address-space check each).
- `bulk_dq_s3`: `bulk_dq` with a 3-deep Q / dO ring for the 128-wide kernels (232,192 of the 232,448 bytes of
  shared memory a block may have).
- `decoupled`: the two consumers no longer meet on a named barrier every block: each computes the dQ of the
  PREVIOUS block, waiting (on an mbarrier) only for the other's dS^T of that block, so they can run up to a
  block apart and one's exponentials overlap the other's tensor work; consumer 1 starts once consumer 0's first
  exponentials are done; dS^T triple-buffered (an mbarrier says when both dQ products have read a buffer; a model
  of the protocol, tests/workloads/test_attention_bwd_decoupled_model.py, shows the consumers stay within about
  a block of each other and two buffers without that wait would be as safe: 16 KB to win back once measured);
  a 3-deep ring for the 128-wide kernels; shared memory as a formula in D (no D = 64 plan edit needed).
- `bulk_dq_d64`: `bulk_dq_s3` with D = 64's dQ by bulk
  reductions too: each consumer's partial (its own 64 keys, all 64 columns) into its own [64][64] fp32 tile in
  shared memory and one `cp.reduce.async.bulk ... .add.f32` per consumer and query block, instead of 16 float2
  atomics per thread; the 128-wide kernels are bulk_dq_s3's (same launch plan and SASS). Shared memory as a
  formula in D (one 32 KB dQ area either way). On the H200: D = 64 0.613x cuDNN (bulk_dq_s3 0.483x), causal 0.673x
  (0.544x).
- `dq_tiles`: `bulk_dq_d64` with each consumer's dQ reduced on its own at every D: at D = 96 / 128 consumer c's
  64 x 64 column half goes into its own tile and its own bulk reduce-add, so the consumers no longer meet on a
  second named barrier for dQ; dQacc takes the tiles' layout (per 64-row block the column halves one after the
  other, rows with their 32-byte groups swizzled by the row, so a warp's tile stores hit each bank group twice
  instead of one group eight times), and the postprocess reads it back. The base of the reference (tiles_d96); in head_groups order (below):
  on the H200 -2% time at D = 128, -5% causal, -3% / -5% at D = 96, **-22% at D = 64** (0.630x -> 0.804x cuDNN),
  -15% D = 64 causal against bulk_dq_d64.
- `own_keys`: `dq_tiles` with every consumer's dQ over its own 64 keys and all D columns at D = 96 / 128 too (one
  m64n128 product per 16 keys, K's two column slabs one LBO apart), as D = 64 always did: a consumer reads only its
  own rows of dS^T, so the consumers never meet (the dS^T barrier becomes each consumer's own), at the price of twice
  the dQ reduce-add bytes and a 2-deep ring (the two 64 x D tiles take the third stage's shared memory).
  H200: 7-10% slower than dq_tiles at D = 128 / 96 (its doubled dQ tiles' shared-memory traffic), kept as a
  measured candidate.
- `own_keys_s3`: `own_keys` with the 3-deep ring back for the 128-wide kernels, each consumer's dQ leaving through
  one 64 x 64 tile a column half at a time (a read-wait and a barrier between the halves). Not measured yet.
- `own_keys_wide`: `own_keys` with a 16-byte dK / dV epilogue: the four lanes of a quad, which hold 4 bytes each of
  an 8-column group of a row, swap their values over four groups (a 4 x 4 transpose by shuffles), so that each lane
  stores one group's 16 bytes and a warp's store fills whole 32-byte sectors (the 4-byte stores left half of every
  sector unused: ncu's UncoalescedGlobalAccess, 12.6 M excess sectors at D = 128). H200: 1.5-2.5% faster than
  own_keys, still behind dq_tiles.
- `dq_tiles_wide`: the same epilogue on `dq_tiles`, to measure it apart from own_keys' risks. H200: -1.5% time at
  D = 128, -2.7% causal.
- `tiles_stack`: `q128_d64`, `d96_ksteps` and the wide epilogue at once (they change separate parts of
  dq_tiles), so a promotion of all three is measured as a whole. H200: D = 64 1.070x cuDNN (dq_tiles 0.809x), D = 96
  0.940x (0.877x); at D = 128 0.4-1.5% behind dq_tiles_wide (the second build of the block it carries).
- `d96_ksteps`: `dq_tiles` with S^T and dP^T over D = 96's own 96 columns: the 128-wide kernel serves D = 96
  with d 96..127 zero-filled by TMA, and their two k16 steps of each product (a quarter of those two GEMMs) add
  nothing. The consumer loop holds both builds of a block and picks one per launch. H200 (in tiles_stack): -7%
  at D = 96.
- `q128_d64`: `dq_tiles` with 128 query rows per iteration at D = 64 (FlashAttention-3's 128 x 128 tile at that
  head dim): S^T and dP^T as m64n128 products, half the blocks with their waits, barriers and stage hand-offs, and each
  consumer's dQ over all 128 keys for its own 64 query rows (the consumers already meet on the dS^T barrier at D = 64),
  so one 16 KB bulk reduce-add per 64 query rows instead of two: 6.4 GB of L2 reductions at D = 64 instead of 12.9.
  The 128-wide kernels are unchanged (QRows<HD> = 64 there). H200 (in tiles_stack): -24% time at D = 64.
- `tiles_d96`: tiles_stack with D = 96's build in entry points of its own (attn_bwd_wgmma_d96, _causal, _gqa), so
  the 128-wide kernels hold one build of the block (dq_tiles_wide's). H200: the fastest built version before
  st_ahead (its base): d128 0.873x, causal 0.911x, d96 0.937x / 0.969x, GQA 0.901x, d64 1.07x / 1.09x.

- `st_ahead`: tiles_d96 with each 128-wide block's S^T issued by the block before it, right after that block's dQ
  product, so the tensor pipe works while the consumer stores its dQ tile (the reference's profile had 19% of its
  stall samples waiting at the S^T / dP^T issue). What makes it assemble where `prefetch` (v3) and `prefetch_st`
  did not: P^T goes to registers of its own (the carried S^T accumulator is only read), dV and dK are waited for
  before dQ is issued (their bf16 operands are dead before the next S^T: no C7512), and a block opens with
  wait_group 0 (ptxas does not follow a group count across the loop's back edge: C7514). H200: the reference
  before dv_uniform: -5.8% time at D = 128 (0.898-0.918x cuDNN), -2% causal, -5% at D = 96 (0.981x / 0.991x),
  -6% GQA (0.938-0.952x) against tiles_d96.
- `dv_early`: st_ahead with dV += P^T dO issued right after the exponentials, before dP^T is waited for, and dS
  computed from P's packed bf16 pairs. In st_ahead's SASS ptxas sinks 23 of the 32 MUFU.EX2 below dP^T's
  WARPGROUP.DEPBAR, so the exponentials do not run under dP^T; the dV wgmma that reads them keeps them ahead of it.
  CPU: no spills (with P^T kept in fp32 beside the packed copy: 80-92 bytes); a mirror of its rounding
  (tests/workloads/test_attention_bwd_packed_p.py) gives dQ / dK 2.9e-3 relative Frobenius error against 2.4e-3 (the
  bound is 3e-2; the H200 measured 2.89e-3). H200 alone: level at D = 128, -1.2% causal, -0.6% at D = 96 causal
  against st_ahead; the base of dv_uniform. Its D = 64 twice (`dv_early_d64`, the same order in D = 64's block) ran
  5.2% slower and was deleted (attention_bwd.md v11).
- `dv_uniform`: dv_early with the consumer index warp-uniform to ptxas (`__shfl_sync` from lane 0) in the 128-wide
  kernels, so the K_c / V_c descriptors are built in uniform registers: 22 R2UR in the D = 128 kernel instead of 89,
  2,504 instructions instead of 2,664. H200: the fastest built version, the reference: -1.7% time at D = 128 (0.933x
  cuDNN), -4.2% causal (0.959x), -4.8% / -4.9% at D = 96 (1.031x / 1.043x), -2.2% GQA (0.972x) against st_ahead. At
  D = 64 the same broadcast ran 3.3% / 4.0% slower, so D = 64's entries keep the plain index (st_ahead's D = 64
  kernels, 1.066x / 1.092x).
- `dq_static`: dv_uniform with the dQ tile's width known to ptxas in the 128-wide block: its 16 float2 stores run
  straight (the runtime width put each behind its own branch, with its address recomputed from threadIdx: v11's
  profile had 16% of the stall samples there). 2,376 instructions at D = 128 instead of 2,504. H200: -4.7% time at
  D = 128 (0.980x cuDNN), -3.2% causal (0.995x), -4.1% GQA (1.013x), +1.7% at D = 96 (1.013x), -2.3% D = 96 causal
  (1.066x) against dv_uniform in the same call (attention_bwd.md v12). Its dS, like dv_early's, comes from bf16 P.
- `st_uniform`, `st_static`: the uniform index, then dq_static's stores, on st_ahead's order (dV issued after dS, both
  from fp32 P^T: dQ's error 0.00236, as before dv_early). H200: st_static 0.975x cuDNN at D = 128 (7.302 ms, +0.5%
  against dq_static), 0.984x causal (+1.3%), 1.015x / 1.032x at D = 96, 1.012x GQA; its D = 64 kernels are
  st_ahead's (1.066x / 1.092x). **The reference** (`st_static+head_groups`), the fastest version whose dQ holds the
  harness's rule on every input set: dv_early, dv_uniform and dq_static stay as measured candidates.

- `st_walk`: st_static with the fp32 accumulator zeroed in the main kernel by walkers: each CTA's idle producer warps
  claim (atomicCAS) and zero the 128-row slices their CTA will reduce into, in its order; the producer waits for a
  block's slice before its arrival on the dO barrier; attn_bwd_pre writes no zeros. Not measured yet.

Measured and deleted (attention_bwd.md v12-v13): `dq_fused` (the postprocess folded into the main kernel, the last CTA
of a KV head converting its dQ: 4.8% slower at D = 128, 27% GQA), `dq_discard` (on it, not run), `dq_recompute` (P^T
recomputed in fp32 for dS: precise, 3.6-5% slower), `dq_zero` / `st_zero` (the accumulator zeroed in the main kernel
in slices claimed by atomicCAS: 4.9% slower at D = 128, 43% causal, where a CTA's producer zeroed unclaimed slices
alone).

Launch orders, applied to any of them (`variant_text("X+order")`, X a variant or `checked-in`):

- `head_major`: the key blocks of one head launched side by side (grid [S / 128, B * H] instead of
  [B * H, S / 128]): the head-fastest grid puts 132 different heads on the SMs at once, each CTA streaming its
  head's whole Q and dO and reduce-adding into its head's fp32 dQ rows, none of which another CTA in flight
  shares, so every key block re-reads them from DRAM (41 GB of DRAM traffic at D = 128 under ncu, 25x the
  minimum); side by side, about four heads are in flight and the 32 key blocks of each share its rows in L2.
  On the H200 (bulk_dq_d64+head_major): D = 128 0.838x cuDNN against 0.614x, -27% time.
- `head_groups`: head_major's grid handed out by groups of 4 heads, key blocks longest-first across the group
  (the forward's LPT_GROUP order): the same locality, and causal keeps a longest-first order across heads
  (head_major has it within each head only): causal 0.840x against head_major's 0.830x, level elsewhere.
  `dv_uniform+head_groups` is the reference (attention_backward.REFERENCE_VARIANT).

    python3 bench/attention_bwd_check.py --variant bulk_dq        (on a GPU; bench/gpu_round.sh bwd-variants runs all)
    variant_text("bulk_dq")                                       (the solution text; attention_backward.fast_backward
                                                                   makes each workload's plan from it)

A variant that the GPU finds faster becomes the template's default (and the reference); one that loses is deleted,
its figures recorded in bench/results/attention_bwd.md (there: `prefetch`, the next block's S^T issued before
this block's dQ epilogue, level at D = 128 and 7% slower at D = 96; `decoupled_tiles`, decoupled with dq_tiles' dQ,
level with dq_tiles at D = 128 and 3-4% slower at D = 64 and 96).
"""
from __future__ import annotations

import re
from pathlib import Path

from .template_text import uniform_index_edit

REFERENCE = Path(__file__).with_name("attention_bwd_wgmma.cu")

BULK_DQ = [
    ("// Hopper (sm_90a) attention backward with TMA + wgmma,",
     "// VARIANT bulk_dq (attention_bwd_variants.py): dQ by one bulk reduction per query block.\n//\n"
     "// Hopper (sm_90a) attention backward with TMA + wgmma,"),
    ('smem = "1024 + 32768 * 2 + 2 * (16384 * 2 + 512) + 16384 * 2 + 256"  '
     '# slack, K, V, STAGES x (Q, dO, L2, Dr), 2 x dS, mbarriers',
     'smem = "1024 + 32768 * 2 + 2 * (16384 * 2 + 512) + 16384 * 2 + 32768 + 256"  '
     '# slack, K, V, STAGES x (Q, dO, L2, Dr), 2 x dS, dQ, mbarriers'),
    ("// D[64 x 128] += A[64 x 16] (registers, bf16 pairs)", """\
// Shared-memory accesses by 32-bit shared addresses (the generic ones cost an address-space check each).
__device__ __forceinline__ float2 lds64(const float* p) {
  float2 v;
  asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(v.x), "=f"(v.y) : "r"(smem_u32(p)));
  return v;
}
__device__ __forceinline__ void sts32(const void* p, uint32_t v) {
  asm volatile("st.shared.b32 [%0], %1;" :: "r"(smem_u32(p)), "r"(v) : "memory");
}
__device__ __forceinline__ void sts64(const void* p, float x, float y) {
  asm volatile("st.shared.v2.f32 [%0], {%1, %2};" :: "r"(smem_u32(p)), "f"(x), "f"(y) : "memory");
}

// dst[0 .. bytes) += src (fp32, global <- shared), in this thread's bulk group.
__device__ __forceinline__ void bulk_reduce_add(float* dst, const float* src, uint32_t bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;"
               :: "l"(reinterpret_cast<uint64_t>(dst)), "r"(smem_u32(src)), "r"(bytes) : "memory");
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}
__device__ __forceinline__ void bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory"); }
__device__ __forceinline__ void bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }

// D[64 x 128] += A[64 x 16] (registers, bf16 pairs)"""),
    ("                                               float (&dk)[HD / 2], float* __restrict__ dq_rows, int D, float sl2) {",
     "                                               float (&dk)[HD / 2], float* __restrict__ dq_rows, int D, float sl2,\n"
     "                                               float* sdQ, bool issuer) {"),
    ("""#pragma unroll
  for (int j = 0; j < 32; ++j) {
    const int q = 8 * (j / 4) + col0 + (j % 2);
    float e = ex2(fmaf(s[j], sl2, -sL2[q]));""", """\
  // the 16 query columns of this thread: pairs (8a + col0, + 1), a = 0..7, for L2 and Dr
  float2 l2[8], dr[8];
#pragma unroll
  for (int a = 0; a < 8; ++a) l2[a] = lds64(sL2 + 8 * a + col0);
#pragma unroll
  for (int j = 0; j < 32; ++j) {
    const int q = 8 * (j / 4) + col0 + (j % 2);
    float e = ex2(fmaf(s[j], sl2, -(j % 2 ? l2[j / 4].y : l2[j / 4].x)));"""),
    ("  for (int j = 0; j < 32; ++j) p[j] = s[j] * (p[j] - sDr[8 * (j / 4) + col0 + (j % 2)]);", """\
  for (int a = 0; a < 8; ++a) dr[a] = lds64(sDr + 8 * a + col0);
#pragma unroll
  for (int j = 0; j < 32; ++j) p[j] = s[j] * (p[j] - (j % 2 ? dr[j / 4].y : dr[j / 4].x));"""),
    ("    *reinterpret_cast<uint32_t*>(buf + row * 128 + (((q / 8) ^ (row % 8)) * 16) + (q % 8) * 2) = ds[i];",
     "    sts32(buf + row * 128 + (((q / 8) ^ (row % 8)) * 16) + (q % 8) * 2, ds[i]);"),
    ("  named_barrier_sync(1, 256);  // both consumers' dS^T rows are in `buf`", """\
  if (HD == 128 && issuer) bulk_wait_read();  // the previous block's dQ reduction has read sdQ
  named_barrier_sync(1, 256);  // both consumers' dS^T rows are in `buf` (and sdQ is free again)"""),
    ("""  const int dcol0 = HD == 128 ? 64 * c : 0;
#pragma unroll""", """\
  const int dcol0 = HD == 128 ? 64 * c : 0;
  if constexpr (HD == 128) {  // both consumers' column halves into sdQ ([64][D] fp32), then one bulk reduction
#pragma unroll
    for (int j = 0; j < 32; j += 2) {
      const int d = dcol0 + 8 * (j / 4) + col0;
      if (d < D) sts64(sdQ + (r + 8 * ((j / 2) % 2)) * D + d, dq[j], dq[j + 1]);
    }
    fence_proxy_async();
    named_barrier_sync(2, 256);
    if (issuer) bulk_reduce_add(dq_rows + static_cast<size_t>(q0) * D, sdQ, BM * D * 4);
    return;
  }
#pragma unroll"""),
    ("  float* sL2 = reinterpret_cast<float*>(sdS + 2 * DS_BYTES);  // STAGES x 64", """\
  float* sdQ = reinterpret_cast<float*>(sdS + 2 * DS_BYTES);  // HD = 128: 64 x D fp32
  float* sL2 = sdQ + (HD == 128 ? BM * HD : 0);                // STAGES x 64"""),
    ("""                                 dQacc + static_cast<size_t>(head) * S * D, D, sl2);
    }""", """\
                                 dQacc + static_cast<size_t>(head) * S * D, D, sl2, sdQ, threadIdx.x == 128);
    }
    if (HD == 128 && threadIdx.x == 128) bulk_wait_all();  // the last reductions are done before the CTA exits"""),
]

STAGES_3 = [
    ("// VARIANT bulk_dq (attention_bwd_variants.py): dQ by one bulk reduction per query block.",
     "// VARIANT bulk_dq_s3 (attention_bwd_variants.py): dQ by one bulk reduction per query block, and a\n"
     "// 3-deep Q / dO ring for the 128-wide kernels."),
    ('smem = "1024 + 32768 * 2 + 2 * (16384 * 2 + 512) + 16384 * 2 + 32768 + 256"  '
     '# slack, K, V, STAGES x (Q, dO, L2, Dr), 2 x dS, dQ, mbarriers',
     'smem = "1024 + 32768 * 2 + 3 * (16384 * 2 + 512) + 16384 * 2 + 32768 + 256"  '
     '# slack, K, V, 3 x (Q, dO, L2, Dr), 2 x dS, dQ, mbarriers'),
    ("constexpr int STAGES = 2;", """\
// Q / dO ring depth: 3 for the 128-wide kernels (the shared memory allows it with the dQ buffer), 2 for D = 64.
template <int HD>
struct Stages {
  static constexpr int N = HD == 128 ? 3 : 2;
};"""),
]



# The consumer of `decoupled`: the reference's consumer_block keeps its S^T / dP^T / exponential / dV / dK body;
# its dQ moves into consumer_dq (issue_dq + add_dq), run at the start of the next block.
DQ_HELPERS = r"""// dQ of query block `it` (rows q0.. of dq_rows) from its dS^T buffer once both consumers' rows are in it:
// HD = 128: columns 64c.. over all 128 keys; HD = 64: all columns over this consumer's keys. Issued and
// committed here; consumer_dq waits for it.
template <int HD>
__device__ __forceinline__ void issue_dq(float (&dq)[32], int it, int c, const uint8_t* sK, const uint8_t* sdS,
                                         uint64_t* dsReady) {
  const int b = it % DS_BUFS;
  mbar_wait(&dsReady[b], (it / DS_BUFS) & 1);
  constexpr int KSTEPS = HD == 128 ? 8 : 4;
  const int key_row0 = HD == 128 ? 0 : 64 * c;
  const uint8_t* kbase = sK + (HD == 128 ? c * KSLAB : 0) + key_row0 * 128;
  const uint64_t da = desc_mn(sdS + b * DS_BYTES + key_row0 * 128, 0), dbk = desc_mn(kbase, 0);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < KSTEPS; ++kk) wgmma_ss_tt(dq, da + kk * (2048 >> 4), dbk + kk * (2048 >> 4), kk != 0);
  wgmma_commit();
}

// dq element j: query row r + 8 ((j / 2) % 2), column 8 (j / 4) + col0 + j % 2 (+ 64c for HD = 128)
template <int HD>
__device__ __forceinline__ void add_dq(const float (&dq)[32], int q0, int c, int t, float* __restrict__ dq_rows, int D) {
  const int lane = t % 32, r = 16 * (t / 32) + lane / 4, col0 = 2 * (lane % 4);
  const int dcol0 = HD == 128 ? 64 * c : 0;
#pragma unroll
  for (int j = 0; j < 32; j += 2) {
    const int d = dcol0 + 8 * (j / 4) + col0;
    if (d < D) {
      float* dst = dq_rows + static_cast<size_t>(q0 + r + 8 * ((j / 2) % 2)) * D + d;
      atomicAdd(reinterpret_cast<float2*>(dst), make_float2(dq[j], dq[j + 1]));
    }
  }
}

// One query block for one consumer, without its dQ: that product (consumer_dq) runs at the start of the next
// block, so a consumer waits only for the other's dS^T of the previous block, never of this one, and the
// two consumers can run apart and one's exponentials overlap the other's tensor work. dS^T is
// triple-buffered: buffer b is rewritten (block it + 3) only after both consumers' dQ products of block it
// have read it (dsFree). Accumulator element j of this thread: row (key) r + 8 ((j / 2) % 2) of the
// consumer's 64, column (query) 8 (j / 4) + 2 (lane % 4) + j % 2 of the block.
"""

CONSUMER_DQ = r"""}

// The dQ of block `it` (rows q0 of dq_rows), whole: issued once both consumers' dS^T rows are in, waited, the
// buffer released, the rows added to the accumulator. Called at the start of the next block (so the
// accumulator registers are never live beside P^T / dS^T) and once after the last block.
template <int HD>
__device__ __forceinline__ void consumer_dq(int it, int q0, int c, int t, const uint8_t* sK, const uint8_t* sdS,
                                            uint64_t* dsReady, uint64_t* dsFree, float* __restrict__ dq_rows, int D) {
  float dq[32];
  issue_dq<HD>(dq, it, c, sK, sdS, dsReady);
  wgmma_wait<0>();
  wgmma_fence_regs(dq);
  if (t % 32 == 0) mbar_arrive(&dsFree[it % DS_BUFS]);
  add_dq<HD>(dq, q0, c, t, dq_rows, D);
}

"""

# Spans of the reference consumer replaced whole: (from the line starting `start`, up to `end`, new text).
DECOUPLED_SPANS = [
    ("// One query block for one consumer. Accumulator element j of this thread", "template <int HD, bool CAUSAL>\n"
     "__device__ __forceinline__ void consumer_block(", DQ_HELPERS),
    ("  named_barrier_sync(1, 256);  // both consumers' dS^T rows are in `buf`", "  fence_u32(pp);",
     "  __syncwarp();\n  if (lane == 0) mbar_arrive(&dsReady[b]);  // this warp's rows of block it are in\n"
     "  wgmma_wait<0>();  // dV / dK of this block\n"),
    ("\n  // dq element j: query row r + 8", "// HD: 128 (D = 96 or 128) or 64. GQA:", CONSUMER_DQ),
]

DECOUPLED_CONSUMER_EDITS = [
    ("                                               uint64_t* fulldO, uint64_t* empty, float (&dv)[HD / 2],\n"
     "                                               float (&dk)[HD / 2], float* __restrict__ dq_rows, int D, float sl2) {\n"
     "  const int st",
     "                                               uint64_t* fulldO, uint64_t* empty, uint64_t* dsReady,\n"
     "                                               uint64_t* dsFree, float (&dv)[HD / 2], float (&dk)[HD / 2], float sl2) {\n"
     "  constexpr int STAGES = Stages<HD>::N;\n  const int st"),
    ("  uint8_t* buf = sdS + (it & 1) * DS_BYTES;",
     "  const int b = it % DS_BUFS;\n"
     "  if (it >= DS_BUFS) mbar_wait(&dsFree[b], (it / DS_BUFS - 1) & 1);  // block it - 3's dQ products are done\n"
     "  uint8_t* buf = sdS + b * DS_BYTES;"),
]

DECOUPLED = [
    ('// Hopper (sm_90a) attention backward with TMA + wgmma,',
     "// VARIANT decoupled (attention_bwd_variants.py): each consumer computes the dQ of the previous query\n// block, so the two consumers can run up to a block apart; dS^T triple-buffered on mbarriers; a 3-deep ring\n// for the 128-wide kernels; consumer 1 starts once consumer 0's first exponentials are done.\n//\n// Hopper (sm_90a) attention backward with TMA + wgmma,"),
    ('smem = "1024 + 32768 * 2 + 2 * (16384 * 2 + 512) + 16384 * 2 + 256"  # slack, K, V, STAGES x (Q, dO, L2, Dr), 2 x dS, mbarriers',
     'smem = "1024 + 512 * (cdiv(D, 64) * 64) + (2 + cdiv(D, 64) // 2) * (256 * (cdiv(D, 64) * 64) + 512) + 16384 * 3 + 256"  # slack, K, V, STAGES x (Q, dO, L2, Dr), 3 x dS, mbarriers (HD = 64 cdiv(D, 64); STAGES 3 for HD 128)'),
    ('constexpr int STAGES = 2;',
     '// Q / dO ring depth: 3 for the 128-wide kernels, 2 for D = 64; dS^T buffers: 3.\ntemplate <int HD>\nstruct Stages {\n  static constexpr int N = HD == 128 ? 3 : 2;\n};\nconstexpr int DS_BUFS = 3;'),
    ('  uint8_t* sQ = sV + KT;                 // STAGES x QT\n  uint8_t* sdO = sQ + STAGES * QT;       // STAGES x QT\n  uint8_t* sdS = sdO + STAGES * QT;      // 2 x DS_BYTES\n  float* sL2 = reinterpret_cast<float*>(sdS + 2 * DS_BYTES);  // STAGES x 64',
     '  constexpr int STAGES = Stages<HD>::N;\n  uint8_t* sQ = sV + KT;                 // STAGES x QT\n  uint8_t* sdO = sQ + STAGES * QT;       // STAGES x QT\n  uint8_t* sdS = sdO + STAGES * QT;      // DS_BUFS x DS_BYTES\n  float* sL2 = reinterpret_cast<float*>(sdS + DS_BUFS * DS_BYTES);  // STAGES x 64'),
    ('  uint64_t* empty = fulldO + STAGES;\n',
     "  uint64_t* empty = fulldO + STAGES;\n  uint64_t* dsReady = empty + STAGES;    // DS_BUFS: both consumers' dS^T rows of a block are in its buffer\n  uint64_t* dsFree = dsReady + DS_BUFS;  // DS_BUFS: both consumers' dQ products have read the buffer\n  uint64_t* kick = dsFree + DS_BUFS;     // consumer 0's first exponentials are done: consumer 1 may start\n"),
    ('      mbar_init(&empty[i], 8);  // one arrival per consumer warp\n    }',
     '      mbar_init(&empty[i], 8);  // one arrival per consumer warp\n    }\n    for (int i = 0; i < DS_BUFS; ++i) {\n      mbar_init(&dsReady[i], 8);\n      mbar_init(&dsFree[i], 8);\n    }\n    mbar_init(kick, 4);'),
    ('    mbar_wait(fullKV, 0);\n    for (int it = 0; it < n_iter; ++it) {\n      const int st = it % STAGES;\n      const int head = (GQA ? bkv * group : bkv) + it / per_head;\n      const int q0 = (q_first + it % per_head) * BM;\n      consumer_block<HD, CAUSAL>(it, q0, key0, c, t, sK, sV, sQ + st * QT, sdO + st * QT, sL2 + st * BM,\n                                 sDr + st * BM, sdS, fullQ, fulldO, empty, dv, dk,\n                                 dQacc + static_cast<size_t>(head) * S * D, D, sl2);\n    }',
     "    mbar_wait(fullKV, 0);\n    if (c == 1) mbar_wait(kick, 0);  // start half a block behind consumer 0: their phases interleave\n    float* dq_prev = dQacc;\n    int q0_prev = 0;\n    for (int it = 0; it < n_iter; ++it) {\n      const int st = it % STAGES;\n      const int head = (GQA ? bkv * group : bkv) + it / per_head;\n      const int q0 = (q_first + it % per_head) * BM;\n      if (it > 0) consumer_dq<HD>(it - 1, q0_prev, c, t, sK, sdS, dsReady, dsFree, dq_prev, D);\n      consumer_block<HD, CAUSAL>(it, q0, key0, c, t, sK, sV, sQ + st * QT, sdO + st * QT, sL2 + st * BM,\n                                 sDr + st * BM, sdS, fullQ, fulldO, empty, dsReady, dsFree, dv, dk, sl2);\n      if (it == 0 && c == 0 && t % 32 == 0) mbar_arrive(kick);\n      dq_prev = dQacc + static_cast<size_t>(head) * S * D;\n      q0_prev = q0;\n    }\n    consumer_dq<HD>(n_iter - 1, q0_prev, c, t, sK, sdS, dsReady, dsFree, dq_prev, D);  // the last block's"),
]


BULK_DQ_D64 = [
    ('smem = "1024 + 32768 * 2 + 3 * (16384 * 2 + 512) + 16384 * 2 + 32768 + 256"  '
     '# slack, K, V, 3 x (Q, dO, L2, Dr), 2 x dS, dQ, mbarriers',
     'smem = "1024 + 512 * (cdiv(D, 64) * 64) + (1 + cdiv(D, 64)) * (256 * (cdiv(D, 64) * 64) + 512) + 16384 * 2 + '
     '32768 + 256"  # slack, K, V, STAGES x (Q, dO, L2, Dr), 2 x dS, dQ, mbarriers (64 or 128 wide; 2 or 3 stages)'),
    ("  float* sL2 = sdQ + (HD == 128 ? BM * HD : 0);                // Stages<HD>::N x 64",
     "  float* sL2 = sdQ + BM * 128;  // dQ: HD = 128 one [64][D] tile, HD = 64 one [64][64] tile per consumer"),
    ("  if (HD == 128 && issuer) bulk_wait_read();  // the previous block's dQ reduction has read sdQ",
     "  if (t == 0 && (HD == 64 || issuer)) bulk_wait_read();  // this thread's previous dQ reduction has read its tile"),
    ("""#pragma unroll
  for (int j = 0; j < 32; j += 2) {
    const int d = dcol0 + 8 * (j / 4) + col0;
    if (d < D) {
      float* dst = dq_rows + static_cast<size_t>(q0 + r + 8 * ((j / 2) % 2)) * D + d;
      atomicAdd(reinterpret_cast<float2*>(dst), make_float2(dq[j], dq[j + 1]));
    }
  }
}""",
     """  // HD = 64: this consumer's partial (its own keys, every column) into its own tile, reduced by its thread 0
  float* tile = sdQ + c * BM * 64;
#pragma unroll
  for (int j = 0; j < 32; j += 2) sts64(tile + (r + 8 * ((j / 2) % 2)) * 64 + 8 * (j / 4) + col0, dq[j], dq[j + 1]);
  fence_proxy_async();
  named_barrier_sync(3 + c, 128);  // this consumer's rows are in its tile
  if (t == 0) bulk_reduce_add(dq_rows + static_cast<size_t>(q0) * D, tile, BM * 64 * 4);
}"""),
    ("    if (HD == 128 && threadIdx.x == 128) bulk_wait_all();  // the last reductions are done before the CTA exits",
     "    if (threadIdx.x == 128 || (HD == 64 && threadIdx.x == 256)) bulk_wait_all();  // the last reductions are done"),
]


HEAD_MAJOR = [
    ('grid = ["B * H", "cdiv(S, 128)"]',
     'grid = ["cdiv(S, 128)", "B * H"]  # the key blocks of one head side by side: they share its Q, dO, dQ in L2'),
    ("  const int bkv = blockIdx.x;             // batch * KV head\n"
     "  const int kb = blockIdx.y;              // key block: causal blocks with the most query rows come first",
     "  // The key blocks of a head run side by side (blockIdx.x), so its Q / dO rows are read from DRAM about once and\n"
     "  // its fp32 dQ rows take every block's reduce-add in L2; causal: each head's longest key blocks first.\n"
     "  const int kb = blockIdx.x;              // key block\n"
     "  const int bkv = blockIdx.y;             // batch * KV head"),
]


HEAD_GROUPS = [
    ("  // The key blocks of a head run side by side (blockIdx.x), so its Q / dO rows are read from DRAM about once and\n"
     "  // its fp32 dQ rows take every block's reduce-add in L2; causal: each head's longest key blocks first.\n"
     "  const int kb = blockIdx.x;              // key block\n"
     "  const int bkv = blockIdx.y;             // batch * KV head",
     "  // Groups of HEAD_GROUP heads side by side, their key blocks longest-first across the group (blocks are handed\n"
     "  // out in linear order): about one group is in flight, sharing its heads' Q / dO / dQ rows in L2, and causal\n"
     "  // hands out every group's longest key blocks before its shorter ones.\n"
     "  const int n_kb = gridDim.x, lin = blockIdx.x + n_kb * blockIdx.y;\n"
     "  const int grp = lin / (HEAD_GROUP * n_kb), in_grp = lin % (HEAD_GROUP * n_kb);\n"
     "  const int g_heads = min(HEAD_GROUP, static_cast<int>(gridDim.y) - grp * HEAD_GROUP);\n"
     "  const int kb = in_grp / g_heads;        // key block\n"
     "  const int bkv = grp * HEAD_GROUP + in_grp % g_heads;  // batch * KV head"),
    ("template <int HD, bool CAUSAL, bool GQA",  # the main kernel's template (a variant may add parameters)
     "constexpr int HEAD_GROUP = 4;  // heads whose key blocks are in flight together (4 x 32 blocks ~ one wave)\n\n"
     "template <int HD, bool CAUSAL, bool GQA"),
]


# dq_tiles: each consumer reduces its own dQ tile, whatever D, and dQacc takes the tiles' layout (the postprocess
# reads it back), so no consumer waits on the other for dQ and the tile stores hit no bank twice.
DQ_TILES = [
    ('args = ["scratch:dQacc", "dQ", "i32:B * H * S * D", "f32:scale"]',
     'args = ["scratch:dQacc", "dQ", "i32:B * H * S * D", "f32:scale", "i32:D"]'),
    ("""// attn_bwd_post: dQ = bf16(scale * acc), four elements per thread.
extern "C" __global__ void __launch_bounds__(256) attn_bwd_post(const float* __restrict__ dQacc,
                                                                 __nv_bfloat16* __restrict__ dQ, int n, float scale) {
  const int i = 4 * (blockIdx.x * 256 + threadIdx.x);
  if (i >= n) return;
  const float4 v = *reinterpret_cast<const float4*>(dQacc + i);""",
     """// attn_bwd_post: dQ = bf16(scale * acc), four elements per thread. acc is in the main kernel's tile layout: per
// 64-row block, the columns in halves of 64 (the second W = D - 64 wide at D = 96), one after the other, each half's
// rows W floats long with their 32-byte groups swizzled by the row (group g of row rr at g ^ (rr % (W / 8))).
extern "C" __global__ void __launch_bounds__(256) attn_bwd_post(const float* __restrict__ dQacc,
                                                                 __nv_bfloat16* __restrict__ dQ, int n, float scale,
                                                                 int D) {
  const int i = 4 * (blockIdx.x * 256 + threadIdx.x);
  if (i >= n) return;
  const int row = i / D, d = i % D, rr = row % 64, c = d / 64, dd = d % 64, W = min(64, D - 64 * c);
  const size_t src = static_cast<size_t>(row - rr) * D + 64 * 64 * c + rr * W + 8 * ((dd / 8) ^ (rr & (W / 8 - 1))) +
                     dd % 8;
  const float4 v = *reinterpret_cast<const float4*>(dQacc + src);"""),
    ("  if (t == 0 && (HD == 64 || issuer)) bulk_wait_read();  // this thread's previous dQ reduction has read its tile",
     "  if (t == 0) bulk_wait_read();  // this consumer's previous dQ reduction has read its tile"),
    ("""  const int dcol0 = HD == 128 ? 64 * c : 0;
  if constexpr (HD == 128) {  // both consumers' column halves into sdQ ([64][D] fp32), then one bulk reduction
#pragma unroll
    for (int j = 0; j < 32; j += 2) {
      const int d = dcol0 + 8 * (j / 4) + col0;
      if (d < D) sts64(sdQ + (r + 8 * ((j / 2) % 2)) * D + d, dq[j], dq[j + 1]);
    }
    fence_proxy_async();
    named_barrier_sync(2, 256);
    if (issuer) bulk_reduce_add(dq_rows + static_cast<size_t>(q0) * D, sdQ, BM * D * 4);
    return;
  }
  // HD = 64: this consumer's partial (its own keys, every column) into its own tile, reduced by its thread 0
  float* tile = sdQ + c * BM * 64;
#pragma unroll
  for (int j = 0; j < 32; j += 2) sts64(tile + (r + 8 * ((j / 2) % 2)) * 64 + 8 * (j / 4) + col0, dq[j], dq[j + 1]);
  fence_proxy_async();
  named_barrier_sync(3 + c, 128);  // this consumer's rows are in its tile
  if (t == 0) bulk_reduce_add(dq_rows + static_cast<size_t>(q0) * D, tile, BM * 64 * 4);""",
     """  // This consumer's partial into its own tile, reduced by its thread 0 without waiting for the other consumer.
  // The tile has dQacc's layout (attn_bwd_post reads it back): HD = 128: consumer c's columns 64c.. (W = min(64,
  // D - 64c) wide), 64 x 64c floats into the block's rows; HD = 64: all 64 columns over its own keys (both
  // consumers add into the block's one tile). Rows W floats long, 32-byte group g of row `row` at g ^ (row % (W / 8)):
  // a warp's 8 rows of one group land on 8 different groups of banks.
  const int W = HD == 128 ? min(64, D - 64 * c) : 64, sw = W / 8 - 1;
  float* tile = sdQ + c * BM * 64;
#pragma unroll
  for (int j = 0; j < 32; j += 2) {
    const int g = j / 4, row = r + 8 * ((j / 2) % 2);
    if (8 * g < W) sts64(tile + row * W + 8 * (g ^ (row & sw)) + col0, dq[j], dq[j + 1]);
  }
  fence_proxy_async();
  named_barrier_sync(3 + c, 128);  // this consumer's rows are in its tile
  if (t == 0) bulk_reduce_add(dq_rows + static_cast<size_t>(q0) * D + (HD == 128 ? 64 * 64 * c : 0), tile, BM * W * 4);"""),
    ("    if (threadIdx.x == 128 || (HD == 64 && threadIdx.x == 256)) bulk_wait_all();  // the last reductions are done",
     "    if (threadIdx.x == 128 || threadIdx.x == 256) bulk_wait_all();  // each consumer's last reductions are done"),
]


# The dQ product of own_keys at D = 96 / 128: m64n128k16, both operands MN-major (64 accumulator registers).
WGMMA_SS_TT128 = (
    "// D[64 x 128] (+)= A B, both operands MN-major in shared memory (dS^T rows; K rows, two 64-column slabs).\n"
    "__device__ __forceinline__ void wgmma_ss_tt128(float (&d)[64], uint64_t da, uint64_t db, int scale_d) {\n"
    "  asm volatile(\n"
    '      "{\\n\\t.reg .pred p;\\n\\tsetp.ne.b32 p, %66, 0;\\n\\t"\n'
    '      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {' + ", ".join(f"%{i}" for i in range(64))
    + '}, %64, %65, p, 1, 1, 1, 1;\\n\\t}"\n'
    "      : " + ", ".join(f'"+f"(d[{i}])' for i in range(64)) + "\n"
    '      : "l"(da), "l"(db), "r"(scale_d));\n'
    "}\n\n")

# dq_tiles' dQ product, which own_keys and q128_d64 each rewrite.
DQ_PRODUCT = """  // dQ_partial = dS K: HD = 128: columns 64c.. over all 128 keys; HD = 64: all columns over own keys.
  float dq[32];
  constexpr int KSTEPS = HD == 128 ? 8 : 4;
  const int key_row0 = HD == 128 ? 0 : 64 * c;
  const uint8_t* kbase = sK + (HD == 128 ? c * KSLAB : 0) + key_row0 * 128;
  const uint64_t da = desc_mn(buf + key_row0 * 128, 0), dbk = desc_mn(kbase, 0);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < KSTEPS; ++kk)"""

# own_keys: dq_tiles with every consumer's dQ over its own 64 keys and all D columns (as D = 64 always did), so at
# D = 96 / 128 too a consumer reads only its own rows of dS^T and the two consumers never meet: the dS^T barrier
# becomes the consumer's own; a 2-deep ring pays for the two 64 x D tiles (the 3-deep one measured within the spread).
OWN_KEYS = [
    ('smem = "1024 + 512 * (cdiv(D, 64) * 64) + (1 + cdiv(D, 64)) * (256 * (cdiv(D, 64) * 64) + 512) + 16384 * 2 + '
     '32768 + 256"  # slack, K, V, STAGES x (Q, dO, L2, Dr), 2 x dS, dQ, mbarriers (64 or 128 wide; 2 or 3 stages)',
     'smem = "1024 + 512 * (cdiv(D, 64) * 64) + 2 * (256 * (cdiv(D, 64) * 64) + 512) + 16384 * 2 + 32768 * cdiv(D, 64) '
     '+ 256"  # slack, K, V, 2 x (Q, dO, L2, Dr), 2 x dS, 2 dQ tiles of 64 x (64 or 128) fp32, mbarriers'),
    ("""// Q / dO ring depth: 3 for the 128-wide kernels (the shared memory allows it with the dQ buffer), 2 for D = 64.
template <int HD>
struct Stages {
  static constexpr int N = HD == 128 ? 3 : 2;
};""", """// Q / dO ring depth: 2 (the two consumers' 64 x HD fp32 dQ tiles take the third stage's shared memory).
template <int HD>
struct Stages {
  static constexpr int N = 2;
};"""),
    ("// X^T = A_c B^T for this consumer's 64 keys", WGMMA_SS_TT128 + "// X^T = A_c B^T for this consumer's 64 keys"),
    ("  named_barrier_sync(1, 256);  // both consumers' dS^T rows are in `buf` (and sdQ is free again)",
     "  named_barrier_sync(3 + c, 128);  // this consumer's dS^T rows are in `buf` (and its tile is free again)"),
    ("""//       dQ_partial = dS K      SS, dS MN-major (imm-trans-a), K N-major   m64n64k16
//     HD = 128: both consumers meet on a named barrier and consumer c computes d columns 64c..64c+63
//     over all 128 keys; HD = 64: each consumer computes all 64 columns over its own 64 keys.
//     The dS buffer is double-buffered: a consumer rewrites buffer b only after the barrier of the next
//     iteration, which the other consumer reaches only once its dQ product of buffer b has completed.""",
     """//       dQ_partial = dS K      SS, dS MN-major (imm-trans-a), K N-major   m64nHDk16 x 4
//     (own_keys) each consumer computes all HD columns over its own 64 keys, reading only its own rows of
//     dS^T, and reduces its 64 x D tile into dQacc itself: the consumers never meet. The dS buffer is
//     double-buffered; a consumer rewrites its rows of buffer b two blocks later, after its own dQ product."""),
    (DQ_PRODUCT + " wgmma_ss_tt(dq, da + kk * (2048 >> 4), dbk + kk * (2048 >> 4), kk != 0);",
     """  // dQ_partial = dS K over this consumer's own 64 keys, all HD columns (K's two 64-column slabs one LBO apart).
  if constexpr (HD == 128) {  // dV / dK first: their 128 accumulators, P^T / dS^T and 64 for dQ at once would not fit
    wgmma_wait<0>();          // beside the wgmma pipeline (ptxas would serialise every wgmma of the kernel: C7512)
    fence_u32(pp);
    fence_u32(ds);
  }
  float dq[HD / 2];
  const uint64_t da = desc_mn(buf + 64 * c * 128, 0), dbk = desc_mn(sK + 64 * c * 128, HD == 128 ? KSLAB : 0);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    if constexpr (HD == 128) {
      wgmma_ss_tt128(dq, da + kk * (2048 >> 4), dbk + kk * (2048 >> 4), kk != 0);
    } else {
      wgmma_ss_tt(dq, da + kk * (2048 >> 4), dbk + kk * (2048 >> 4), kk != 0);
    }
  }"""),
    ("""  // dq element j: query row r + 8 ((j / 2) % 2), column 8 (j / 4) + col0 + j % 2 (+ 64c for HD = 128)
  // This consumer's partial into its own tile, reduced by its thread 0 without waiting for the other consumer.
  // The tile has dQacc's layout (attn_bwd_post reads it back): HD = 128: consumer c's columns 64c.. (W = min(64,
  // D - 64c) wide), 64 x 64c floats into the block's rows; HD = 64: all 64 columns over its own keys (both
  // consumers add into the block's one tile). Rows W floats long, 32-byte group g of row `row` at g ^ (row % (W / 8)):
  // a warp's 8 rows of one group land on 8 different groups of banks.
  const int W = HD == 128 ? min(64, D - 64 * c) : 64, sw = W / 8 - 1;
  float* tile = sdQ + c * BM * 64;
#pragma unroll
  for (int j = 0; j < 32; j += 2) {
    const int g = j / 4, row = r + 8 * ((j / 2) % 2);
    if (8 * g < W) sts64(tile + row * W + 8 * (g ^ (row & sw)) + col0, dq[j], dq[j + 1]);
  }
  fence_proxy_async();
  named_barrier_sync(3 + c, 128);  // this consumer's rows are in its tile
  if (t == 0) bulk_reduce_add(dq_rows + static_cast<size_t>(q0) * D + (HD == 128 ? 64 * 64 * c : 0), tile, BM * W * 4);""",
     """  // dq element j: query row r + 8 ((j / 2) % 2), column 8 (j / 4) + col0 + j % 2: 32-byte group j / 4 of the row.
  // This consumer's partial (its own keys, every column) into its own tile in dQacc's layout (attn_bwd_post reads
  // it back): the block's columns in halves of 64 (the second W = D - 64 wide at D = 96), one after the other,
  // rows W floats long, 32-byte group g of row `row` at g ^ (row % (W / 8)); both consumers reduce into the
  // block's same 64 x D floats.
  float* tile = sdQ + c * BM * HD;
#pragma unroll
  for (int j = 0; j < HD / 2; j += 2) {
    const int h = j / 32, g = (j / 4) % 8, row = r + 8 * ((j / 2) % 2);
    const int W = min(64, D - 64 * h), sw = W / 8 - 1;
    if (8 * g < W) sts64(tile + 64 * 64 * h + row * W + 8 * (g ^ (row & sw)) + col0, dq[j], dq[j + 1]);
  }
  fence_proxy_async();
  named_barrier_sync(3 + c, 128);  // this consumer's rows are in its tile
  if (t == 0) bulk_reduce_add(dq_rows + static_cast<size_t>(q0) * D, tile, BM * D * 4);"""),
    ("  float* sdQ = reinterpret_cast<float*>(sdS + 2 * DS_BYTES);  // HD = 128: 64 x D fp32\n"
     "  float* sL2 = sdQ + BM * 128;  // dQ: HD = 128 one [64][D] tile, HD = 64 one [64][64] tile per consumer",
     "  float* sdQ = reinterpret_cast<float*>(sdS + 2 * DS_BYTES);  // one 64 x HD fp32 dQ tile per consumer\n"
     "  float* sL2 = sdQ + 2 * BM * HD;"),
]


# own_keys_s3: own_keys with the 3-deep ring back for the 128-wide kernels: each consumer's dQ goes out through one
# 16 KB tile in column halves (write a half, reduce it, wait for that reduction's reads, write the next).
OWN_KEYS_S3 = [
    ('smem = "1024 + 512 * (cdiv(D, 64) * 64) + 2 * (256 * (cdiv(D, 64) * 64) + 512) + 16384 * 2 + 32768 * cdiv(D, 64) '
     '+ 256"  # slack, K, V, 2 x (Q, dO, L2, Dr), 2 x dS, 2 dQ tiles of 64 x (64 or 128) fp32, mbarriers',
     'smem = "1024 + 512 * (cdiv(D, 64) * 64) + (1 + cdiv(D, 64)) * (256 * (cdiv(D, 64) * 64) + 512) + 16384 * 2 + '
     '32768 + 256"  # slack, K, V, STAGES x (Q, dO, L2, Dr), 2 x dS, 2 dQ tiles of 64 x 64 fp32, mbarriers'),
    ("""// Q / dO ring depth: 2 (the two consumers' 64 x HD fp32 dQ tiles take the third stage's shared memory).
template <int HD>
struct Stages {
  static constexpr int N = 2;
};""", """// Q / dO ring depth: 3 for the 128-wide kernels (each consumer's dQ leaves through one 64 x 64 tile, a column
// half at a time), 2 for D = 64.
template <int HD>
struct Stages {
  static constexpr int N = HD == 128 ? 3 : 2;
};"""),
    ("""  float* tile = sdQ + c * BM * HD;
#pragma unroll
  for (int j = 0; j < HD / 2; j += 2) {
    const int h = j / 32, g = (j / 4) % 8, row = r + 8 * ((j / 2) % 2);
    const int W = min(64, D - 64 * h), sw = W / 8 - 1;
    if (8 * g < W) sts64(tile + 64 * 64 * h + row * W + 8 * (g ^ (row & sw)) + col0, dq[j], dq[j + 1]);
  }
  fence_proxy_async();
  named_barrier_sync(3 + c, 128);  // this consumer's rows are in its tile
  if (t == 0) bulk_reduce_add(dq_rows + static_cast<size_t>(q0) * D, tile, BM * D * 4);""",
     """  // One 64 x 64 tile per consumer: the column halves go out one after the other.
  float* tile = sdQ + c * BM * 64;
#pragma unroll
  for (int h = 0; h < HD / 64; ++h) {
    const int W = min(64, D - 64 * h), sw = W / 8 - 1;
    if (h > 0) {  // the tile again: the first half's reduction must have read it
      if (t == 0) bulk_wait_read();
      named_barrier_sync(3 + c, 128);
    }
#pragma unroll
    for (int j = 32 * h; j < 32 * h + 32; j += 2) {
      const int g = (j / 4) % 8, row = r + 8 * ((j / 2) % 2);
      if (8 * g < W) sts64(tile + row * W + 8 * (g ^ (row & sw)) + col0, dq[j], dq[j + 1]);
    }
    fence_proxy_async();
    named_barrier_sync(3 + c, 128);  // this consumer's rows of the half are in its tile
    if (t == 0) bulk_reduce_add(dq_rows + static_cast<size_t>(q0) * D + 64 * 64 * h, tile, BM * W * 4);
  }"""),
    ("  float* sdQ = reinterpret_cast<float*>(sdS + 2 * DS_BYTES);  // one 64 x HD fp32 dQ tile per consumer\n"
     "  float* sL2 = sdQ + 2 * BM * HD;",
     "  float* sdQ = reinterpret_cast<float*>(sdS + 2 * DS_BYTES);  // one 64 x 64 fp32 dQ tile per consumer\n"
     "  float* sL2 = sdQ + 2 * BM * 64;"),
]


# own_keys_wide, dq_tiles_wide: the dK / dV epilogue in 16-byte stores. A thread holds, for each of its two rows, 4 bytes (two bf16)
# of every 8-column group; the quad's four lanes together hold the group's 16 bytes. Four shuffle rounds transpose
# four groups among the quad, so lane q stores group g0 + q whole.
STORE_ROWS16 = r"""// The dK / dV epilogue in 16-byte stores (own_keys_wide, dq_tiles_wide). acc element j: row r + 8 ((j / 2) % 2), column
// 8 (j / 4) + 2 (lane % 4) + j % 2. For four 8-column groups at a time, the four lanes of a quad swap their bf16
// pairs (round i = 1..3: a lane sends its pair of group g0 + (q - i) % 4 and takes lane q + i's pair of group g0 + q), then
// each lane holds one group's eight columns and stores them as one 16-byte vector: a warp fills whole sectors.
__device__ __forceinline__ uint32_t pick4(uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, int k) {
  return k == 0 ? a0 : k == 1 ? a1 : k == 2 ? a2 : a3;
}

template <int N>
__device__ __forceinline__ void store_rows16(__nv_bfloat16* __restrict__ out, const float (&acc)[N], float mul,
                                             size_t row0, int D, int lane) {
  const int q = lane % 4;
#pragma unroll
  for (int h = 0; h < 2; ++h) {  // rows row0 and row0 + 8
#pragma unroll
    for (int g0 = 0; g0 < N / 4; g0 += 4) {
      uint32_t mine[4], got[4];
#pragma unroll
      for (int k = 0; k < 4; ++k)
        mine[k] = pack_bf16(acc[4 * (g0 + k) + 2 * h] * mul, acc[4 * (g0 + k) + 2 * h + 1] * mul);
      got[0] = pick4(mine[0], mine[1], mine[2], mine[3], q);  // got[i]: lane (q + i) % 4's pair of group g0 + q
#pragma unroll
      for (int i = 1; i < 4; ++i)
        got[i] = __shfl_sync(0xffffffffu, pick4(mine[0], mine[1], mine[2], mine[3], (q - i) & 3),
                             (lane & ~3) | ((q + i) & 3));
      // lane s's pair (columns 2s, 2s + 1 of the group) came in round (s - q) % 4
      const uint4 v = make_uint4(pick4(got[0], got[1], got[2], got[3], (0 - q) & 3),
                                 pick4(got[0], got[1], got[2], got[3], (1 - q) & 3),
                                 pick4(got[0], got[1], got[2], got[3], (2 - q) & 3),
                                 pick4(got[0], got[1], got[2], got[3], (3 - q) & 3));
      const int d = 8 * (g0 + q);
      if (d < D) *reinterpret_cast<uint4*>(out + (row0 + 8 * h) * D + d) = v;
    }
  }
}

"""

WIDE_EPILOGUE = [
    ("// HD: 128 (D = 96 or 128) or 64. GQA: K, V, dK, dV have B * HKV heads;",
     STORE_ROWS16 + "// HD: 128 (D = 96 or 128) or 64. GQA: K, V, dK, dV have B * HKV heads;"),
    ("""#pragma unroll
    for (int j = 0; j < HD / 2; j += 2) {
      const int d = 8 * (j / 4) + 2 * (lane % 4);
      if (d < D) {
        const size_t off = (row0 + 8 * ((j / 2) % 2)) * D + d;
        *reinterpret_cast<__nv_bfloat162*>(dV + off) = __floats2bfloat162_rn(dv[j], dv[j + 1]);
        *reinterpret_cast<__nv_bfloat162*>(dK + off) = __floats2bfloat162_rn(dk[j] * scale, dk[j + 1] * scale);
      }
    }""",
     """    store_rows16(dV, dv, 1.f, row0, D, lane);  // 16-byte stores: whole sectors (the wide epilogue)
    store_rows16(dK, dk, scale, row0, D, lane);"""),
]


# q128_d64: dq_tiles with 128 query rows per iteration at D = 64 (FlashAttention-3's 128 x 128 tile there): S^T and
# dP^T at N = 128, half the blocks (and their barriers, waits and stage hand-offs), and each consumer's dQ over all
# 128 keys for its own 64 query rows, so one 16 KB reduce-add per 64 query rows instead of two (6.4 GB at D = 64
# instead of 12.9). The 128-wide kernels keep 64 rows; the same text serves both through QRows<HD>.
Q128_D64 = [
    ("""// Causal (top-left: key j <= query i): the CTA of key block kb starts at query block 2 kb and masks the
// two query blocks that cross the diagonal; key blocks are numbered in launch order, so the longest go first.""",
     """// Causal (top-left: key j <= query i): the CTA of key block kb starts at query block 2 kb and masks the
// two query blocks that cross the diagonal; key blocks are numbered in launch order, so the longest go first.
// (q128_d64) At D = 64 a query block is 128 rows: S^T and dP^T are m64n128 products, P^T dO and dS^T Q take 8 k16
// steps, dS^T is two 64-query slabs, consumer c computes the dQ of query rows 64c.. over all 128 keys, and causal
// starts at query block kb and masks that one block."""),
    ("""// X^T = A_c B^T for this consumer's 64 keys (A = K or V rows, 128-row slabs) against the 64 query rows of
// B (Q or dO, 64-row slabs)""",
     """// X^T = A_c B^T for this consumer's 64 keys (A = K or V rows, 128-row slabs) against the N (64, or 128 at D = 64)
// query rows of B (Q or dO)"""),
    ("""// acc += X^T B: X^T (64 keys x 64 queries) from registers, B = the 64 x HD Q or dO tile, N-major: 4 k16
// steps over the queries""",
     """// acc += X^T B: X^T (64 keys x N queries) from registers, B = the N x HD Q or dO tile, N-major: N / 16 k16
// steps over the queries"""),
    ("""smem = "1024 + 512 * (cdiv(D, 64) * 64) + (1 + cdiv(D, 64)) * (256 * (cdiv(D, 64) * 64) + 512) + 16384 * 2 + 32768 + 256"  # slack, K, V, STAGES x (Q, dO, L2, Dr), 2 x dS, dQ, mbarriers (64 or 128 wide; 2 or 3 stages)""",
     """smem = "1024 + 32768 * cdiv(D, 64) + (1 + cdiv(D, 64)) * (32768 + 512 * (3 - cdiv(D, 64))) + 32768 * (3 - cdiv(D, 64)) + 32768 + 256"  # slack, K, V, STAGES x (Q, dO, L2, Dr), 2 x dS^T, dQ, mbarriers (D = 64: 128 query rows)"""),
    ("""constexpr int DS_BYTES = 128 * 128; // dS^T of the block: 128 keys x 64 queries bf16
""",
     """// Query rows per iteration: 64 for the 128-wide kernels, 128 at D = 64 (q128_d64: half the blocks, each consumer's
// dQ over all 128 keys for its own 64 query rows, so one reduce-add per 64 query rows instead of two), and the
// bytes of one dS^T buffer (128 keys x QR queries bf16, in 64-query slabs of 128 x 128 bytes).
template <int HD>
struct QRows {
  static constexpr int N = HD == 64 ? 128 : 64;
  static constexpr int DS = 128 * 2 * N;
};
"""),
    ("""template <int HD>
__device__ __forceinline__ void issue_nt(float (&x)[32], const uint8_t* a, const uint8_t* b) {""",
     """template <int HD, int N = 64>
__device__ __forceinline__ void issue_nt(float (&x)[N / 2], const uint8_t* a, const uint8_t* b) {"""),
    ("""    wgmma_m64k16_bf16<64>(x, da + (kk / 4) * (KSLAB >> 4) + 2 * (kk % 4), db + (kk / 4) * (QSLAB >> 4) + 2 * (kk % 4),""",
     """    wgmma_m64k16_bf16<N>(x, da + (kk / 4) * (KSLAB >> 4) + 2 * (kk % 4), db + (kk / 4) * (QSLAB >> 4) + 2 * (kk % 4),"""),
    ("""template <int HD>
__device__ __forceinline__ void issue_tn(float (&acc)[HD / 2], const uint32_t (&x)[16], const uint8_t* b) {
  const uint64_t db = desc_mn(b, QSLAB);
#pragma unroll
  for (int kk = 0; kk < 4; ++kk)""",
     """template <int HD, int N = 64>
__device__ __forceinline__ void issue_tn(float (&acc)[HD / 2], const uint32_t (&x)[N / 4], const uint8_t* b) {
  const uint64_t db = desc_mn(b, QSLAB);
#pragma unroll
  for (int kk = 0; kk < N / 16; ++kk)"""),
    ("""  float s[32], p[32];
  uint32_t pp[16], ds[16];
""",
     """  constexpr int QR = QRows<HD>::N;  // query rows of the block
  float s[QR / 2], p[QR / 2];
  uint32_t pp[QR / 4], ds[QR / 4];
"""),
    ("""  issue_nt<HD>(s, sK + c * 64 * 128, sQ);     // S^T = K_c Q^T""",
     """  issue_nt<HD, QR>(s, sK + c * 64 * 128, sQ);     // S^T = K_c Q^T"""),
    ("""  issue_nt<HD>(p, sV + c * 64 * 128, sdO);    // dP^T = V_c dO^T""",
     """  issue_nt<HD, QR>(p, sV + c * 64 * 128, sdO);    // dP^T = V_c dO^T"""),
    ("""  const bool mask = CAUSAL && q0 < key0 + BN;  // the two query blocks that cross the diagonal
  // the 16 query columns of this thread: pairs (8a + col0, + 1), a = 0..7, for L2 and Dr
  float2 l2[8], dr[8];
#pragma unroll
  for (int a = 0; a < 8; ++a) l2[a] = lds64(sL2 + 8 * a + col0);
#pragma unroll
  for (int j = 0; j < 32; ++j) {""",
     """  const bool mask = CAUSAL && q0 < key0 + BN;  // the query blocks that cross the diagonal (D = 64: the one)
  // the QR / 4 query columns of this thread: pairs (8a + col0, + 1), a = 0..QR / 8 - 1, for L2 and Dr
  float2 l2[QR / 8], dr[QR / 8];
#pragma unroll
  for (int a = 0; a < QR / 8; ++a) l2[a] = lds64(sL2 + 8 * a + col0);
#pragma unroll
  for (int j = 0; j < QR / 2; ++j) {"""),
    ("""#pragma unroll
  for (int a = 0; a < 8; ++a) dr[a] = lds64(sDr + 8 * a + col0);
#pragma unroll
  for (int j = 0; j < 32; ++j) p[j] = s[j] * (p[j] - (j % 2 ? dr[j / 4].y : dr[j / 4].x));
#pragma unroll
  for (int i = 0; i < 16; ++i) {""",
     """#pragma unroll
  for (int a = 0; a < QR / 8; ++a) dr[a] = lds64(sDr + 8 * a + col0);
#pragma unroll
  for (int j = 0; j < QR / 2; ++j) p[j] = s[j] * (p[j] - (j % 2 ? dr[j / 4].y : dr[j / 4].x));
#pragma unroll
  for (int i = 0; i < QR / 4; ++i) {"""),
    ("""  issue_tn<HD>(dv, pp, sdO);  // dV += P^T dO
  issue_tn<HD>(dk, ds, sQ);   // dK += dS^T Q""",
     """  issue_tn<HD, QR>(dv, pp, sdO);  // dV += P^T dO
  issue_tn<HD, QR>(dk, ds, sQ);   // dK += dS^T Q"""),
    ("""  // dS^T to shared memory: row = key (64c + r [+ 8]), 64 queries per 128-byte row, 16-byte chunks swizzled
  // by the row's position in its 8-row atom (what TMA writes for a 128B-swizzled box).
  uint8_t* buf = sdS + (it & 1) * DS_BYTES;
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    const int row = 64 * c + r + 8 * (i % 2), q = 8 * (i / 2) + col0;
    sts32(buf + row * 128 + (((q / 8) ^ (row % 8)) * 16) + (q % 8) * 2, ds[i]);
  }""",
     """  // dS^T to shared memory: row = key (64c + r [+ 8]), 64 queries per 128-byte row (D = 64: two such slabs of
  // 128 rows, queries 0..63 and 64..127), 16-byte chunks swizzled by the row's position in its 8-row atom (what
  // TMA writes for a 128B-swizzled box).
  uint8_t* buf = sdS + (it & 1) * QRows<HD>::DS;
#pragma unroll
  for (int i = 0; i < QR / 4; ++i) {
    const int row = 64 * c + r + 8 * (i % 2), q = 8 * (i / 2) + col0;
    sts32(buf + (q / 64) * (128 * 128) + row * 128 + ((((q % 64) / 8) ^ (row % 8)) * 16) + (q % 8) * 2, ds[i]);
  }"""),
    (DQ_PRODUCT,
     """  // dQ_partial = dS K over all 128 keys: HD = 128: the block's 64 query rows, columns 64c..; HD = 64: query rows
  // 64c.. of the 128 (dS^T slab c), all 64 columns.
  float dq[32];
  const uint8_t* kbase = sK + (HD == 128 ? c * KSLAB : 0);
  const uint64_t da = desc_mn(buf + (HD == 128 ? 0 : c * 128 * 128), 0), dbk = desc_mn(kbase, 0);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 8; ++kk)"""),
    ("""  // dq element j: query row r + 8 ((j / 2) % 2), column 8 (j / 4) + col0 + j % 2 (+ 64c for HD = 128)
  // This consumer's partial into its own tile, reduced by its thread 0 without waiting for the other consumer.
  // The tile has dQacc's layout (attn_bwd_post reads it back): HD = 128: consumer c's columns 64c.. (W = min(64,
  // D - 64c) wide), 64 x 64c floats into the block's rows; HD = 64: all 64 columns over its own keys (both
  // consumers add into the block's one tile).""",
     """  // dq element j: query row r + 8 ((j / 2) % 2) (+ 64c for HD = 64), column 8 (j / 4) + col0 + j % 2 (+ 64c for
  // HD = 128). This consumer's partial into its own tile, reduced by its thread 0 without waiting for the other
  // consumer. The tile has dQacc's layout (attn_bwd_post reads it back): HD = 128: consumer c's columns 64c.. (W =
  // min(64, D - 64c) wide), 64 x 64c floats into the block's rows; HD = 64: all 64 columns of query rows 64c..
  //"""),
    ("""  if (t == 0) bulk_reduce_add(dq_rows + static_cast<size_t>(q0) * D + (HD == 128 ? 64 * 64 * c : 0), tile, BM * W * 4);""",
     """  if (t == 0)
    bulk_reduce_add(dq_rows + static_cast<size_t>(q0 + (HD == 128 ? 0 : 64 * c)) * D + (HD == 128 ? 64 * 64 * c : 0), tile,
                    BM * W * 4);"""),
    ("""  constexpr int KT = HD / 64 * KSLAB, QT = HD / 64 * QSLAB;""",
     """  constexpr int QR = QRows<HD>::N;  // query rows per iteration
  constexpr int KT = HD / 64 * KSLAB, QT = 2 * QSLAB;  // a Q / dO tile: HD = 128 two d slabs, HD = 64 two row halves"""),
    ("""  uint8_t* sdS = sdO + Stages<HD>::N * QT;      // 2 x DS_BYTES
  float* sdQ = reinterpret_cast<float*>(sdS + 2 * DS_BYTES);""",
     """  uint8_t* sdS = sdO + Stages<HD>::N * QT;      // 2 x QRows<HD>::DS
  float* sdQ = reinterpret_cast<float*>(sdS + 2 * QRows<HD>::DS);"""),
    ("""  float* sDr = sL2 + Stages<HD>::N * BM;                              // Stages<HD>::N x 64
  uint64_t* fullKV = reinterpret_cast<uint64_t*>(sDr + Stages<HD>::N * BM);""",
     """  float* sDr = sL2 + Stages<HD>::N * QR;                              // Stages<HD>::N x QR
  uint64_t* fullKV = reinterpret_cast<uint64_t*>(sDr + Stages<HD>::N * QR);"""),
    ("""  const int q_first = CAUSAL ? key0 / BM : 0;
  const int per_head = S / BM - q_first;  // query blocks per query head""",
     """  const int q_first = CAUSAL ? key0 / QR : 0;
  const int per_head = S / QR - q_first;  // query blocks per query head"""),
    ("""        const int q_row = head * S + (q_first + it % per_head) * BM;  // first row in the [B*H*S, D] view
        mbar_wait(&empty[st], ph ^ 1);  // a fresh barrier passes parity 1 at once
        mbar_arrive_expect_tx(&fullQ[st], QT + BM * 4);
#pragma unroll
        for (int s = 0; s < HD / 64; ++s) tma_load_2d(sQ + st * QT + s * QSLAB, tmQ, &fullQ[st], 64 * s, q_row);
        bulk_load(sL2 + st * BM, L2 + q_row, BM * 4, &fullQ[st]);
        mbar_arrive_expect_tx(&fulldO[st], QT + BM * 4);
#pragma unroll
        for (int s = 0; s < HD / 64; ++s) tma_load_2d(sdO + st * QT + s * QSLAB, tmdO, &fulldO[st], 64 * s, q_row);
        bulk_load(sDr + st * BM, Dr + q_row, BM * 4, &fulldO[st]);""",
     """        const int q_row = head * S + (q_first + it % per_head) * QR;  // first row in the [B*H*S, D] view
        mbar_wait(&empty[st], ph ^ 1);  // a fresh barrier passes parity 1 at once
        mbar_arrive_expect_tx(&fullQ[st], QT + QR * 4);
        // two 64 x 64 boxes: HD = 128 the two d slabs of 64 rows, HD = 64 rows q_row.. and q_row + 64.. (one slab)
#pragma unroll
        for (int s = 0; s < 2; ++s)
          tma_load_2d(sQ + st * QT + s * QSLAB, tmQ, &fullQ[st], HD == 128 ? 64 * s : 0, q_row + (HD == 128 ? 0 : 64 * s));
        bulk_load(sL2 + st * QR, L2 + q_row, QR * 4, &fullQ[st]);
        mbar_arrive_expect_tx(&fulldO[st], QT + QR * 4);
#pragma unroll
        for (int s = 0; s < 2; ++s)
          tma_load_2d(sdO + st * QT + s * QSLAB, tmdO, &fulldO[st], HD == 128 ? 64 * s : 0, q_row + (HD == 128 ? 0 : 64 * s));
        bulk_load(sDr + st * QR, Dr + q_row, QR * 4, &fulldO[st]);"""),
    ("""      const int q0 = (q_first + it % per_head) * BM;
      consumer_block<HD, CAUSAL>(it, q0, key0, c, t, sK, sV, sQ + st * QT, sdO + st * QT, sL2 + st * BM,
                                 sDr + st * BM, sdS,""",
     """      const int q0 = (q_first + it % per_head) * QR;
      consumer_block<HD, CAUSAL>(it, q0, key0, c, t, sK, sV, sQ + st * QT, sdO + st * QT, sL2 + st * QR,
                                 sDr + st * QR, sdS,"""),
]


# d96_ksteps: dq_tiles with S^T and dP^T over D = 96's 96 columns: the 128-wide kernel serves D = 96 with d 96..127
# zero-filled by TMA, whose two k16 steps of each product add nothing. The consumer loop holds both builds of the
# block and picks one per launch (a uniform branch between blocks, each ending with wgmma.wait_group 0). The same
# edits serve tiles_stack on q128_d64's text, whose issue_nt also takes the query rows N and whose stages hold QR rows.
def _d96_ksteps(on_q128: bool) -> list[tuple[str, str]]:
    tparams, xs, n, rows = (", int N = 64", "N / 2", ", QR", "QR") if on_q128 else ("", "32", "", "BM")
    call = """consumer_block<HD, CAUSAL{kd}>(it, q0, key0, c, t, sK, sV, sQ + st * QT, sdO + st * QT, sL2 + st * {rows},
                                 {pad}sDr + st * {rows}, sdS, fullQ, fulldO, empty, dv, dk,"""
    return [
        (f"""template <int HD{tparams}>
__device__ __forceinline__ void issue_nt(float (&x)[{xs}], const uint8_t* a, const uint8_t* b) {{
  const uint64_t da = make_desc_sw128(a), db = make_desc_sw128(b);
#pragma unroll
  for (int kk = 0; kk < HD / 16; ++kk) {{""",
         f"""template <int HD{tparams}, int KD = HD>
__device__ __forceinline__ void issue_nt(float (&x)[{xs}], const uint8_t* a, const uint8_t* b) {{
  const uint64_t da = make_desc_sw128(a), db = make_desc_sw128(b);
#pragma unroll
  for (int kk = 0; kk < KD / 16; ++kk) {{"""),
        ("""template <int HD, bool CAUSAL>
__device__ __forceinline__ void consumer_block(""",
         """// KD: the d extent S^T and dP^T run over (d96_ksteps: 96 at D = 96, whose d 96..127 are TMA's zero fill, so
// their two k16 steps are skipped; dV, dK and dQ keep the 128-wide tiles).
template <int HD, bool CAUSAL, int KD = HD>
__device__ __forceinline__ void consumer_block("""),
        (f"  issue_nt<HD{n}>(s, sK + c * 64 * 128, sQ);     // S^T = K_c Q^T",
         f"  issue_nt<HD{n}, KD>(s, sK + c * 64 * 128, sQ);  // S^T = K_c Q^T"),
        (f"  issue_nt<HD{n}>(p, sV + c * 64 * 128, sdO);    // dP^T = V_c dO^T",
         f"  issue_nt<HD{n}, KD>(p, sV + c * 64 * 128, sdO); // dP^T = V_c dO^T"),
        ("      " + call.format(kd="", rows=rows, pad="") + """
                                 dQacc + static_cast<size_t>(head) * S * D, D, sl2, sdQ, threadIdx.x == 128);""",
         """      float* dq_rows = dQacc + static_cast<size_t>(head) * S * D;
      if (HD == 128 && D <= 96) {  // D = 96: S^T and dP^T over its 96 columns (a uniform branch between blocks)
        """ + call.format(kd=", 96", rows=rows, pad="      ") + """ dq_rows, D, sl2, sdQ,
                                       threadIdx.x == 128);
      } else {
        """ + call.format(kd="", rows=rows, pad="  ") + """ dq_rows, D, sl2, sdQ,
                                   threadIdx.x == 128);
      }"""),
    ]


D96_KSTEPS = _d96_ksteps(on_q128=False)
# tiles_stack: the three candidates that change separate parts of dq_tiles, together: q128_d64 (D = 64's blocks),
# d96_ksteps (D = 96's S^T / dP^T steps) and the wide epilogue, for a promotion measured as a whole.
STACK_D96 = _d96_ksteps(on_q128=True)


# tiles_d96: tiles_stack with D = 96's build in entry points of its own (attn_bwd_wgmma_d96 + _causal, _gqa; the plan
# names them, attention_backward.backward_entry_point) instead of a branch per block: the 128-wide kernels then hold
# one build of the block, as before d96_ksteps (tiles_stack measured 0.5-1.4% slower than dq_tiles_wide at D = 128).
_D96_ENTRY = """extern "C" __global__ void __launch_bounds__(384, 1) attn_bwd_wgmma_d96{suffix}(
    const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmK,
    const __grid_constant__ CUtensorMap tmV, const __grid_constant__ CUtensorMap tmdO, const float* __restrict__ L2,
    const float* __restrict__ Dr, float* __restrict__ dQacc, __nv_bfloat16* __restrict__ dK,
    __nv_bfloat16* __restrict__ dV, int S, int D, float scale{group_param}) {{
  attn_bwd<128, {causal}, {gqa}, 96>(&tmQ, &tmK, &tmV, &tmdO, L2, Dr, dQacc, dK, dV, S, D, scale, {group});
}}
"""
D96_ENTRIES = STACK_D96[:4] + [
    ("""template <int HD, bool CAUSAL, bool GQA>
__device__ __forceinline__ void attn_bwd(""",
     """template <int HD, bool CAUSAL, bool GQA, int KD = HD>  // KD: S^T / dP^T's d extent (96 in D = 96's entries)
__device__ __forceinline__ void attn_bwd("""),
    ("      consumer_block<HD, CAUSAL>(it, q0, key0, c,", "      consumer_block<HD, CAUSAL, KD>(it, q0, key0, c,"),
    ("""  attn_bwd<128, true, false>(&tmQ, &tmK, &tmV, &tmdO, L2, Dr, dQacc, dK, dV, S, D, scale, 1);
}
""", """  attn_bwd<128, true, false>(&tmQ, &tmK, &tmV, &tmdO, L2, Dr, dQacc, dK, dV, S, D, scale, 1);
}

// D = 96: the 128-wide kernel with S^T and dP^T over d 0..95 (d 96..127 are TMA's zero fill).
""" + "\n".join(_D96_ENTRY.format(suffix=sfx, causal=c, gqa=g, group_param=gp, group=gr)
                for sfx, c, g, gp, gr in (("", "false", "false", "", "1"), ("_causal", "true", "false", "", "1"),
                                          ("_gqa", "false", "true", ", int group", "group")))),
]

# st_ahead: in the 128-wide kernels each block's S^T is issued by the block before it, behind that block's dQ product,
# so the tensor pipe has work while the consumer stores its dQ tile and meets the other consumer (the reference's
# profile: 19% of stall samples wait at the S^T / dP^T issue). D = 64 keeps its block.
ST_AHEAD_BLOCK = r"""// st_ahead: one 128-wide block whose S^T was issued before (by the previous block, or before the loop) into `s`,
// which it only reads; before its dQ epilogue it issues the next block's S^T into `s` again, so the tensor pipe has
// work while the consumer stores its dQ tile and meets the other. To hold the registers for that, P^T goes to fp32
// `e` (s is never written but by its wgmma: a write to the carried accumulator makes ptxas serialise, C7515), and
// dV / dK are waited for before dQ is issued, so their bf16 operands are dead before dQ and the next S^T.
template <int HD, bool CAUSAL, int KD>
__device__ __forceinline__ void consumer_block_pf(int it, bool has_next, int q0, int key0, int c, int t,
                                                  const uint8_t* sK, const uint8_t* sV, const uint8_t* sQ0,
                                                  const uint8_t* sdO0, const float* sL20, const float* sDr0,
                                                  uint8_t* sdS, uint64_t* fullQ, uint64_t* fulldO, uint64_t* empty,
                                                  float (&s)[32], float (&dv)[64], float (&dk)[64],
                                                  float* __restrict__ dq_rows, int D, float sl2, float* sdQ) {
  constexpr int NS = Stages<HD>::N, QT = 2 * QSLAB;
  const int st = it % NS;
  const uint32_t ph = (it / NS) & 1;
  const uint8_t* sQ = sQ0 + st * QT;
  const uint8_t* sdO = sdO0 + st * QT;
  const float* sL2 = sL20 + st * 64;
  const float* sDr = sDr0 + st * 64;
  const int lane = t % 32;
  const int r = 16 * (t / 32) + lane / 4;  // this thread's keys r and r + 8 of the consumer's 64
  const int col0 = 2 * (lane % 4);
  float p[32], e[32];
  uint32_t pp[16], ds[16];

  wgmma_wait<0>();  // this block's S^T, issued before the previous block's dQ epilogue, is done (a wait_group 0:
  wgmma_fence_regs(s);  // ptxas does not follow a group count across the loop's back edge, C7514)
  mbar_wait(&fulldO[st], ph);
  wgmma_fence();
  issue_nt<HD, 64, KD>(p, sV + c * 64 * 128, sdO);  // dP^T = V_c dO^T, under the exponentials
  wgmma_commit();
  const bool mask = CAUSAL && q0 < key0 + BN;
#pragma unroll
  for (int a = 0; a < 8; ++a) {
    const float2 l2 = lds64(sL2 + 8 * a + col0);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int j = 4 * a + k, q = 8 * a + col0 + (k % 2);
      float x = ex2(fmaf(s[j], sl2, -(k % 2 ? l2.y : l2.x)));
      if (mask && key0 + 64 * c + r + 8 * (k / 2) > q0 + q) x = 0.f;
      e[j] = x;
    }
  }
  wgmma_wait<0>();
  wgmma_fence_regs(p);
#pragma unroll
  for (int a = 0; a < 8; ++a) {
    const float2 dr = lds64(sDr + 8 * a + col0);
#pragma unroll
    for (int k = 0; k < 4; ++k) p[4 * a + k] = e[4 * a + k] * (p[4 * a + k] - (k % 2 ? dr.y : dr.x));
  }
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    pp[i] = pack_bf16(e[2 * i], e[2 * i + 1]);
    ds[i] = pack_bf16(p[2 * i], p[2 * i + 1]);
  }
  wgmma_fence();
  issue_tn<HD, 64>(dv, pp, sdO);  // dV += P^T dO
  issue_tn<HD, 64>(dk, ds, sQ);   // dK += dS^T Q
  wgmma_commit();
  uint8_t* buf = sdS + (it & 1) * QRows<HD>::DS;
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    const int row = 64 * c + r + 8 * (i % 2), q = 8 * (i / 2) + col0;
    sts32(buf + row * 128 + (((q / 8) ^ (row % 8)) * 16) + (q % 8) * 2, ds[i]);
  }
  fence_proxy_async();
  if (t == 0) bulk_wait_read();  // this consumer's previous dQ reduction has read its tile
  named_barrier_sync(1, 256);    // both consumers' dS^T rows are in `buf` (and sdQ is free again)
  wgmma_wait<0>();               // dV and dK are done: pp, ds and this stage's Q / dO are free
  fence_u32(pp);
  fence_u32(ds);
  if (lane == 0) mbar_arrive(&empty[st]);

  float dq[32];
  const uint64_t da = desc_mn(buf, 0), dbk = desc_mn(sK + c * KSLAB, 0);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 8; ++kk) wgmma_ss_tt(dq, da + kk * (2048 >> 4), dbk + kk * (2048 >> 4), kk != 0);
  wgmma_commit();
  if (has_next) {  // the next block's S^T, behind dQ in the tensor pipe, while this block's dQ tile is stored
    const int nst = (it + 1) % NS;
    mbar_wait(&fullQ[nst], ((it + 1) / NS) & 1);
    issue_nt<HD, 64, KD>(s, sK + c * 64 * 128, sQ0 + nst * QT);
    wgmma_commit();
    wgmma_wait<1>();
  } else {
    wgmma_wait<0>();
  }
  wgmma_fence_regs(dq);
  const int W = min(64, D - 64 * c), sw = W / 8 - 1;
  float* tile = sdQ + c * BM * 64;
#pragma unroll
  for (int j = 0; j < 32; j += 2) {
    const int g = j / 4, row = r + 8 * ((j / 2) % 2);
    if (8 * g < W) sts64(tile + row * W + 8 * (g ^ (row & sw)) + col0, dq[j], dq[j + 1]);
  }
  fence_proxy_async();
  named_barrier_sync(3 + c, 128);  // this consumer's rows are in its tile
  if (t == 0) bulk_reduce_add(dq_rows + static_cast<size_t>(q0) * D + 64 * 64 * c, tile, BM * W * 4);
}

"""

ST_AHEAD_LOOP_OLD = """    mbar_wait(fullKV, 0);
    for (int it = 0; it < n_iter; ++it) {
      const int st = it % Stages<HD>::N;
      const int head = (GQA ? bkv * group : bkv) + it / per_head;
      const int q0 = (q_first + it % per_head) * QR;
      consumer_block<HD, CAUSAL, KD>(it, q0, key0, c, t, sK, sV, sQ + st * QT, sdO + st * QT, sL2 + st * QR,
                                 sDr + st * QR, sdS, fullQ, fulldO, empty, dv, dk,
                                 dQacc + static_cast<size_t>(head) * S * D, D, sl2, sdQ, threadIdx.x == 128);
    }
"""

ST_AHEAD_LOOP_NEW = """    mbar_wait(fullKV, 0);
    if constexpr (HD == 128) {  // st_ahead: each block's S^T issued by the block before it
      float s[32];
      mbar_wait(&fullQ[0], 0);
      wgmma_fence();
      issue_nt<HD, 64, KD>(s, sK + c * 64 * 128, sQ);  // S^T of the first block
      wgmma_commit();
      for (int it = 0; it < n_iter; ++it) {
        const int head = (GQA ? bkv * group : bkv) + it / per_head;
        const int q0 = (q_first + it % per_head) * QR;
        consumer_block_pf<HD, CAUSAL, KD>(it, it + 1 < n_iter, q0, key0, c, t, sK, sV, sQ, sdO, sL2, sDr, sdS, fullQ,
                                          fulldO, empty, s, dv, dk, dQacc + static_cast<size_t>(head) * S * D, D,
                                          sl2, sdQ);
      }
    } else {
    for (int it = 0; it < n_iter; ++it) {
      const int st = it % Stages<HD>::N;
      const int head = (GQA ? bkv * group : bkv) + it / per_head;
      const int q0 = (q_first + it % per_head) * QR;
      consumer_block<HD, CAUSAL, KD>(it, q0, key0, c, t, sK, sV, sQ + st * QT, sdO + st * QT, sL2 + st * QR,
                                 sDr + st * QR, sdS, fullQ, fulldO, empty, dv, dk,
                                 dQacc + static_cast<size_t>(head) * S * D, D, sl2, sdQ, threadIdx.x == 128);
    }
    }
"""

ST_AHEAD = [("// The dK / dV epilogue in 16-byte stores", ST_AHEAD_BLOCK + "// The dK / dV epilogue in 16-byte stores"),
            (ST_AHEAD_LOOP_OLD, ST_AHEAD_LOOP_NEW)]

# dv_early: in st_ahead's block dV += P^T dO is issued right after the exponentials, before dP^T is waited for. In
# st_ahead's SASS ptxas 13.5 sinks 23 of the 32 MUFU.EX2 below the WARPGROUP.DEPBAR of dP^T (the PTX has them before
# the wait_group), so the exponentials run after dP^T instead of under it; the dV wgmma reads their packed values,
# which keeps them ahead of its issue and of the wait that follows it. To hold the registers (with P^T in fp32 next to
# the packed copy in flight, ptxas spilled 80-92 bytes), dS = P (dP - Dr) reads P back from its packed bf16 pairs:
# dS is rounded to bf16 for its two products anyway.
DV_EARLY = [
    ("""  wgmma_wait<0>();
  wgmma_fence_regs(p);
#pragma unroll
  for (int a = 0; a < 8; ++a) {
    const float2 dr = lds64(sDr + 8 * a + col0);
#pragma unroll
    for (int k = 0; k < 4; ++k) p[4 * a + k] = e[4 * a + k] * (p[4 * a + k] - (k % 2 ? dr.y : dr.x));
  }
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    pp[i] = pack_bf16(e[2 * i], e[2 * i + 1]);
    ds[i] = pack_bf16(p[2 * i], p[2 * i + 1]);
  }
  wgmma_fence();
  issue_tn<HD, 64>(dv, pp, sdO);  // dV += P^T dO
  issue_tn<HD, 64>(dk, ds, sQ);   // dK += dS^T Q
  wgmma_commit();
""", """#pragma unroll
  for (int i = 0; i < 16; ++i) pp[i] = pack_bf16(e[2 * i], e[2 * i + 1]);
  wgmma_fence();
  issue_tn<HD, 64>(dv, pp, sdO);  // dV += P^T dO (dv_early: before dP^T's wait, so the exponentials stay under dP^T)
  wgmma_commit();
  wgmma_wait<1>();  // dP^T is done (groups complete in order; dV may still run)
  wgmma_fence_regs(p);
#pragma unroll
  for (int a = 0; a < 8; ++a) {
    const float2 dr = lds64(sDr + 8 * a + col0);
#pragma unroll
    for (int k = 0; k < 4; ++k) {  // P from its packed pair (the registers of P^T in fp32 are given up for dV's issue)
      const float2 pk = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&pp[2 * a + k / 2]));
      p[4 * a + k] = (k % 2 ? pk.y : pk.x) * (p[4 * a + k] - (k % 2 ? dr.y : dr.x));
    }
  }
#pragma unroll
  for (int i = 0; i < 16; ++i) ds[i] = pack_bf16(p[2 * i], p[2 * i + 1]);
  wgmma_fence();
  issue_tn<HD, 64>(dk, ds, sQ);   // dK += dS^T Q
  wgmma_commit();
"""),
]

# dv_uniform: dv_early with the consumer index broadcast from lane 0 (__shfl_sync), so that ptxas knows it is
# warp-uniform: the wgmma descriptors that depend on it (K_c, V_c) are then built in uniform registers. In st_ahead's
# SASS each of them is a 64-bit add in ordinary registers and two R2UR per k-step (89 R2UR in the D = 128 kernel, 22
# here), and the profile's largest stall (20%, `wait`) is on the wgmma issue line.
# Only in the 128-wide kernels (D = 96 / 128, -1.7 to -4.9% time on the H200): at D = 64 (consumer_block) the same
# broadcast ran 3.3% slower, causal 4.0% (attention_bwd.md v11), so the D = 64 entries keep the plain index.
UNIFORM_C = [uniform_index_edit("c", only_if="HD == 128")]

# dq_static: dv_uniform with the dQ tile's width known to ptxas in the 128-wide block. `W = min(64, D - 64 c)` is a
# runtime value, so each of the 16 float2 stores of a thread's dQ rows sat behind its own `8 g < W` branch and ptxas,
# out of registers, recomputed the row's address and swizzle from threadIdx inside each branch (17 integer
# instructions per pair of STS.64, reusing four registers that each store must read first). The profile of
# dv_uniform put 16% of all stall samples (short_scoreboard) on those instructions (attributed to the
# `const int t = threadIdx.x % 128;` line). Here the width is 64 (D = 128) or, at D = 96, 64 / 32 for consumer 0 / 1
# (a warp-uniform branch): every store is the thread's row base plus a constant XOR its row's swizzle.
DQ_STATIC = [
    ("// st_ahead: one 128-wide block whose S^T was issued before", """\
// This consumer's dq fragment into its W-wide fp32 dQ tile (dq_static): element j at row r + 8 ((j / 2) % 2), column
// 8 (j / 4) + col0 + j % 2, 32-byte group g of a row at g ^ (row % (W / 8)); r + 8 has r's swizzle.
template <int W>
__device__ __forceinline__ void store_dq_tile(float* tile, const float (&dq)[32], int r, int col0) {
  float* base = tile + r * W + col0;
  const int x = 8 * (r & (W / 8 - 1));
#pragma unroll
  for (int j = 0; j < 32; j += 2) {
    const int g = j / 4, h = (j / 2) % 2;
    if (8 * g < W) sts64(base + h * 8 * W + ((8 * g) ^ x), dq[j], dq[j + 1]);
  }
}

// st_ahead: one 128-wide block whose S^T was issued before"""),
    ("""  const int W = min(64, D - 64 * c), sw = W / 8 - 1;
  float* tile = sdQ + c * BM * 64;
#pragma unroll
  for (int j = 0; j < 32; j += 2) {
    const int g = j / 4, row = r + 8 * ((j / 2) % 2);
    if (8 * g < W) sts64(tile + row * W + 8 * (g ^ (row & sw)) + col0, dq[j], dq[j + 1]);
  }
  fence_proxy_async();
  named_barrier_sync(3 + c, 128);  // this consumer's rows are in its tile
  if (t == 0) bulk_reduce_add(dq_rows + static_cast<size_t>(q0) * D + 64 * 64 * c, tile, BM * W * 4);""",
     """  const int W = KD == 128 || c == 0 ? 64 : 32;  // D = 128: both halves 64 wide; D = 96: 64 and 32 (dq_static)
  float* tile = sdQ + c * BM * 64;
  if (W == 64) store_dq_tile<64>(tile, dq, r, col0);
  else store_dq_tile<32>(tile, dq, r, col0);
  fence_proxy_async();
  named_barrier_sync(3 + c, 128);  // this consumer's rows are in its tile
  if (t == 0) bulk_reduce_add(dq_rows + static_cast<size_t>(q0) * D + 64 * 64 * c, tile, BM * W * 4);"""),
    # the 128-wide entries with KD = 128 serve D = 128 only (D = 96 has entry points of its own)
    ("  if (D > HD || D % 16 != 0 || S % BN != 0 || (GQA && group < 1)) asm volatile(\"trap;\");",
     "  if (D > HD || D % 16 != 0 || S % BN != 0 || (GQA && group < 1) || (HD == 128 && KD == 128 && D != 128))\n"
     "    asm volatile(\"trap;\");"),
]

# dv_early takes P from its bf16 pair for dS = P (dP - Dr) (P^T's fp32 registers given up for dV's issue): one more
# bf16 rounding in every dS, so dQ's relative Frobenius error rose from 0.00236 to 0.00289 (cuDNN's 0.0024) and its
# worst element past twice the library's on some causal inputs (the harness's library_x2 rule: INCORRECT_NUMERICAL in
# 2 of 5 causal runs of dv_uniform on 2026-12-01). So the reference is st_static: the uniform index and dq_static's
# stores on st_ahead's order, where dV is issued after dS and both read fp32 P^T (attention_bwd.md v13).


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


def _st_walk(text: str) -> str:
    text = VARIANTS["st_static"](text)
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
    for old, new in (("__nv_bfloat16* __restrict__ dV, int S, int D, float scale",
                      "__nv_bfloat16* __restrict__ dV, int* __restrict__ dQflag, int S, int D, float scale"),
                     ("dQacc, dK, dV, S, D, scale", "dQacc, dK, dV, dQflag, S, D, scale")):
        if text.count(old) != 9:
            raise ValueError(f"variant st_walk: {old!r} occurs {text.count(old)} times, not in the 9 entry points")
        text = text.replace(old, new)
    return text


def apply_edits(text: str, edits: list[tuple[str, str]], name: str) -> str:
    for old, new in edits:
        if text.count(old) != 1:
            raise ValueError(f"variant {name}: {old[:60]!r} occurs {text.count(old)} times in the reference, not once")
        text = text.replace(old, new)
    return text


def _stages_3(text: str) -> str:
    text = apply_edits(text, STAGES_3, "bulk_dq_s3")
    body = text.index("template <int HD>\nstruct Stages")  # every later use is inside an HD template
    return text[:body] + re.sub(r"\bSTAGES\b", "Stages<HD>::N", text[body:])


def replace_span(text: str, start: str, end: str, new: str, name: str) -> str:
    """`text` with the span from the line starting `start` up to (not including) `end` replaced by `new`."""
    if text.count(start) != 1 or text.count(end) != 1 or text.index(start) > text.index(end):
        raise ValueError(f"variant {name}: the markers {start[:40]!r} .. {end[:40]!r} are not in the reference once, in order")
    return text[:text.index(start)] + new + text[text.index(end):]


def _decoupled(text: str) -> str:
    for start, end, new in DECOUPLED_SPANS:
        text = replace_span(text, start, end, new, "decoupled")
    return apply_edits(text, DECOUPLED_CONSUMER_EDITS + DECOUPLED, "decoupled")


def _bulk_dq_s3(text: str) -> str:
    return _stages_3(apply_edits(text, BULK_DQ, "bulk_dq"))


def _on(base: str, name: str, what: str, edits: list[tuple[str, str]]):
    """A variant built on variant `base`: its edits, and its header naming it, what it adds and its base."""
    header = (f"// VARIANT {base} (attention_bwd_variants.py)",
              f"// VARIANT {name} (attention_bwd_variants.py): {base} with {what};\n// {base}")
    return lambda text: apply_edits(VARIANTS[base](text), edits + [header], name)


VARIANTS = {
    "bulk_dq": lambda text: apply_edits(text, BULK_DQ, "bulk_dq"),
    "bulk_dq_s3": _bulk_dq_s3,
    "decoupled": _decoupled,
    "bulk_dq_d64": _on("bulk_dq_s3", "bulk_dq_d64", "D = 64's dQ by bulk reductions too", BULK_DQ_D64),
    "own_keys": _on("dq_tiles", "own_keys", "every consumer's dQ over its own keys and all columns: the consumers "
                    "never meet", OWN_KEYS),
    "q128_d64": _on("dq_tiles", "q128_d64", "128 query rows per iteration at D = 64, each consumer's dQ over all keys for "
                    "its own 64 rows", Q128_D64),
    "tiles_stack": _on("q128_d64", "tiles_stack", "D = 96's S^T / dP^T over its own columns and the 16-byte dK / dV "
                       "epilogue (q128_d64 + d96_ksteps + dq_tiles_wide)", STACK_D96 + WIDE_EPILOGUE),
    "tiles_d96": _on("q128_d64", "tiles_d96", "D = 96's S^T / dP^T over its own columns in entry points of its own and "
                     "the 16-byte dK / dV epilogue (tiles_stack without the per-block branch)", D96_ENTRIES + WIDE_EPILOGUE),
    "st_ahead": _on("tiles_d96", "st_ahead", "each 128-wide block's S^T issued by the block before it, behind its dQ "
                    "product", ST_AHEAD),
    "dv_early": _on("st_ahead", "dv_early", "dV issued right after the exponentials, before dP^T is waited for",
                    DV_EARLY),
    # st_static (the reference): dq_static's stores and the uniform index on st_ahead's order (dV after dS, fp32 P^T)
    "st_uniform": _on("st_ahead", "st_uniform", "the consumer index made warp-uniform for ptxas", UNIFORM_C),
    "st_static": _on("st_uniform", "st_static", "the dQ tile's width known to ptxas in the 128-wide block", DQ_STATIC),
    "st_walk": _st_walk,
    "dq_static": _on("dv_uniform", "dq_static", "the dQ tile's width known to ptxas in the 128-wide block (no branch "
                     "and no address recomputed per store)", DQ_STATIC),
    "dv_uniform": _on("dv_early", "dv_uniform", "the consumer index made warp-uniform for ptxas (descriptors in "
                      "uniform registers)", UNIFORM_C),
    "d96_ksteps": _on("dq_tiles", "d96_ksteps", "S^T and dP^T over D = 96's own columns (6 k16 steps, not 8)",
                      D96_KSTEPS),
    "dq_tiles_wide": _on("dq_tiles", "dq_tiles_wide", "the dK / dV epilogue in 16-byte stores (a quad's 4 x 4 "
                         "transpose by shuffles)", WIDE_EPILOGUE),
    "own_keys_wide": _on("own_keys", "own_keys_wide", "the dK / dV epilogue in 16-byte stores (a quad's 4 x 4 "
                         "transpose by shuffles)", WIDE_EPILOGUE),
    "own_keys_s3": _on("own_keys", "own_keys_s3", "the 3-deep ring, dQ leaving through one tile a column half at a "
                       "time", OWN_KEYS_S3),
    "dq_tiles": _on("bulk_dq_d64", "dq_tiles", "each consumer's dQ tile reduced on its own, swizzled, in dQacc's "
                    "layout", DQ_TILES),
}


# Launch order -> (its edits, applied after the variant's; the header line it adds).
ORDERS: dict[str, tuple[list[tuple[str, str]], str]] = {
    "head_major": (HEAD_MAJOR, "launched with the key blocks of a head side by side"),
    "head_groups": (HEAD_MAJOR + HEAD_GROUPS, "launched by groups of 4 heads, their key blocks longest-first "
                                              "across the group"),
}


def variant_text(name: str) -> str:
    """The solution text of variant `name` (the reference's plan lines, so fast_backward applies to it).
    `X+order`: variant X (or `checked-in`, the file itself) launched in one of ORDERS."""
    base, _, order = name.partition("+")
    if order:
        if order not in ORDERS:
            raise KeyError(f"no launch order {order!r}; there are {', '.join(ORDERS)}")
        text = REFERENCE.read_text(encoding="utf-8") if base == "checked-in" else variant_text(base)
        edits, what = ORDERS[order]
        return f"// + {order} (attention_bwd_variants.py): {what}.\n" + apply_edits(text, edits, name)
    if name not in VARIANTS:
        raise KeyError(f"no variant {name!r}; there are {', '.join(VARIANTS)}")
    return VARIANTS[name](REFERENCE.read_text(encoding="utf-8"))
