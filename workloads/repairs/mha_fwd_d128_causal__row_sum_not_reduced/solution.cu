// Hopper (sm_90a) attention forward: O = softmax(scale * Q K^T) V and the natural-log LSE, with TMA +
// wgmma in the FlashAttention-3 "v2" style (no ping-pong scheduling). One template attn_fwd<HD, CAUSAL, GQA>,
// six entry points: attn_fwd_wgmma, attn_fwd_wgmma_causal (top-left aligned, key j <= query i) and
// attn_fwd_wgmma_gqa for D = 128; attn_fwd_wgmma_d64, attn_fwd_wgmma_d64_causal and attn_fwd_wgmma_d64_gqa
// for D = 64. Each plan names one: this file's plan is the D = 128 non-causal one, and the other workloads'
// solutions are this file with a few plan lines changed (workloads/solutions/attention.py fast_solution).
//
// Specialised for D = 128 or 64 and S a multiple of 128 (the kernel traps otherwise). One CTA per
// (128 query rows, batch*head); 384 threads = 3 warpgroups:
//   * warpgroup 0, the producer (setmaxnreg 24): one thread loads the 128 x D Q tile once, then
//     streams 128-key K and V tiles into a STAGES-deep ring (2 for D = 128, 4 for D = 64) with TMA
//     (128B swizzle: each tile is D / 64 slabs of 128 rows x 64 d, 16 KiB each), guarded by full /
//     empty mbarriers, K and V separately so that S = Q K^T can start before V has landed.
//   * warpgroups 1 and 2, the consumers (setmaxnreg 240): each owns 64 query rows.
//     S = Q K^T   : D / 16 x wgmma m64n128k16, A = Q and B = K from shared memory, both K-major (d
//                   contiguous), exactly as the reference GEMM.
//     softmax     : online (FlashAttention recurrence) in registers, base-2 exponentials with
//                   scale*log2(e) folded in; a thread holds rows r and r+8 of its warp's 16, row
//                   max reduced over the quad (shfl.xor 1, 2); the row sum stays per thread until
//                   the end (the running max is quad-uniform, so partial sums rescale alike).
//     O += P V    : 8 x wgmma m64nDk16 with A = P from registers (the fp32 S accumulator
//                   fragment of a k16 slice is exactly the bf16 A fragment once packed in pairs)
//                   and B = V from shared memory, which is N-major (d contiguous) -> imm-trans-b = 1
//                   and an MN-major descriptor (SBO = 1 KiB between 8-key groups; LBO = 16 KiB
//                   between the two 64-wide d slabs for D = 128, never applied for D = 64's one slab).
//   Within a consumer, S_j = Q K_j^T and O += P_{j-1} V_{j-1} are issued back to back; the softmax
//   of S_j runs while the P V product is still in flight, and only the O rescale waits for it.
//   The two consumer warpgroups are not synchronised with each other, so one's softmax overlaps
//   the other's tensor-core work.
// Epilogue: O / l stored as bf16 straight from registers; LSE = m * ln 2 + ln(l).
// Causal: a CTA visits only the key tiles up to its diagonal one (BM = BN, so tile index = query tile)
// and masks inside that one (peeled off the main loop); query tiles are handed out longest first.
// GQA (the _gqa entry points, an extra `group` = H / HKV argument): K and V are [B, HKV, S, D], their
// tensor maps cover B * HKV * S rows, and the CTA of row bh = b * H + h of Q reads K / V head
// bh / group = b * HKV + h / group (one integer divide per CTA, in the producer).
// H200, harness timing (cold L2): mha_fwd_d128 2.699 ms = 1.02x cuDNN (611 TFLOP/s); causal 1.50 ms = 0.99x.
/* ptxbench
language = "cuda"

[[launch]]
kernel = "attn_fwd_wgmma_causal"
grid = ["cdiv(S, 128)", "B * H"]
block = [384]
smem = "1024 + 32768 * 5 + 256"  # 1 KiB alignment slack, Q, STAGES = 2 x (K, V) tiles, mbarriers
args = ["tmap:Q_map", "tmap:K_map", "tmap:V_map", "O", "LSE", "i32:S", "i32:D", "f32:scale"]

[tmap.Q_map]
tensor = "Q"
dims = ["D", "B * H * S"]
box = [64, 128]
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
*/
#include <cuda.h>
#include <cuda_bf16.h>
#include <stdint.h>

#include "ptxbench/wgmma.cuh"
#include "ptxbench/tma.cuh"
#include "ptxbench/mbarrier.cuh"

using namespace ptxbench;  // mbar_*, tma_load_2d, make_desc_sw128, wgmma_* (prompts/include/ptxbench)

constexpr int BM = 128;          // query rows per CTA (64 per consumer warpgroup)
constexpr int BN = 128;          // keys per K / V tile
constexpr int SLAB = 128 * 128;  // bytes of one 128-row x 64-column bf16 slab (one TMA box)
constexpr int PRODUCER_REGS = 24;
constexpr int CONSUMER_REGS = 240;

// What the head dim HD (128 or 64) fixes: a 128-row tile of Q, K or V is HD / 64 slabs (d 0..63,
// d 64..127); the K / V ring is deeper for D = 64, whose tiles are half as long to compute.
// Shared memory (the plan's smem): 1024 alignment slack + TILE_BYTES * (1 + 2 * STAGES) + 256 barriers.
template <int HD>
struct Tile {
  static_assert(HD == 64 || HD == 128, "head dim 64 or 128");
  static constexpr int SLABS = HD / 64;
  static constexpr int BYTES = SLABS * SLAB;     // D = 128: 32 KiB, D = 64: 16 KiB
  static constexpr int STAGES = HD == 128 ? 2 : 4;  // K / V ring depth
};

// The 128 rows starting at `row` of a [rows, HD] tensor map: HD / 64 boxes, one per slab.
template <int HD>
__device__ __forceinline__ void tma_load_tile(uint8_t* dst, const CUtensorMap* map, uint64_t* bar, int row) {
#pragma unroll
  for (int s = 0; s < Tile<HD>::SLABS; ++s) tma_load_2d(dst + s * SLAB, map, bar, 64 * s, row);
}

// Descriptor of an MN-major (N contiguous), 128B-swizzled B operand: each 128-byte row is one k
// (key) holding 64 consecutive n (d); LBO = bytes between 64-wide n slabs, SBO = between 8-k atoms
// (PTX ISA canonical layout ((T,8,m),(8,k)):((1,T,LBO),(8T,SBO)), T = 8 bf16). With N = 64 (D = 64)
// the operand is a single n slab (m = 1), so the LBO is never applied.
__device__ __forceinline__ uint64_t desc_nmajor(const void* p) {
  uint64_t d = static_cast<uint64_t>((smem_u32(p) & 0x3FFFF) >> 4);
  d |= static_cast<uint64_t>(SLAB >> 4) << 16;
  d |= static_cast<uint64_t>(1024 >> 4) << 32;
  d |= static_cast<uint64_t>(1) << 62;
  return d;
}

// wgmma_fence_regs for the bf16-pair P fragment (the header's takes fp32 accumulators).
template <int R>
__device__ __forceinline__ void wgmma_fence_regs(uint32_t (&d)[R]) {
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

// O[64 x 128] += P[64 x 16] * V[16 x 128]: P from registers (bf16 pairs), V in shared memory
// N-major (d contiguous), hence imm-trans-b = 1. (D = 128)
__device__ __forceinline__ void wgmma_rs(float (&d)[64], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint64_t db) {
  asm volatile(
      "{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %69, 0;\n\t"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n\t}"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(db), "r"(1));
}

// O[64 x 64] += P[64 x 16] * V[16 x 64]: the same with N = 64 (D = 64), 32 accumulator registers.
__device__ __forceinline__ void wgmma_rs(float (&d)[32], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint64_t db) {
  asm volatile(
      "{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %37, 0;\n\t"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n\t}"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(db), "r"(1));
}

// S = Q K^T for this warpgroup's 64 rows: HD / 16 k16 steps over d, the first overwriting S (scale_d = 0).
// Inside a 128-byte swizzle row a k16 step is 32 bytes further (+2 in the descriptor's 16-byte units);
// steps 4..7 (D = 128) read the second slab.
template <int HD>
__device__ __forceinline__ void issue_qk(float (&s)[64], const uint8_t* q, const uint8_t* k) {
  const uint64_t dq = make_desc_sw128(q), dk = make_desc_sw128(k);
#pragma unroll
  for (int kk = 0; kk < HD / 16; ++kk) {
    const uint64_t off = (kk / 4) * (SLAB >> 4) + 2 * (kk % 4);
    wgmma_m64k16_bf16<128>(s, dq + off, dk + off, kk != 0);
  }
}

// O += P V: 8 k16 steps over the 128 keys; step kk reads keys 16kk..16kk+15 = two 8-key atoms,
// 2 KiB further into every d slab. p[4kk..4kk+3] is P's register fragment of that step.
template <int HD>
__device__ __forceinline__ void issue_pv(float (&o)[HD / 2], const uint32_t (&p)[32], const uint8_t* v) {
  const uint64_t dv = desc_nmajor(v);
#pragma unroll
  for (int kk = 0; kk < 8; ++kk) {
    wgmma_rs(o, p[4 * kk], p[4 * kk + 1], p[4 * kk + 2], p[4 * kk + 3], dv + kk * (2048 >> 4));
  }
}

// Online softmax of one S tile, in place (S becomes P = 2^(S*sl2 - m)). Accumulator element j of
// this thread is row r0 + 8 * ((j / 2) % 2), column 8 * (j / 4) + 2 * (t % 4) + j % 2.
// Returns the factors exp2(m_old - m_new) that the running output and sum must be scaled by.
__device__ __forceinline__ void softmax_tile(float (&s)[64], float sl2, float& m0, float& m1, float& l0, float& l1,
                                             float& a0, float& a1) {
  float x0 = s[0], x1 = s[2];
#pragma unroll
  for (int j = 0; j < 64; j += 4) {
    x0 = fmaxf(x0, fmaxf(s[j], s[j + 1]));
    x1 = fmaxf(x1, fmaxf(s[j + 2], s[j + 3]));
  }
  // the four threads of a quad hold the same two rows
  x0 = fmaxf(x0, __shfl_xor_sync(0xffffffffu, x0, 1));
  x1 = fmaxf(x1, __shfl_xor_sync(0xffffffffu, x1, 1));
  x0 = fmaxf(x0, __shfl_xor_sync(0xffffffffu, x0, 2));
  x1 = fmaxf(x1, __shfl_xor_sync(0xffffffffu, x1, 2));
  const float n0 = fmaxf(m0, x0 * sl2), n1 = fmaxf(m1, x1 * sl2);  // scale > 0: max commutes with it
  a0 = ex2(m0 - n0);  // m = -inf on the first tile: 0
  a1 = ex2(m1 - n1);
  float sum0 = 0.f, sum1 = 0.f;
#pragma unroll
  for (int j = 0; j < 64; j += 4) {
    s[j] = ex2(fmaf(s[j], sl2, -n0));
    s[j + 1] = ex2(fmaf(s[j + 1], sl2, -n0));
    s[j + 2] = ex2(fmaf(s[j + 2], sl2, -n1));
    s[j + 3] = ex2(fmaf(s[j + 3], sl2, -n1));
    sum0 += s[j] + s[j + 1];
    sum1 += s[j + 2] + s[j + 3];
  }
  l0 = l0 * a0 + sum0;
  l1 = l1 * a1 + sum1;
  m0 = n0;
  m1 = n1;
}

// Causal mask of the diagonal tile: element j of this thread sits at row `row` + 8 * ((j / 2) % 2) and
// column 8 * (j / 4) + 2 * (t % 4) + j % 2 of the 128 x 128 tile; keys after the query get -inf.
// Every row keeps at least its key 0 of the tile, so the row max stays finite.
__device__ __forceinline__ void mask_diagonal(float (&s)[64], int row, int lane) {
  const int col0 = 2 * (lane % 4);
#pragma unroll
  for (int j = 0; j < 64; ++j) {
    if (8 * (j / 4) + col0 + (j % 2) > row + 8 * ((j / 2) % 2)) s[j] = -INFINITY;
  }
}

// The k16 slice kk of the m64n128 accumulator (elements 8kk..8kk+7) packed in pairs is the A
// fragment {a0a1, a2a3, a4a5, a6a7} of wgmma m64nNk16: rows r0 / r0+8, columns 2(t%4) / +8.
__device__ __forceinline__ void pack_p(const float (&s)[64], uint32_t (&p)[32]) {
#pragma unroll
  for (int i = 0; i < 32; ++i) p[i] = pack_bf16(s[2 * i], s[2 * i + 1]);
}

// Shared-memory ring state of a consumer warpgroup, passed to the per-tile step.
struct Ring {
  const uint8_t* sQc;  // the warpgroup's 64 rows inside each Q slab
  const uint8_t* sK;
  const uint8_t* sV;
  uint64_t* fullK;
  uint64_t* fullV;
  uint64_t* emptyK;
  uint64_t* emptyV;
};

// One key tile j >= 1 of a consumer warpgroup: S_j = Q K_j^T and O += P_{j-1} V_{j-1} are issued
// back to back; the softmax of S_j runs while the P V product is still in flight, and only the O
// rescale waits for it. MASK: j is the causal diagonal tile.
template <int HD, bool MASK>
__device__ __forceinline__ void consumer_step(int j, const Ring& r, float (&s)[64], float (&o)[HD / 2],
                                              uint32_t (&p)[32], float sl2, float& m0, float& m1, float& l0,
                                              float& l1, int row, int lane) {
  constexpr int STAGES = Tile<HD>::STAGES, TILE_BYTES = Tile<HD>::BYTES;
  const int st = j % STAGES, sp = (j - 1) % STAGES;
  float a0, a1;
  mbar_wait(&r.fullK[st], (j / STAGES) & 1);
  mbar_wait(&r.fullV[sp], ((j - 1) / STAGES) & 1);
  wgmma_fence();
  issue_qk<HD>(s, r.sQc, r.sK + st * TILE_BYTES);  // S_j = Q K_j^T
  wgmma_commit();
  issue_pv<HD>(o, p, r.sV + sp * TILE_BYTES);      // O += P_{j-1} V_{j-1}
  wgmma_commit();
  wgmma_wait<1>();  // S_j is done (groups complete in order)
  wgmma_fence_regs(s);
  if (lane == 0) mbar_arrive(&r.emptyK[st]);
  if constexpr (MASK) mask_diagonal(s, row, lane);
  softmax_tile(s, sl2, m0, m1, l0, l1, a0, a1);
  wgmma_wait<0>();  // P_{j-1} V_{j-1} is done: O and P may be touched again
  wgmma_fence_regs(o);
  wgmma_fence_regs(p);
  if (lane == 0) mbar_arrive(&r.emptyV[sp]);
#pragma unroll
  for (int i = 0; i < HD / 2; i += 4) {
    o[i] *= a0;
    o[i + 1] *= a0;
    o[i + 2] *= a1;
    o[i + 3] *= a1;
  }
  pack_p(s, p);
}

// HD: head dim (128 or 64). CAUSAL: top-left aligned mask. GQA: K / V have B * HKV heads and query
// head (b, h) = row bh = b * H + h reads KV head b * HKV + h / group = bh / group (H = HKV * group).
template <int HD, bool CAUSAL, bool GQA>
__device__ __forceinline__ void attn_fwd(const CUtensorMap* tmQ, const CUtensorMap* tmK, const CUtensorMap* tmV,
                                         __nv_bfloat16* __restrict__ O, float* __restrict__ LSE, int S, int D,
                                         float scale, int group) {
  constexpr int STAGES = Tile<HD>::STAGES, TILE_BYTES = Tile<HD>::BYTES;
  if (D != HD || S % BN != 0 || (GQA && group < 1)) asm volatile("trap;");  // this kernel's tiling only; fail loudly
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  // dynamic shared memory is only 16-byte aligned; the swizzled tiles need 1024
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  uint8_t* sQ = smem;
  uint8_t* sK = sQ + TILE_BYTES;
  uint8_t* sV = sK + STAGES * TILE_BYTES;
  uint64_t* fullQ = reinterpret_cast<uint64_t*>(sV + STAGES * TILE_BYTES);  // 1 + 4 * STAGES barriers <= 256 bytes
  uint64_t* fullK = fullQ + 1;
  uint64_t* fullV = fullK + STAGES;
  uint64_t* emptyK = fullV + STAGES;
  uint64_t* emptyV = emptyK + STAGES;

  const int wg = threadIdx.x / 128;
  const int t = threadIdx.x % 128;
  const int q_tile = CAUSAL ? gridDim.x - 1 - blockIdx.x : blockIdx.x;  // causal: longest rows first
  const int q0 = q_tile * BM;
  const int bh = blockIdx.y;
  const int head_row = bh * S;  // first row of this (batch, head) in the [B*H*S, D] view of Q and O
  const int n_tiles = CAUSAL ? q_tile + 1 : S / BN;  // causal: up to the diagonal tile (BM = BN)

  if (threadIdx.x == 0) {
    mbar_init(fullQ, 1);
    for (int i = 0; i < STAGES; ++i) {
      mbar_init(&fullK[i], 1);
      mbar_init(&fullV[i], 1);
      mbar_init(&emptyK[i], 8);  // one arrival per consumer warp (2 warpgroups x 4 warps)
      mbar_init(&emptyV[i], 8);
    }
    mbar_fence_init();
  }
  __syncthreads();

  if (wg == 0) {
    setmaxnreg_dec<PRODUCER_REGS>();
    if (t == 0) {
      // first row of this head's keys / values in the [B*HKV*S, D] view of K and V (HKV = H without GQA)
      const int kv_row = GQA ? (bh / group) * S : head_row;
      mbar_arrive_expect_tx(fullQ, TILE_BYTES);
      tma_load_tile<HD>(sQ, tmQ, fullQ, head_row + q0);
      for (int j = 0; j < n_tiles; ++j) {
        const int st = j % STAGES;
        const uint32_t ph = (j / STAGES) & 1;
        const int row = kv_row + j * BN;
        mbar_wait(&emptyK[st], ph ^ 1);  // a fresh barrier passes parity 1 at once
        mbar_arrive_expect_tx(&fullK[st], TILE_BYTES);
        tma_load_tile<HD>(sK + st * TILE_BYTES, tmK, &fullK[st], row);
        mbar_wait(&emptyV[st], ph ^ 1);
        mbar_arrive_expect_tx(&fullV[st], TILE_BYTES);
        tma_load_tile<HD>(sV + st * TILE_BYTES, tmV, &fullV[st], row);
      }
    }
  } else {
    setmaxnreg_inc<CONSUMER_REGS>();
    const int c = wg - 1;
    const int lane = t % 32;
    const int r0 = 16 * (t / 32) + lane / 4;  // this thread's rows: r0 and r0 + 8 of the warpgroup's 64
    const int row = 64 * c + r0;              // ... and within the CTA's 128
    const float sl2 = scale * 1.4426950408889634f;
    const Ring ring{sQ + c * 64 * 128, sK, sV, fullK, fullV, emptyK, emptyV};

    float s[64], o[HD / 2];  // S: 64 x 128 keys; O: 64 x HD (m64nN accumulators: N / 2 per thread)
    uint32_t p[32];
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f, a0, a1;
#pragma unroll
    for (int i = 0; i < HD / 2; ++i) o[i] = 0.f;

    mbar_wait(fullQ, 0);
    // tile 0: S only
    mbar_wait(&fullK[0], 0);
    wgmma_fence();
    issue_qk<HD>(s, ring.sQc, sK);
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_fence_regs(s);
    if (lane == 0) mbar_arrive(&emptyK[0]);
    if (CAUSAL && n_tiles == 1) mask_diagonal(s, row, lane);
    softmax_tile(s, sl2, m0, m1, l0, l1, a0, a1);
    pack_p(s, p);

    // tiles 1 .. n-1; the causal diagonal tile (the last) is peeled off so the main loop has no mask code
    const int n_plain = CAUSAL ? n_tiles - 1 : n_tiles;
    for (int j = 1; j < n_plain; ++j) consumer_step<HD, false>(j, ring, s, o, p, sl2, m0, m1, l0, l1, row, lane);
    if (CAUSAL && n_tiles > 1) consumer_step<HD, true>(n_tiles - 1, ring, s, o, p, sl2, m0, m1, l0, l1, row, lane);
    {
      const int sp = (n_tiles - 1) % STAGES;
      mbar_wait(&fullV[sp], ((n_tiles - 1) / STAGES) & 1);
      wgmma_fence();
      issue_pv<HD>(o, p, sV + sp * TILE_BYTES);
      wgmma_commit();
      wgmma_wait<0>();
      wgmma_fence_regs(o);
    }

    const float inv0 = 1.f / l0, inv1 = 1.f / l1;
    const int qrow = q0 + row;  // query index of this thread's rows qrow and qrow + 8
    __nv_bfloat16* o0 = O + (static_cast<size_t>(head_row) + qrow) * HD + 2 * (lane % 4);
    __nv_bfloat16* o1 = o0 + 8 * HD;
#pragma unroll
    for (int q = 0; q < HD / 8; ++q) {
      *reinterpret_cast<uint32_t*>(o0 + 8 * q) = pack_bf16(o[4 * q] * inv0, o[4 * q + 1] * inv0);
      *reinterpret_cast<uint32_t*>(o1 + 8 * q) = pack_bf16(o[4 * q + 2] * inv1, o[4 * q + 3] * inv1);
    }
    if (lane % 4 == 0) {
      // m is the running max of scale*S in log2 units: ln(sum e^(scale*S)) = m ln 2 + ln(l)
      LSE[head_row + qrow] = m0 * 0.6931471805599453f + logf(l0);
      LSE[head_row + qrow + 8] = m1 * 0.6931471805599453f + logf(l1);
    }
  }
}

// The entry points; each plan names one (attention.py fast_solution / fast_entry_point).
extern "C" __global__ void __launch_bounds__(384, 1)
attn_fwd_wgmma(const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmK,
               const __grid_constant__ CUtensorMap tmV, __nv_bfloat16* __restrict__ O, float* __restrict__ LSE,
               int S, int D, float scale) {
  attn_fwd<128, false, false>(&tmQ, &tmK, &tmV, O, LSE, S, D, scale, 1);
}

extern "C" __global__ void __launch_bounds__(384, 1)
attn_fwd_wgmma_causal(const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmK,
                      const __grid_constant__ CUtensorMap tmV, __nv_bfloat16* __restrict__ O, float* __restrict__ LSE,
                      int S, int D, float scale) {
  attn_fwd<128, true, false>(&tmQ, &tmK, &tmV, O, LSE, S, D, scale, 1);
}

extern "C" __global__ void __launch_bounds__(384, 1)
attn_fwd_wgmma_gqa(const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmK,
                   const __grid_constant__ CUtensorMap tmV, __nv_bfloat16* __restrict__ O, float* __restrict__ LSE,
                   int S, int D, float scale, int group) {
  attn_fwd<128, false, true>(&tmQ, &tmK, &tmV, O, LSE, S, D, scale, group);
}

extern "C" __global__ void __launch_bounds__(384, 1)
attn_fwd_wgmma_d64(const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmK,
                   const __grid_constant__ CUtensorMap tmV, __nv_bfloat16* __restrict__ O, float* __restrict__ LSE,
                   int S, int D, float scale) {
  attn_fwd<64, false, false>(&tmQ, &tmK, &tmV, O, LSE, S, D, scale, 1);
}

extern "C" __global__ void __launch_bounds__(384, 1)
attn_fwd_wgmma_d64_causal(const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmK,
                          const __grid_constant__ CUtensorMap tmV, __nv_bfloat16* __restrict__ O, float* __restrict__ LSE,
                          int S, int D, float scale) {
  attn_fwd<64, true, false>(&tmQ, &tmK, &tmV, O, LSE, S, D, scale, 1);
}

extern "C" __global__ void __launch_bounds__(384, 1)
attn_fwd_wgmma_d64_gqa(const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmK,
                       const __grid_constant__ CUtensorMap tmV, __nv_bfloat16* __restrict__ O, float* __restrict__ LSE,
                       int S, int D, float scale, int group) {
  attn_fwd<64, false, true>(&tmQ, &tmK, &tmV, O, LSE, S, D, scale, group);
}
