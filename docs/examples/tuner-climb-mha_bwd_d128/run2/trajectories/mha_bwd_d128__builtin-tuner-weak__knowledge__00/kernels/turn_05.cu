// + head_groups (attention_bwd_variants.py): launched by groups of 4 heads, their key blocks longest-first across the group.
// VARIANT decoupled (attention_bwd_variants.py): each consumer computes the dQ of the previous query
// block, so the two consumers can run up to a block apart; dS^T triple-buffered on mbarriers; a 3-deep ring
// for the 128-wide kernels; consumer 1 starts once consumer 0's first exponentials are done.
//
// Hopper (sm_90a) attention backward with TMA + wgmma, FlashAttention-2/3 structure, three launches:
//   attn_bwd_pre : per query row, Dr = rowsum(dO * O) and L2 = LSE * log2(e) (scratch), and the fp32 dQ
//                  accumulator row zeroed;
//   attn_bwd_main: one CTA per (128-key block, batch * KV head), looping over 64-row query blocks (and, for
//                  GQA, over the query heads of the group); dK and dV accumulate in registers, dQ is
//                  added to the fp32 accumulator with vector atomics;
//   attn_bwd_post: dQ = bf16(scale * accumulator).
// One template attn_bwd<HD, CAUSAL, GQA>; the entry points: attn_bwd_wgmma (+ _causal, _gqa) for HD = 128,
// which also serves D = 96 (TMA zero-fills d 96..127 of every tile, so the padded columns add nothing and
// are never stored), and attn_bwd_wgmma_d64 (+ _causal, _gqa) for D = 64. This file's plan is the D = 128
// non-causal one; the other workloads' solutions change a few plan lines (attention.py fast_backward).
//
// main: 384 threads = 3 warpgroups.
//   * warpgroup 0, the producer (setmaxnreg 24): one thread loads the CTA's K and V (128 keys x HD) once,
//     then streams, per query block, Q and dO (64 x HD, TMA, 128B swizzle: HD / 64 slabs of 64 rows x 64 d)
//     with their L2 / Dr rows (bulk copies, 256 bytes) into a STAGES-deep ring (full / empty mbarriers).
//   * warpgroups 1 and 2, the consumers (setmaxnreg 240): consumer c owns keys 64c..64c+63 of the block.
//     Everything is computed transposed, keys as rows, so that P^T and dS^T are register A operands:
//       S^T  = K_c Q^T         SS, both K-major (d contiguous)            m64n64k16 x HD/16
//       dP^T = V_c dO^T        SS, both K-major                           m64n64k16 x HD/16
//       P^T  = 2^(S^T scale log2e - L2_q) (0 above the causal diagonal);  dS^T = P^T (dP^T - Dr_q)
//       dV  += P^T dO          RS, dO N-major (imm-trans-b)               m64nHDk16 x 4
//       dK  += dS^T Q          RS, Q N-major                              m64nHDk16 x 4
//     dS^T goes to shared memory as bf16 (rows = keys, 128B-swizzled, the layout TMA gives V), and
//       dQ_partial = dS K      SS, dS MN-major (imm-trans-a), K N-major   m64n64k16
//     HD = 128: both consumers meet on a named barrier and consumer c computes d columns 64c..64c+63
//     over all 128 keys; HD = 64: each consumer computes all 64 columns over its own 64 keys.
//     The dS buffer is double-buffered: a consumer rewrites buffer b only after the barrier of the next
//     iteration, which the other consumer reaches only once its dQ product of buffer b has completed.
// Causal (top-left: key j <= query i): the CTA of key block kb starts at query block 2 kb and masks the
// two query blocks that cross the diagonal; key blocks are numbered in launch order, so the longest go first.
/* ptxbench
language = "cuda"

[[launch]]
kernel = "attn_bwd_pre"
grid = ["cdiv(B * H * S, 8)"]
block = [256]
args = ["O", "dO", "LSE", "scratch:Dr", "scratch:L2", "scratch:dQacc", "i32:B * H * S", "i32:D"]

[[launch]]
kernel = "attn_bwd_wgmma"
grid = ["cdiv(S, 128)", "B * H"]  # the key blocks of one head side by side: they share its Q, dO, dQ in L2
block = [384]
smem = "1024 + 512 * (cdiv(D, 64) * 64) + (2 + cdiv(D, 64) // 2) * (256 * (cdiv(D, 64) * 64) + 512) + 16384 * 3 + 256"  # slack, K, V, STAGES x (Q, dO, L2, Dr), 3 x dS, mbarriers (HD = 64 cdiv(D, 64); STAGES 3 for HD 128)
args = ["tmap:Q_map", "tmap:K_map", "tmap:V_map", "tmap:dO_map", "scratch:L2", "scratch:Dr", "scratch:dQacc", "dK", "dV", "i32:S", "i32:D", "f32:scale"]

[[launch]]
kernel = "attn_bwd_post"
grid = ["cdiv(B * H * S * D, 1024)"]
block = [256]
args = ["scratch:dQacc", "dQ", "i32:B * H * S * D", "f32:scale"]

[tmap.Q_map]
tensor = "Q"
dims = ["D", "B * H * S"]
box = [64, 64]
swizzle = "128B"
l2_promotion = "256B"

[tmap.dO_map]
tensor = "dO"
dims = ["D", "B * H * S"]
box = [64, 64]
swizzle = "128B"
l2_promotion = "256B"

[tmap.K_map]
tensor = "K"
dims = ["D", "B * H * S"]
box = [64, 128]
swizzle = "128B"
l2_promotion = "256B"

[tmap.V_map]
tensor = "V"
dims = ["D", "B * H * S"]
box = [64, 128]
swizzle = "128B"
l2_promotion = "256B"

[scratch.Dr]
dtype = "float32"
shape = ["B", "H", "S"]

[scratch.L2]
dtype = "float32"
shape = ["B", "H", "S"]

[scratch.dQacc]
dtype = "float32"
shape = ["B", "H", "S", "D"]
*/
#include <cuda.h>
#include <cuda_bf16.h>
#include <stdint.h>

#include "ptxbench/wgmma.cuh"
#include "ptxbench/tma.cuh"
#include "ptxbench/mbarrier.cuh"

using namespace ptxbench;  // mbar_*, tma_load_2d, make_desc_sw128, wgmma_* (prompts/include/ptxbench)

constexpr int BN = 128;             // keys per CTA (64 per consumer warpgroup)
constexpr int BM = 64;              // query rows per iteration
constexpr int KSLAB = 128 * 128;    // bytes of a 128-row x 64-column bf16 slab (K, V, one TMA box)
constexpr int QSLAB = 64 * 128;     // bytes of a 64-row x 64-column bf16 slab (Q, dO, one TMA box)
constexpr int DS_BYTES = 128 * 128; // dS^T of the block: 128 keys x 64 queries bf16
// Q / dO ring depth: 3 for the 128-wide kernels, 2 for D = 64; dS^T buffers: 3.
template <int HD>
struct Stages {
  static constexpr int N = HD == 128 ? 3 : 2;
};
constexpr int DS_BUFS = 3;
constexpr int PRODUCER_REGS = 24;
constexpr int CONSUMER_REGS = 240;
constexpr float LOG2E = 1.4426950408889634f;

// ---------------------------------------------------------------------------------------------------------
// attn_bwd_pre: one warp per query row.
extern "C" __global__ void __launch_bounds__(256) attn_bwd_pre(
    const __nv_bfloat16* __restrict__ O, const __nv_bfloat16* __restrict__ dO, const float* __restrict__ LSE,
    float* __restrict__ Dr, float* __restrict__ L2, float* __restrict__ dQacc, int rows, int D) {
  const int row = blockIdx.x * 8 + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const __nv_bfloat162* o = reinterpret_cast<const __nv_bfloat162*>(O + static_cast<size_t>(row) * D);
  const __nv_bfloat162* g = reinterpret_cast<const __nv_bfloat162*>(dO + static_cast<size_t>(row) * D);
  float2* acc = reinterpret_cast<float2*>(dQacc + static_cast<size_t>(row) * D);
  float sum = 0.f;
  for (int i = lane; i < D / 2; i += 32) {
    const float2 a = __bfloat1622float2(o[i]), b = __bfloat1622float2(g[i]);
    sum = fmaf(a.x, b.x, fmaf(a.y, b.y, sum));
    acc[i] = make_float2(0.f, 0.f);
  }
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, m);
  if (lane == 0) {
    Dr[row] = sum;
    L2[row] = LSE[row] * LOG2E;
  }
}

// attn_bwd_post: dQ = bf16(scale * acc), four elements per thread.
extern "C" __global__ void __launch_bounds__(256) attn_bwd_post(const float* __restrict__ dQacc,
                                                                 __nv_bfloat16* __restrict__ dQ, int n, float scale) {
  const int i = 4 * (blockIdx.x * 256 + threadIdx.x);
  if (i >= n) return;
  const float4 v = *reinterpret_cast<const float4*>(dQacc + i);
  __nv_bfloat162* out = reinterpret_cast<__nv_bfloat162*>(dQ + i);
  out[0] = __floats2bfloat162_rn(v.x * scale, v.y * scale);
  out[1] = __floats2bfloat162_rn(v.z * scale, v.w * scale);
}

// ---------------------------------------------------------------------------------------------------------
// Descriptor of an MN-major (M or N contiguous), 128B-swizzled operand: each 128-byte row is one k holding
// 64 consecutive m / n; LBO = bytes between 64-wide m / n slabs, SBO = 1 KiB between 8-k atoms.
__device__ __forceinline__ uint64_t desc_mn(const void* p, uint32_t lbo) {
  uint64_t d = static_cast<uint64_t>((smem_u32(p) & 0x3FFFF) >> 4);
  d |= static_cast<uint64_t>(lbo >> 4) << 16;
  d |= static_cast<uint64_t>(1024 >> 4) << 32;
  d |= static_cast<uint64_t>(1) << 62;
  return d;
}

template <int R>
__device__ __forceinline__ void fence_u32(uint32_t (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+r"(d[i]) :: "memory");
}

__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// 1-D bulk copy global -> shared, completing its bytes on `bar` (size and addresses multiples of 16).
__device__ __forceinline__ void bulk_load(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
               :: "r"(smem_u32(dst)), "l"(reinterpret_cast<uint64_t>(src)), "r"(bytes), "r"(smem_u32(bar))
               : "memory");
}

// D[64 x 128] += A[64 x 16] (registers, bf16 pairs) * B[16 x 128], B N-major in shared memory (imm-trans-b).
__device__ __forceinline__ void wgmma_rs(float (&d)[64], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint64_t db) {
  asm volatile(
      "{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %69, 0;\n\t"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n\t}"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(db), "r"(1));
}

// The same with N = 64 (D = 64).
__device__ __forceinline__ void wgmma_rs(float (&d)[32], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint64_t db) {
  asm volatile(
      "{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %37, 0;\n\t"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n\t}"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(db), "r"(1));
}

// D[64 x 64] (+)= A[64 x 16] * B[16 x 64], both MN-major in shared memory (imm-trans-a, imm-trans-b).
__device__ __forceinline__ void wgmma_ss_tt(float (&d)[32], uint64_t da, uint64_t db, int scale_d) {
  asm volatile(
      "{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %34, 0;\n\t"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 1, 1;\n\t}"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(da), "l"(db), "r"(scale_d));
}

// X^T = A_c B^T for this consumer's 64 keys (A = K or V rows, 128-row slabs) against the 64 query rows of
// B (Q or dO, 64-row slabs): HD / 16 k16 steps over d, the first overwriting X. Inside a 128-byte swizzle
// row a k16 step is 32 bytes further (+2 in 16-byte units); steps 4..7 read the second d slab.
template <int HD>
__device__ __forceinline__ void issue_nt(float (&x)[32], const uint8_t* a, const uint8_t* b) {
  const uint64_t da = make_desc_sw128(a), db = make_desc_sw128(b);
#pragma unroll
  for (int kk = 0; kk < HD / 16; ++kk) {
    wgmma_m64k16_bf16<64>(x, da + (kk / 4) * (KSLAB >> 4) + 2 * (kk % 4), db + (kk / 4) * (QSLAB >> 4) + 2 * (kk % 4),
                          kk != 0);
  }
}

// acc += X^T B: X^T (64 keys x 64 queries) from registers, B = the 64 x HD Q or dO tile, N-major: 4 k16
// steps over the queries, each two 8-row atoms (2 KiB) further into every d slab (LBO = one 64-row slab).
template <int HD>
__device__ __forceinline__ void issue_tn(float (&acc)[HD / 2], const uint32_t (&x)[16], const uint8_t* b) {
  const uint64_t db = desc_mn(b, QSLAB);
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) wgmma_rs(acc, x[4 * kk], x[4 * kk + 1], x[4 * kk + 2], x[4 * kk + 3], db + kk * (2048 >> 4));
}

// dQ of query block `it` (rows q0.. of dq_rows) from its dS^T buffer once both consumers' rows are in it:
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
template <int HD, bool CAUSAL>
__device__ __forceinline__ void consumer_block(int it, int q0, int key0, int c, int t, const uint8_t* sK,
                                               const uint8_t* sV, const uint8_t* sQ, const uint8_t* sdO,
                                               const float* sL2, const float* sDr, uint8_t* sdS, uint64_t* fullQ,
                                               uint64_t* fulldO, uint64_t* empty, uint64_t* dsReady,
                                               uint64_t* dsFree, float (&dv)[HD / 2], float (&dk)[HD / 2], float sl2) {
  constexpr int STAGES = Stages<HD>::N;
  const int st = it % STAGES;
  const uint32_t ph = (it / STAGES) & 1;
  const int lane = t % 32;
  const int r = 16 * (t / 32) + lane / 4;  // this thread's keys r and r + 8 of the consumer's 64
  const int col0 = 2 * (lane % 4);
  float s[32], p[32];
  uint32_t pp[16], ds[16];

  mbar_wait(&fullQ[st], ph);
  wgmma_fence();
  issue_nt<HD>(s, sK + c * 64 * 128, sQ);     // S^T = K_c Q^T
  wgmma_commit();
  mbar_wait(&fulldO[st], ph);
  issue_nt<HD>(p, sV + c * 64 * 128, sdO);    // dP^T = V_c dO^T
  wgmma_commit();
  wgmma_wait<1>();
  wgmma_fence_regs(s);
  const bool mask = CAUSAL && q0 < key0 + BN;  // the two query blocks that cross the diagonal
#pragma unroll
  for (int j = 0; j < 32; ++j) {
    const int q = 8 * (j / 4) + col0 + (j % 2);
    float e = ex2(fmaf(s[j], sl2, -sL2[q]));
    if (mask && key0 + 64 * c + r + 8 * ((j / 2) % 2) > q0 + q) e = 0.f;
    s[j] = e;
  }
  wgmma_wait<0>();
  wgmma_fence_regs(p);
#pragma unroll
  for (int j = 0; j < 32; ++j) p[j] = s[j] * (p[j] - sDr[8 * (j / 4) + col0 + (j % 2)]);
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    pp[i] = pack_bf16(s[2 * i], s[2 * i + 1]);
    ds[i] = pack_bf16(p[2 * i], p[2 * i + 1]);
  }
  wgmma_fence();
  issue_tn<HD>(dv, pp, sdO);  // dV += P^T dO
  issue_tn<HD>(dk, ds, sQ);   // dK += dS^T Q
  wgmma_commit();

  // dS^T to shared memory: row = key (64c + r [+ 8]), 64 queries per 128-byte row, 16-byte chunks swizzled
  // by the row's position in its 8-row atom (what TMA writes for a 128B-swizzled box).
  const int b = it % DS_BUFS;
  if (it >= DS_BUFS) mbar_wait(&dsFree[b], (it / DS_BUFS - 1) & 1);  // block it - 3's dQ products are done
  uint8_t* buf = sdS + b * DS_BYTES;
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    const int row = 64 * c + r + 8 * (i % 2), q = 8 * (i / 2) + col0;
    *reinterpret_cast<uint32_t*>(buf + row * 128 + (((q / 8) ^ (row % 8)) * 16) + (q % 8) * 2) = ds[i];
  }
  fence_proxy_async();
  __syncwarp();
  if (lane == 0) mbar_arrive(&dsReady[b]);  // this warp's rows of block it are in
  wgmma_wait<0>();  // dV / dK of this block
  fence_u32(pp);
  fence_u32(ds);
  if (lane == 0) mbar_arrive(&empty[st]);  // this warp is done with Q, dO, L2, Dr of the stage
}

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

// HD: 128 (D = 96 or 128) or 64. GQA: K, V, dK, dV have B * HKV heads; the CTA of KV row bkv = b * HKV + hkv
// serves the query heads bkv * group .. bkv * group + group - 1 (H = HKV * group).
constexpr int HEAD_GROUP = 4;  // heads whose key blocks are in flight together (4 x 32 blocks ~ one wave)

template <int HD, bool CAUSAL, bool GQA>
__device__ __forceinline__ void attn_bwd(const CUtensorMap* tmQ, const CUtensorMap* tmK, const CUtensorMap* tmV,
                                         const CUtensorMap* tmdO, const float* __restrict__ L2,
                                         const float* __restrict__ Dr, float* __restrict__ dQacc,
                                         __nv_bfloat16* __restrict__ dK, __nv_bfloat16* __restrict__ dV, int S, int D,
                                         float scale, int group) {
  constexpr int KT = HD / 64 * KSLAB, QT = HD / 64 * QSLAB;
  if (D > HD || D % 16 != 0 || S % BN != 0 || (GQA && group < 1)) asm volatile("trap;");  // this tiling only
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  uint8_t* sK = smem;
  uint8_t* sV = sK + KT;
  constexpr int STAGES = Stages<HD>::N;
  uint8_t* sQ = sV + KT;                 // STAGES x QT
  uint8_t* sdO = sQ + STAGES * QT;       // STAGES x QT
  uint8_t* sdS = sdO + STAGES * QT;      // DS_BUFS x DS_BYTES
  float* sL2 = reinterpret_cast<float*>(sdS + DS_BUFS * DS_BYTES);  // STAGES x 64
  float* sDr = sL2 + STAGES * BM;                              // STAGES x 64
  uint64_t* fullKV = reinterpret_cast<uint64_t*>(sDr + STAGES * BM);
  uint64_t* fullQ = fullKV + 1;
  uint64_t* fulldO = fullQ + STAGES;
  uint64_t* empty = fulldO + STAGES;
  uint64_t* dsReady = empty + STAGES;    // DS_BUFS: both consumers' dS^T rows of a block are in its buffer
  uint64_t* dsFree = dsReady + DS_BUFS;  // DS_BUFS: both consumers' dQ products have read the buffer
  uint64_t* kick = dsFree + DS_BUFS;     // consumer 0's first exponentials are done: consumer 1 may start

  const int wg = threadIdx.x / 128;
  const int t = threadIdx.x % 128;
  // Groups of HEAD_GROUP heads side by side, their key blocks longest-first across the group (blocks are handed
  // out in linear order): about one group is in flight, sharing its heads' Q / dO / dQ rows in L2, and causal
  // hands out every group's longest key blocks before its shorter ones.
  const int n_kb = gridDim.x, lin = blockIdx.x + n_kb * blockIdx.y;
  const int grp = lin / (HEAD_GROUP * n_kb), in_grp = lin % (HEAD_GROUP * n_kb);
  const int g_heads = min(HEAD_GROUP, static_cast<int>(gridDim.y) - grp * HEAD_GROUP);
  const int kb = in_grp / g_heads;        // key block
  const int bkv = grp * HEAD_GROUP + in_grp % g_heads;  // batch * KV head
  const int key0 = kb * BN;
  const int q_first = CAUSAL ? key0 / BM : 0;
  const int per_head = S / BM - q_first;  // query blocks per query head
  const int heads = GQA ? group : 1;
  const int n_iter = heads * per_head;
  const size_t kv_row = static_cast<size_t>(bkv) * S;

  if (threadIdx.x == 0) {
    mbar_init(fullKV, 1);
    for (int i = 0; i < STAGES; ++i) {
      mbar_init(&fullQ[i], 1);
      mbar_init(&fulldO[i], 1);
      mbar_init(&empty[i], 8);  // one arrival per consumer warp
    }
    for (int i = 0; i < DS_BUFS; ++i) {
      mbar_init(&dsReady[i], 8);
      mbar_init(&dsFree[i], 8);
    }
    mbar_init(kick, 4);
    mbar_fence_init();
  }
  __syncthreads();

  if (wg == 0) {
    setmaxnreg_dec<PRODUCER_REGS>();
    if (t == 0) {
      mbar_arrive_expect_tx(fullKV, 2 * KT);
#pragma unroll
      for (int s = 0; s < HD / 64; ++s) {
        tma_load_2d(sK + s * KSLAB, tmK, fullKV, 64 * s, static_cast<int>(kv_row) + key0);
        tma_load_2d(sV + s * KSLAB, tmV, fullKV, 64 * s, static_cast<int>(kv_row) + key0);
      }
      for (int it = 0; it < n_iter; ++it) {
        const int st = it % STAGES;
        const uint32_t ph = (it / STAGES) & 1;
        const int head = (GQA ? bkv * group : bkv) + it / per_head;
        const int q_row = head * S + (q_first + it % per_head) * BM;  // first row in the [B*H*S, D] view
        mbar_wait(&empty[st], ph ^ 1);  // a fresh barrier passes parity 1 at once
        mbar_arrive_expect_tx(&fullQ[st], QT + BM * 4);
#pragma unroll
        for (int s = 0; s < HD / 64; ++s) tma_load_2d(sQ + st * QT + s * QSLAB, tmQ, &fullQ[st], 64 * s, q_row);
        bulk_load(sL2 + st * BM, L2 + q_row, BM * 4, &fullQ[st]);
        mbar_arrive_expect_tx(&fulldO[st], QT + BM * 4);
#pragma unroll
        for (int s = 0; s < HD / 64; ++s) tma_load_2d(sdO + st * QT + s * QSLAB, tmdO, &fulldO[st], 64 * s, q_row);
        bulk_load(sDr + st * BM, Dr + q_row, BM * 4, &fulldO[st]);
      }
    }
  } else {
    setmaxnreg_inc<CONSUMER_REGS>();
    const int c = wg - 1;
    const float sl2 = scale * LOG2E;
    float dv[HD / 2], dk[HD / 2];
#pragma unroll
    for (int i = 0; i < HD / 2; ++i) {
      dv[i] = 0.f;
      dk[i] = 0.f;
    }
    mbar_wait(fullKV, 0);
    if (c == 1) mbar_wait(kick, 0);  // start half a block behind consumer 0: their phases interleave
    float* dq_prev = dQacc;
    int q0_prev = 0;
    for (int it = 0; it < n_iter; ++it) {
      const int st = it % STAGES;
      const int head = (GQA ? bkv * group : bkv) + it / per_head;
      const int q0 = (q_first + it % per_head) * BM;
      if (it > 0) consumer_dq<HD>(it - 1, q0_prev, c, t, sK, sdS, dsReady, dsFree, dq_prev, D);
      consumer_block<HD, CAUSAL>(it, q0, key0, c, t, sK, sV, sQ + st * QT, sdO + st * QT, sL2 + st * BM,
                                 sDr + st * BM, sdS, fullQ, fulldO, empty, dsReady, dsFree, dv, dk, sl2);
      if (it == 0 && c == 0 && t % 32 == 0) mbar_arrive(kick);
      dq_prev = dQacc + static_cast<size_t>(head) * S * D;
      q0_prev = q0;
    }
    consumer_dq<HD>(n_iter - 1, q0_prev, c, t, sK, sdS, dsReady, dsFree, dq_prev, D);  // the last block's
    wgmma_fence_regs(dv);
    wgmma_fence_regs(dk);
    // dv / dk element j: key 64c + r + 8 ((j / 2) % 2), column 8 (j / 4) + 2 (lane % 4) + j % 2
    const int lane = t % 32;
    const int r = 16 * (t / 32) + lane / 4;
    const size_t row0 = kv_row + key0 + 64 * c + r;
#pragma unroll
    for (int j = 0; j < HD / 2; j += 2) {
      const int d = 8 * (j / 4) + 2 * (lane % 4);
      if (d < D) {
        const size_t off = (row0 + 8 * ((j / 2) % 2)) * D + d;
        *reinterpret_cast<__nv_bfloat162*>(dV + off) = __floats2bfloat162_rn(dv[j], dv[j + 1]);
        *reinterpret_cast<__nv_bfloat162*>(dK + off) = __floats2bfloat162_rn(dk[j] * scale, dk[j + 1] * scale);
      }
    }
  }
}

// The entry points; each plan names one (attention.py fast_backward). The GQA one takes group = H / HKV.
extern "C" __global__ void __launch_bounds__(384, 1) attn_bwd_wgmma(
    const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmK,
    const __grid_constant__ CUtensorMap tmV, const __grid_constant__ CUtensorMap tmdO, const float* __restrict__ L2,
    const float* __restrict__ Dr, float* __restrict__ dQacc, __nv_bfloat16* __restrict__ dK,
    __nv_bfloat16* __restrict__ dV, int S, int D, float scale) {
  attn_bwd<128, false, false>(&tmQ, &tmK, &tmV, &tmdO, L2, Dr, dQacc, dK, dV, S, D, scale, 1);
}

extern "C" __global__ void __launch_bounds__(384, 1) attn_bwd_wgmma_causal(
    const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmK,
    const __grid_constant__ CUtensorMap tmV, const __grid_constant__ CUtensorMap tmdO, const float* __restrict__ L2,
    const float* __restrict__ Dr, float* __restrict__ dQacc, __nv_bfloat16* __restrict__ dK,
    __nv_bfloat16* __restrict__ dV, int S, int D, float scale) {
  attn_bwd<128, true, false>(&tmQ, &tmK, &tmV, &tmdO, L2, Dr, dQacc, dK, dV, S, D, scale, 1);
}

extern "C" __global__ void __launch_bounds__(384, 1) attn_bwd_wgmma_gqa(
    const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmK,
    const __grid_constant__ CUtensorMap tmV, const __grid_constant__ CUtensorMap tmdO, const float* __restrict__ L2,
    const float* __restrict__ Dr, float* __restrict__ dQacc, __nv_bfloat16* __restrict__ dK,
    __nv_bfloat16* __restrict__ dV, int S, int D, float scale, int group) {
  attn_bwd<128, false, true>(&tmQ, &tmK, &tmV, &tmdO, L2, Dr, dQacc, dK, dV, S, D, scale, group);
}

extern "C" __global__ void __launch_bounds__(384, 1) attn_bwd_wgmma_d64(
    const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmK,
    const __grid_constant__ CUtensorMap tmV, const __grid_constant__ CUtensorMap tmdO, const float* __restrict__ L2,
    const float* __restrict__ Dr, float* __restrict__ dQacc, __nv_bfloat16* __restrict__ dK,
    __nv_bfloat16* __restrict__ dV, int S, int D, float scale) {
  attn_bwd<64, false, false>(&tmQ, &tmK, &tmV, &tmdO, L2, Dr, dQacc, dK, dV, S, D, scale, 1);
}

extern "C" __global__ void __launch_bounds__(384, 1) attn_bwd_wgmma_d64_causal(
    const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmK,
    const __grid_constant__ CUtensorMap tmV, const __grid_constant__ CUtensorMap tmdO, const float* __restrict__ L2,
    const float* __restrict__ Dr, float* __restrict__ dQacc, __nv_bfloat16* __restrict__ dK,
    __nv_bfloat16* __restrict__ dV, int S, int D, float scale) {
  attn_bwd<64, true, false>(&tmQ, &tmK, &tmV, &tmdO, L2, Dr, dQacc, dK, dV, S, D, scale, 1);
}
extern "C" __global__ void __launch_bounds__(384, 1) attn_bwd_wgmma_d64_gqa(
    const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmK,
    const __grid_constant__ CUtensorMap tmV, const __grid_constant__ CUtensorMap tmdO, const float* __restrict__ L2,
    const float* __restrict__ Dr, float* __restrict__ dQacc, __nv_bfloat16* __restrict__ dK,
    __nv_bfloat16* __restrict__ dV, int S, int D, float scale, int group) {
  attn_bwd<64, false, true>(&tmQ, &tmK, &tmV, &tmdO, L2, Dr, dQacc, dK, dV, S, D, scale, group);
}
