// + head_groups (attention_bwd_variants.py): launched by groups of 4 heads, their key blocks longest-first across the group.
// VARIANT pair_d64_r40 (attention_bwd_variants.py): pair_d64 with the D = 64 kernels' registers split 40 / 232 (the writers' warpgroup at 40);
// pair_d64: writer_d96 with two writer warps in the D = 64 kernels, warp 1 + c reducing consumer c's dQ tiles (the 128-wide kernels keep one for both);
// writer_d96: dq_writer with the writer warp reducing the D = 96 kernels' dQ tiles too (their blocks publish as the 128-wide one does);
// dq_writer: late_d96 with the 128-wide block's dQ tiles reduced by a writer warp of the producer warpgroup (the consumers arrive and go on);
// late_d96: pre_plain with dq_late's block and causal_skip's dead block in the D = 96 entry points only;
// pre_plain: ds_stmatrix with pre_wide's preprocess (16-byte accesses, 16 lanes a row, four rows a warp) writing L2 / Dr row by row;
// ds_stmatrix: st_static with the 128-wide block's dS^T tile written by stmatrix.x4 (a quarter of the shared-memory store instructions);
// st_static: st_uniform with the dQ tile's width known to ptxas in the 128-wide block;
// st_uniform: st_ahead with the consumer index made warp-uniform for ptxas;
// st_ahead: tiles_d96 with each 128-wide block's S^T issued by the block before it, behind its dQ product;
// tiles_d96: q128_d64 with D = 96's S^T / dP^T over its own columns in entry points of its own and the 16-byte dK / dV epilogue (tiles_stack without the per-block branch);
// q128_d64: dq_tiles with 128 query rows per iteration at D = 64, each consumer's dQ over all keys for its own 64 rows;
// dq_tiles: bulk_dq_d64 with each consumer's dQ tile reduced on its own, swizzled, in dQacc's layout;
// bulk_dq_d64: bulk_dq_s3 with D = 64's dQ by bulk reductions too;
// bulk_dq_s3: dQ by one bulk reduction per query block, and a
// 3-deep Q / dO ring for the 128-wide kernels.
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
// (q128_d64) At D = 64 a query block is 128 rows: S^T and dP^T are m64n128 products, P^T dO and dS^T Q take 8 k16
// steps, dS^T is two 64-query slabs, consumer c computes the dQ of query rows 64c.. over all 128 keys, and causal
// starts at query block kb and masks that one block.
/* ptxbench
language = "cuda"

[[launch]]
kernel = "attn_bwd_pre"
grid = ["cdiv(B * H * S, 32)"]  # pre_wide: 32 rows a block
block = [256]
args = ["O", "dO", "LSE", "scratch:Dr", "scratch:L2", "scratch:dQacc", "i32:B * H * S", "i32:D"]

[[launch]]
kernel = "attn_bwd_wgmma"
grid = ["cdiv(S, 128)", "B * H"]  # the key blocks of one head side by side: they share its Q, dO, dQ in L2
block = [384]
smem = "1024 + 32768 * cdiv(D, 64) + (1 + cdiv(D, 64)) * (32768 + 512 * (3 - cdiv(D, 64))) + 32768 * (3 - cdiv(D, 64)) + 32768 + 256"  # slack, K, V, STAGES x (Q, dO, L2, Dr), 2 x dS^T, dQ, mbarriers (D = 64: 128 query rows)
args = ["tmap:Q_map", "tmap:K_map", "tmap:V_map", "tmap:dO_map", "scratch:L2", "scratch:Dr", "scratch:dQacc", "dK", "dV", "i32:S", "i32:D", "f32:scale"]

[[launch]]
kernel = "attn_bwd_post"
grid = ["cdiv(B * H * S * D, 1024)"]
block = [256]
args = ["scratch:dQacc", "dQ", "i32:B * H * S * D", "f32:scale", "i32:D"]

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
// Query rows per iteration: 64 for the 128-wide kernels, 128 at D = 64 (q128_d64: half the blocks, each consumer's
// dQ over all 128 keys for its own 64 query rows, so one reduce-add per 64 query rows instead of two), and the
// bytes of one dS^T buffer (128 keys x QR queries bf16, in 64-query slabs of 128 x 128 bytes).
template <int HD>
struct QRows {
  static constexpr int N = HD == 64 ? 128 : 64;
  static constexpr int DS = 128 * 2 * N;
};
// Q / dO ring depth: 3 for the 128-wide kernels (the shared memory allows it with the dQ buffer), 2 for D = 64.
template <int HD>
struct Stages {
  static constexpr int N = HD == 128 ? 3 : 2;
};
constexpr int PRODUCER_REGS = 24;
constexpr int CONSUMER_REGS = 240;
constexpr float LOG2E = 1.4426950408889634f;

// ---------------------------------------------------------------------------------------------------------
// attn_bwd_pre (pre_plain): per query row, Dr = rowsum(dO * O), L2 = LSE * log2(e), the fp32 dQ accumulator row
// zeroed; 16 lanes per row, lane ch of a half-warp the 16-byte chunk of columns 8 ch .. 8 ch + 7, four rows a warp.
extern "C" __global__ void __launch_bounds__(256) attn_bwd_pre(
    const __nv_bfloat16* __restrict__ O, const __nv_bfloat16* __restrict__ dO, const float* __restrict__ LSE,
    float* __restrict__ Dr, float* __restrict__ L2, float* __restrict__ dQacc, int rows, int D) {
  const int lane = threadIdx.x % 32, ch = lane % 16;
  const int first = 4 * (blockIdx.x * 8 + threadIdx.x / 32) + lane / 16;  // this half-warp's rows: first, first + 2
  uint4 ov[2], gv[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {  // both rows' loads before either's arithmetic
    const int row = first + 2 * i;
    ov[i] = gv[i] = make_uint4(0u, 0u, 0u, 0u);
    if (row < rows && 8 * ch < D) {
      ov[i] = *reinterpret_cast<const uint4*>(O + static_cast<size_t>(row) * D + 8 * ch);
      gv[i] = *reinterpret_cast<const uint4*>(dO + static_cast<size_t>(row) * D + 8 * ch);
    }
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int row = first + 2 * i;
    const __nv_bfloat162* o = reinterpret_cast<const __nv_bfloat162*>(&ov[i]);
    const __nv_bfloat162* g = reinterpret_cast<const __nv_bfloat162*>(&gv[i]);
    float sum = 0.f;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float2 a = __bfloat1622float2(o[k]), b = __bfloat1622float2(g[k]);
      sum = fmaf(a.x, b.x, fmaf(a.y, b.y, sum));
    }
    if (row < rows && 8 * ch < D) {
      float4* acc = reinterpret_cast<float4*>(dQacc + static_cast<size_t>(row) * D + 8 * ch);
      acc[0] = make_float4(0.f, 0.f, 0.f, 0.f);
      acc[1] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
#pragma unroll
    for (int m = 8; m > 0; m >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, m);  // the row's 16 lanes
    const int prow = row;  // pre_plain: the rows' own order
    if (ch == 0 && row < rows) {
      Dr[prow] = sum;
      L2[prow] = LSE[row] * LOG2E;
    }
  }
}

// attn_bwd_post: dQ = bf16(scale * acc), four elements per thread. acc is in the main kernel's tile layout: per
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
  const float4 v = *reinterpret_cast<const float4*>(dQacc + src);
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

// Shared-memory accesses by 32-bit shared addresses (the generic ones cost an address-space check each).
__device__ __forceinline__ float2 lds64(const float* p) {
  float2 v;
  asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(v.x), "=f"(v.y) : "r"(smem_u32(p)));
  return v;
}
__device__ __forceinline__ void sts32(const void* p, uint32_t v) {
  asm volatile("st.shared.b32 [%0], %1;" :: "r"(smem_u32(p)), "r"(v) : "memory");
}
// ds_stmatrix: four 8 x 8 bf16 matrices from a warp's registers (a, b, c, d: matrices 0-3), lane l addressing
// row l % 8 of matrix l / 8
__device__ __forceinline__ void stmatrix_x4(const void* p, uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" :: "r"(smem_u32(p)), "r"(a), "r"(b),
               "r"(c), "r"(d) : "memory");
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
// dq_writer: a named barrier this warp passes without waiting for the others
__device__ __forceinline__ void named_barrier_arrive(uint32_t id, uint32_t threads) {
  asm volatile("bar.arrive %0, %1;" :: "r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }

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

// X^T = A_c B^T for this consumer's 64 keys (A = K or V rows, 128-row slabs) against the N (64, or 128 at D = 64)
// query rows of B (Q or dO): HD / 16 k16 steps over d, the first overwriting X. Inside a 128-byte swizzle
// row a k16 step is 32 bytes further (+2 in 16-byte units); steps 4..7 read the second d slab.
template <int HD, int N = 64, int KD = HD>
__device__ __forceinline__ void issue_nt(float (&x)[N / 2], const uint8_t* a, const uint8_t* b) {
  const uint64_t da = make_desc_sw128(a), db = make_desc_sw128(b);
#pragma unroll
  for (int kk = 0; kk < KD / 16; ++kk) {
    wgmma_m64k16_bf16<N>(x, da + (kk / 4) * (KSLAB >> 4) + 2 * (kk % 4), db + (kk / 4) * (QSLAB >> 4) + 2 * (kk % 4),
                          kk != 0);
  }
}

// acc += X^T B: X^T (64 keys x N queries) from registers, B = the N x HD Q or dO tile, N-major: N / 16 k16
// steps over the queries, each two 8-row atoms (2 KiB) further into every d slab (LBO = one 64-row slab).
template <int HD, int N = 64>
__device__ __forceinline__ void issue_tn(float (&acc)[HD / 2], const uint32_t (&x)[N / 4], const uint8_t* b) {
  const uint64_t db = desc_mn(b, QSLAB);
#pragma unroll
  for (int kk = 0; kk < N / 16; ++kk) wgmma_rs(acc, x[4 * kk], x[4 * kk + 1], x[4 * kk + 2], x[4 * kk + 3], db + kk * (2048 >> 4));
}

// One query block for one consumer. Accumulator element j of this thread: row (key) r + 8 ((j / 2) % 2) of
// the consumer's 64, column (query) 8 (j / 4) + 2 (lane % 4) + j % 2 of the block.
// KD: the d extent S^T and dP^T run over (d96_ksteps: 96 at D = 96, whose d 96..127 are TMA's zero fill, so
// their two k16 steps are skipped; dV, dK and dQ keep the 128-wide tiles).
template <int HD, bool CAUSAL, int KD = HD>
__device__ __forceinline__ void consumer_block(int it, int q0, int key0, int c, int t, const uint8_t* sK,
                                               const uint8_t* sV, const uint8_t* sQ, const uint8_t* sdO,
                                               const float* sL2, const float* sDr, uint8_t* sdS, uint64_t* fullQ,
                                               uint64_t* fulldO, uint64_t* empty, float (&dv)[HD / 2],
                                               float (&dk)[HD / 2], float* __restrict__ dq_rows, int D, float sl2,
                                               float* sdQ, bool issuer) {
  const int st = it % Stages<HD>::N;
  const uint32_t ph = (it / Stages<HD>::N) & 1;
  const int lane = t % 32;
  const int r = 16 * (t / 32) + lane / 4;  // this thread's keys r and r + 8 of the consumer's 64
  const int col0 = 2 * (lane % 4);
  constexpr int QR = QRows<HD>::N;  // query rows of the block
  float s[QR / 2], p[QR / 2];
  uint32_t pp[QR / 4], ds[QR / 4];

  mbar_wait(&fullQ[st], ph);
  wgmma_fence();
  issue_nt<HD, QR, KD>(s, sK + c * 64 * 128, sQ);  // S^T = K_c Q^T
  wgmma_commit();
  mbar_wait(&fulldO[st], ph);
  issue_nt<HD, QR, KD>(p, sV + c * 64 * 128, sdO); // dP^T = V_c dO^T
  wgmma_commit();
  wgmma_wait<1>();
  wgmma_fence_regs(s);
  const bool mask = CAUSAL && q0 < key0 + BN;  // the query blocks that cross the diagonal (D = 64: the one)
  // the QR / 4 query columns of this thread: pairs (8a + col0, + 1), a = 0..QR / 8 - 1, for L2 and Dr
  float2 l2[QR / 8], dr[QR / 8];
#pragma unroll
  for (int a = 0; a < QR / 8; ++a) l2[a] = lds64(sL2 + 8 * a + col0);
#pragma unroll
  for (int j = 0; j < QR / 2; ++j) {
    const int q = 8 * (j / 4) + col0 + (j % 2);
    float e = ex2(fmaf(s[j], sl2, -(j % 2 ? l2[j / 4].y : l2[j / 4].x)));
    if (mask && key0 + 64 * c + r + 8 * ((j / 2) % 2) > q0 + q) e = 0.f;
    s[j] = e;
  }
  wgmma_wait<0>();
  wgmma_fence_regs(p);
#pragma unroll
  for (int a = 0; a < QR / 8; ++a) dr[a] = lds64(sDr + 8 * a + col0);
#pragma unroll
  for (int j = 0; j < QR / 2; ++j) p[j] = s[j] * (p[j] - (j % 2 ? dr[j / 4].y : dr[j / 4].x));
#pragma unroll
  for (int i = 0; i < QR / 4; ++i) {
    pp[i] = pack_bf16(s[2 * i], s[2 * i + 1]);
    ds[i] = pack_bf16(p[2 * i], p[2 * i + 1]);
  }
  wgmma_fence();
  issue_tn<HD, QR>(dv, pp, sdO);  // dV += P^T dO
  issue_tn<HD, QR>(dk, ds, sQ);   // dK += dS^T Q
  wgmma_commit();

  // dS^T to shared memory: row = key (64c + r [+ 8]), 64 queries per 128-byte row (D = 64: two such slabs of
  // 128 rows, queries 0..63 and 64..127), 16-byte chunks swizzled by the row's position in its 8-row atom (what
  // TMA writes for a 128B-swizzled box).
  uint8_t* buf = sdS + (it & 1) * QRows<HD>::DS;
#pragma unroll
  for (int i = 0; i < QR / 4; ++i) {
    const int row = 64 * c + r + 8 * (i % 2), q = 8 * (i / 2) + col0;
    sts32(buf + (q / 64) * (128 * 128) + row * 128 + ((((q % 64) / 8) ^ (row % 8)) * 16) + (q % 8) * 2, ds[i]);
  }
  fence_proxy_async();
  if (t == 0) bulk_wait_read();  // pair_d64: nothing of this thread's in flight; kept for ptxas (see above)
  named_barrier_sync(1, 256);  // both consumers' dS^T rows are in `buf`

  // dQ_partial = dS K over all 128 keys: HD = 128: the block's 64 query rows, columns 64c..; HD = 64: query rows
  // 64c.. of the 128 (dS^T slab c), all 64 columns.
  float dq[32];
  const uint8_t* kbase = sK + (HD == 128 ? c * KSLAB : 0);
  const uint64_t da = desc_mn(buf + (HD == 128 ? 0 : c * 128 * 128), 0), dbk = desc_mn(kbase, 0);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 8; ++kk) wgmma_ss_tt(dq, da + kk * (2048 >> 4), dbk + kk * (2048 >> 4), kk != 0);
  wgmma_commit();
  wgmma_wait<0>();
  wgmma_fence_regs(dq);
  fence_u32(pp);
  fence_u32(ds);
  if (lane == 0) mbar_arrive(&empty[st]);  // this warp is done with Q, dO, L2, Dr of the stage

  // dq element j: query row r + 8 ((j / 2) % 2) (+ 64c for HD = 64), column 8 (j / 4) + col0 + j % 2 (+ 64c for
  // HD = 128). This consumer's partial into its own tile, reduced by its thread 0 without waiting for the other
  // consumer. The tile has dQacc's layout (attn_bwd_post reads it back): HD = 128: consumer c's columns 64c.. (W =
  // min(64, D - 64c) wide), 64 x 64c floats into the block's rows; HD = 64: all 64 columns of query rows 64c..
  // Rows W floats long, 32-byte group g of row `row` at g ^ (row % (W / 8)):
  // a warp's 8 rows of one group land on 8 different groups of banks.
  const int W = HD == 128 ? min(64, D - 64 * c) : 64, sw = W / 8 - 1;
  float* tile = sdQ + c * BM * 64;
  named_barrier_sync(7 + c, 160);  // pair_d64: this consumer's writer has read its previous tile
#pragma unroll
  for (int j = 0; j < 32; j += 2) {
    const int g = j / 4, row = r + 8 * ((j / 2) % 2);
    if (8 * g < W) sts64(tile + row * W + 8 * (g ^ (row & sw)) + col0, dq[j], dq[j + 1]);
  }
  fence_proxy_async();
  named_barrier_arrive(5 + c, 160);  // pair_d64: the tile is this consumer's writer's to reduce
}

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

// st_ahead: one 128-wide block whose S^T was issued before (by the previous block, or before the loop) into `s`,
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
  {  // ds_stmatrix: the tile by four stmatrix.x4 (matrices: rows +0 / +8 x column groups 2 g / 2 g + 1)
    const int row = 64 * c + 16 * (t / 32) + lane % 8 + 8 * ((lane / 8) % 2);  // the row this lane addresses
#pragma unroll
    for (int g = 0; g < 4; ++g)
      stmatrix_x4(buf + row * 128 + (((2 * g + lane / 16) ^ (row % 8)) * 16), ds[4 * g], ds[4 * g + 1], ds[4 * g + 2],
                  ds[4 * g + 3]);
  }
  fence_proxy_async();
  if constexpr (KD != 128) {  // dq_writer: at KD = 128 the writer warp waits for the reads
    if (t == 0) bulk_wait_read();  // this consumer's previous dQ reduction has read its tile
  }
  named_barrier_sync(1, 256);    // both consumers' dS^T rows are in `buf`
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
  const int W = KD == 128 || c == 0 ? 64 : 32;  // D = 128: both halves 64 wide; D = 96: 64 and 32 (dq_static)
  float* tile = sdQ + c * BM * 64;
  if constexpr (KD == 128)  // dq_writer: the writer warp has read this consumer's previous tile
    named_barrier_sync(7 + c, 160);
  if (W == 64) store_dq_tile<64>(tile, dq, r, col0);
  else store_dq_tile<32>(tile, dq, r, col0);
  fence_proxy_async();
  if constexpr (KD == 128) {  // dq_writer: the tile is the writer warp's to reduce
    named_barrier_arrive(5 + c, 160);
  } else {  // no writer in these kernels: the reference's publication
    named_barrier_sync(3 + c, 128);  // this consumer's rows are in its tile
    if (t == 0) bulk_reduce_add(dq_rows + static_cast<size_t>(q0) * D + 64 * 64 * c, tile, BM * W * 4);
  }
}

// late_d96: consumer_block_pf with dq_late's publication of the dQ tile and causal_skip's dQ product
template <int HD, bool CAUSAL, int KD>
__device__ __forceinline__ void consumer_block_late(int it, bool has_next, int q0, int key0, int c, int t,
                                                  const uint8_t* sK, const uint8_t* sV, const uint8_t* sQ0,
                                                  const uint8_t* sdO0, const float* sL20, const float* sDr0,
                                                  uint8_t* sdS, uint64_t* fullQ, uint64_t* fulldO, uint64_t* empty,
                                                  float (&s)[32], float (&dv)[64], float (&dk)[64],
                                                  float* __restrict__ dq_rows, int D, float sl2, float* sdQ,
                                                  float*& pending) {  // dq_late: the last tile's destination
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
  {  // ds_stmatrix: the tile by four stmatrix.x4 (matrices: rows +0 / +8 x column groups 2 g / 2 g + 1)
    const int row = 64 * c + 16 * (t / 32) + lane % 8 + 8 * ((lane / 8) % 2);  // the row this lane addresses
#pragma unroll
    for (int g = 0; g < 4; ++g)
      stmatrix_x4(buf + row * 128 + (((2 * g + lane / 16) ^ (row % 8)) * 16), ds[4 * g], ds[4 * g + 1], ds[4 * g + 2],
                  ds[4 * g + 3]);
  }
  // dq_late: this fence also covers this consumer's dQ tile of the previous block
  fence_proxy_async();
  named_barrier_sync(1, 256);    // both consumers' dS^T rows are in `buf`, and each one's previous dQ tile in sdQ
  const int W = KD == 128 || c == 0 ? 64 : 32;  // D = 128: both halves 64 wide; D = 96: 64 and 32 (dq_static)
  float* tile = sdQ + c * BM * 64;
  wgmma_wait<0>();               // dV and dK are done: pp, ds and this stage's Q / dO are free
  fence_u32(pp);
  fence_u32(ds);
  if (lane == 0) mbar_arrive(&empty[st]);

  float dq[32];
  const uint64_t da = desc_mn(buf, 0), dbk = desc_mn(sK + c * KSLAB, 0);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) wgmma_ss_tt(dq, da + kk * (2048 >> 4), dbk + kk * (2048 >> 4), kk != 0);
  if (!CAUSAL || q0 > key0) {  // causal_skip: keys 64.. of the block, unless no row of it sees them (consumer 1 skipped)
#pragma unroll
    for (int kk = 4; kk < 8; ++kk) wgmma_ss_tt(dq, da + kk * (2048 >> 4), dbk + kk * (2048 >> 4), true);
  }
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
  named_barrier_sync(7 + c, 160);  // writer_d96: the writer warp has read this consumer's previous tile
  if (W == 64) store_dq_tile<64>(tile, dq, r, col0);
  else store_dq_tile<32>(tile, dq, r, col0);
  fence_proxy_async();
  named_barrier_arrive(5 + c, 160);  // writer_d96: the tile is the writer warp's to reduce
}

// causal_skip: consumer 1's first block of a causal key block. Its keys are past every query row of the block (P = dS
// = 0), so it has no S^T, dP^T, exponentials, dV / dK or dS^T rows; it meets consumer 0 on the block's barrier,
// releases the stage and adds its dQ column half over consumer 0's keys, as consumer_block_pf's tail does.
template <int HD, bool CAUSAL, int KD>
__device__ __forceinline__ void consumer_block_dead(bool has_next, int q0, int c, int t, const uint8_t* sK,
                                                    const uint8_t* sQ0, uint8_t* sdS, uint64_t* fullQ,
                                                    uint64_t* fulldO, uint64_t* empty, float (&s)[32],
                                                    float* __restrict__ dq_rows, int D, float* sdQ, float*& pending) {
  constexpr int NS = Stages<HD>::N, QT = 2 * QSLAB;
  const int lane = t % 32;
  mbar_wait(&fulldO[0], 0);    // as the live block: the stage's phases stay in step for both consumers
  // dq_late's publication (nothing is pending before the first block)
  fence_proxy_async();
  named_barrier_sync(1, 256);  // consumer 0's dS^T rows are in buffer 0
  const int W = KD == 128 || c == 0 ? 64 : 32;
  float* tile = sdQ + c * BM * 64;
  if (lane == 0) mbar_arrive(&empty[0]);

  float dq[32];
  const uint64_t da = desc_mn(sdS, 0), dbk = desc_mn(sK + c * KSLAB, 0);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) wgmma_ss_tt(dq, da + kk * (2048 >> 4), dbk + kk * (2048 >> 4), kk != 0);
  wgmma_commit();
  if (has_next) {  // the next block's S^T, behind dQ in the tensor pipe
    mbar_wait(&fullQ[1 % NS], (1 / NS) & 1);
    issue_nt<HD, 64, KD>(s, sK + c * 64 * 128, sQ0 + (1 % NS) * QT);
    wgmma_commit();
    wgmma_wait<1>();
  } else {
    wgmma_wait<0>();
  }
  wgmma_fence_regs(dq);
  named_barrier_sync(7 + c, 160);  // writer_d96: the writer's first arrival (the tile is free)
  const int r = 16 * (t / 32) + lane / 4, col0 = 2 * (lane % 4);  // this thread's rows and first column
  if (W == 64) store_dq_tile<64>(tile, dq, r, col0);
  else store_dq_tile<32>(tile, dq, r, col0);
  fence_proxy_async();
  named_barrier_arrive(5 + c, 160);  // writer_d96: the tile is the writer warp's to reduce
}

// The dK / dV epilogue in 16-byte stores (own_keys_wide, dq_tiles_wide). acc element j: row r + 8 ((j / 2) % 2), column
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

// HD: 128 (D = 96 or 128) or 64. GQA: K, V, dK, dV have B * HKV heads; the CTA of KV row bkv = b * HKV + hkv
// serves the query heads bkv * group .. bkv * group + group - 1 (H = HKV * group).
constexpr int HEAD_GROUP = 4;  // heads whose key blocks are in flight together (4 x 32 blocks ~ one wave)

template <int HD, bool CAUSAL, bool GQA, int KD = HD>  // KD: S^T / dP^T's d extent (96 in D = 96's entries)
__device__ __forceinline__ void attn_bwd(const CUtensorMap* tmQ, const CUtensorMap* tmK, const CUtensorMap* tmV,
                                         const CUtensorMap* tmdO, const float* __restrict__ L2,
                                         const float* __restrict__ Dr, float* __restrict__ dQacc,
                                         __nv_bfloat16* __restrict__ dK, __nv_bfloat16* __restrict__ dV, int S, int D,
                                         float scale, int group) {
  constexpr int QR = QRows<HD>::N;  // query rows per iteration
  constexpr int KT = HD / 64 * KSLAB, QT = 2 * QSLAB;  // a Q / dO tile: HD = 128 two d slabs, HD = 64 two row halves
  if (D > HD || D % 16 != 0 || S % BN != 0 || (GQA && group < 1) || (HD == 128 && KD == 128 && D != 128))
    asm volatile("trap;");  // this tiling only
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  uint8_t* sK = smem;
  uint8_t* sV = sK + KT;
  uint8_t* sQ = sV + KT;                 // Stages<HD>::N x QT
  uint8_t* sdO = sQ + Stages<HD>::N * QT;       // Stages<HD>::N x QT
  uint8_t* sdS = sdO + Stages<HD>::N * QT;      // 2 x QRows<HD>::DS
  float* sdQ = reinterpret_cast<float*>(sdS + 2 * QRows<HD>::DS);  // HD = 128: 64 x D fp32
  float* sL2 = sdQ + BM * 128;  // dQ: HD = 128 one [64][D] tile, HD = 64 one [64][64] tile per consumer
  float* sDr = sL2 + Stages<HD>::N * QR;                              // Stages<HD>::N x QR
  uint64_t* fullKV = reinterpret_cast<uint64_t*>(sDr + Stages<HD>::N * QR);
  uint64_t* fullQ = fullKV + 1;
  uint64_t* fulldO = fullQ + Stages<HD>::N;
  uint64_t* empty = fulldO + Stages<HD>::N;

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
  const int q_first = CAUSAL ? key0 / QR : 0;
  const int per_head = S / QR - q_first;  // query blocks per query head
  const int heads = GQA ? group : 1;
  const int n_iter = heads * per_head;
  const size_t kv_row = static_cast<size_t>(bkv) * S;

  if (threadIdx.x == 0) {
    mbar_init(fullKV, 1);
    for (int i = 0; i < Stages<HD>::N; ++i) {
      mbar_init(&fullQ[i], 1);
      mbar_init(&fulldO[i], 1);
      mbar_init(&empty[i], 8);  // one arrival per consumer warp
    }
    mbar_fence_init();
  }
  __syncthreads();

  if (wg == 0) {
    setmaxnreg_dec<HD == 64 ? 40 : PRODUCER_REGS>();  // regs_d64: the writers' warpgroup at 40
    if (t == 0) {
      mbar_arrive_expect_tx(fullKV, 2 * KT);
#pragma unroll
      for (int s = 0; s < HD / 64; ++s) {
        tma_load_2d(sK + s * KSLAB, tmK, fullKV, 64 * s, static_cast<int>(kv_row) + key0);
        tma_load_2d(sV + s * KSLAB, tmV, fullKV, 64 * s, static_cast<int>(kv_row) + key0);
      }
      // dq_writer: in the writer's kernels the first row is stepped block by block (the division by per_head
      // spilled at 24 registers beside the writer); the next head starts again at q_first
      [[maybe_unused]] int next_row = (GQA ? bkv * group : bkv) * S + q_first * QR, in_head = 0;
      for (int it = 0; it < n_iter; ++it) {
        const int st = it % Stages<HD>::N;
        const uint32_t ph = (it / Stages<HD>::N) & 1;
        const int q_row = HD == 128 ? next_row  // first row in the [B*H*S, D] view (writer_d96: KD = 96 too)
                        : ((GQA ? bkv * group : bkv) + it / per_head) * S + (q_first + it % per_head) * QR;
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
        bulk_load(sDr + st * QR, Dr + q_row, QR * 4, &fulldO[st]);
        if constexpr (HD == 128) {
          next_row += QR;
          if (++in_head == per_head) {
            in_head = 0;
            next_row += q_first * QR;
          }
        }
      }
    } else if (t / 32 == 1 || (HD == 64 && t / 32 == 2)) {  // dq_writer: the consumers' dQ tiles, reduced (writer_d96: KD = 96 too; pair_d64: at D = 64 warp 1 + c serves consumer c alone)
      constexpr int NC = HD == 128 ? 2 : 1;  // the consumers one writer warp serves
      const int c0 = HD == 128 ? 0 : t / 32 - 1;  // its first
      const bool issuer = t == 32 * (c0 + 1);
      if (n_iter > 0) {  // its tiles are free for the first block (no arrival a consumer never meets)
#pragma unroll
        for (int c = c0; c < c0 + NC; ++c) named_barrier_arrive(7 + c, 160);
      }
      // this block's dQ rows; a head's blocks are consecutive, and the next head starts again at q_first
      float* rows = dQacc + static_cast<size_t>(GQA ? bkv * group : bkv) * S * D
                  + static_cast<size_t>(q_first * QR) * D;
      for (int it = 0, in_head = 0; it < n_iter; ++it) {
#pragma unroll
        for (int c = c0; c < c0 + NC; ++c) {
          named_barrier_sync(5 + c, 160);  // consumer c's tile is stored and fenced
          if (issuer) {
            bulk_reduce_add(rows + 64 * 64 * c, sdQ + c * BM * 64, BM * (KD == 96 && c == 1 ? 32 : 64) * 4);
            bulk_wait_read();  // the reduction has read the tile
          }
          __syncwarp();
          if (it + 1 < n_iter) named_barrier_arrive(7 + c, 160);  // the tile is free (none after the last)
        }
        rows += static_cast<size_t>(QR) * D;
        if (++in_head == per_head) {
          in_head = 0;
          rows += static_cast<size_t>(q_first * QR) * D;
        }
      }
      if (issuer) bulk_wait_all();  // the last reductions are done before the CTA leaves
    }
  } else {
    setmaxnreg_inc<HD == 64 ? 232 : CONSUMER_REGS>();  // regs_d64: 40 x 128 + 232 x 256 = the pool
    const int c = HD == 128 ? __shfl_sync(0xffffffffu, wg - 1, 0) : wg - 1;  // warp-uniform to ptxas: descriptors in uniform registers
    const float sl2 = scale * LOG2E;
    float dv[HD / 2], dk[HD / 2];
#pragma unroll
    for (int i = 0; i < HD / 2; ++i) {
      dv[i] = 0.f;
      dk[i] = 0.f;
    }
    mbar_wait(fullKV, 0);
    if constexpr (HD == 128) {  // st_ahead: each block's S^T issued by the block before it
      float s[32];
      mbar_wait(&fullQ[0], 0);
      constexpr bool LATE = KD == 96;  // late_d96: dq_late's block and the dead causal block at D = 96 only
      if (!(LATE && CAUSAL) || c == 0) {  // D = 96 causal: consumer 1's first block is dead
        wgmma_fence();
        issue_nt<HD, 64, KD>(s, sK + c * 64 * 128, sQ);  // S^T of the first block
        wgmma_commit();
      }
      [[maybe_unused]] float* pending = nullptr;  // dq_late: where this consumer's dQ tile in sdQ is still to be added
      int it = 0;
      if constexpr (LATE && CAUSAL) {
        if (c == 1 && n_iter > 0) {  // the first block (q0 = key0) sees none of consumer 1's keys
          consumer_block_dead<HD, CAUSAL, KD>(n_iter > 1, q_first * QR, c, t, sK, sQ, sdS, fullQ, fulldO, empty, s,
                                              dQacc + static_cast<size_t>(GQA ? bkv * group : bkv) * S * D, D, sdQ,
                                              pending);
          it = 1;
        }
      }
      for (; it < n_iter; ++it) {
        const int head = (GQA ? bkv * group : bkv) + it / per_head;
        const int q0 = (q_first + it % per_head) * QR;
        if constexpr (LATE)
          consumer_block_late<HD, CAUSAL, KD>(it, it + 1 < n_iter, q0, key0, c, t, sK, sV, sQ, sdO, sL2, sDr, sdS,
                                              fullQ, fulldO, empty, s, dv, dk,
                                              dQacc + static_cast<size_t>(head) * S * D, D, sl2, sdQ, pending);
        else
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
    if (threadIdx.x == 128 || threadIdx.x == 256) bulk_wait_all();  // each consumer's last reductions are done
    wgmma_fence_regs(dv);
    wgmma_fence_regs(dk);
    // dv / dk element j: key 64c + r + 8 ((j / 2) % 2), column 8 (j / 4) + 2 (lane % 4) + j % 2
    const int lane = t % 32;
    const int r = 16 * (t / 32) + lane / 4;
    const size_t row0 = kv_row + key0 + 64 * c + r;
    store_rows16(dV, dv, 1.f, row0, D, lane);  // 16-byte stores: whole sectors (the wide epilogue)
    store_rows16(dK, dk, scale, row0, D, lane);
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

// D = 96: the 128-wide kernel with S^T and dP^T over d 0..95 (d 96..127 are TMA's zero fill).
extern "C" __global__ void __launch_bounds__(384, 1) attn_bwd_wgmma_d96(
    const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmK,
    const __grid_constant__ CUtensorMap tmV, const __grid_constant__ CUtensorMap tmdO, const float* __restrict__ L2,
    const float* __restrict__ Dr, float* __restrict__ dQacc, __nv_bfloat16* __restrict__ dK,
    __nv_bfloat16* __restrict__ dV, int S, int D, float scale) {
  attn_bwd<128, false, false, 96>(&tmQ, &tmK, &tmV, &tmdO, L2, Dr, dQacc, dK, dV, S, D, scale, 1);
}

extern "C" __global__ void __launch_bounds__(384, 1) attn_bwd_wgmma_d96_causal(
    const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmK,
    const __grid_constant__ CUtensorMap tmV, const __grid_constant__ CUtensorMap tmdO, const float* __restrict__ L2,
    const float* __restrict__ Dr, float* __restrict__ dQacc, __nv_bfloat16* __restrict__ dK,
    __nv_bfloat16* __restrict__ dV, int S, int D, float scale) {
  attn_bwd<128, true, false, 96>(&tmQ, &tmK, &tmV, &tmdO, L2, Dr, dQacc, dK, dV, S, D, scale, 1);
}

extern "C" __global__ void __launch_bounds__(384, 1) attn_bwd_wgmma_d96_gqa(
    const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmK,
    const __grid_constant__ CUtensorMap tmV, const __grid_constant__ CUtensorMap tmdO, const float* __restrict__ L2,
    const float* __restrict__ Dr, float* __restrict__ dQacc, __nv_bfloat16* __restrict__ dK,
    __nv_bfloat16* __restrict__ dV, int S, int D, float scale, int group) {
  attn_bwd<128, false, true, 96>(&tmQ, &tmK, &tmV, &tmdO, L2, Dr, dQacc, dK, dV, S, D, scale, group);
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
