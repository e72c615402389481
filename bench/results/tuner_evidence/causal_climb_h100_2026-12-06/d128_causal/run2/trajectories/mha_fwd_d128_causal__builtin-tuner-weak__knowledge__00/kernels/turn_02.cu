/* ptxbench
language = "cuda"

[[launch]]
kernel = "attn_fwd_wgmma_causal"
grid = ["cdiv(S, 64)", "B * H"]
block = [256]
smem = "1024 + 16384 + 32768 * 4 + 256"  # 1 KiB alignment slack, Q, 2 x (K, V) tiles, mbarriers
args = ["tmap:Q_map", "tmap:K_map", "tmap:V_map", "O", "LSE", "i32:S", "i32:D", "f32:scale"]

[tmap.Q_map]
tensor = "Q"
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
*/
// Hopper attention forward rendered by workloads/solutions/attention_template.py with {'head_dim': 128, 'causal': True, 'gqa': False, 'consumers': 1, 'bn': 128, 'stages': 2, 'schedule': 'cooperative', 'lpt_group': 0, 'epilogue': 'direct', 'producer_regs': 24}
#include <cuda.h>
#include <cuda_bf16.h>
#include <stdint.h>
#include "ptxbench/wgmma.cuh"
#include "ptxbench/tma.cuh"
#include "ptxbench/mbarrier.cuh"

using namespace ptxbench;  // mbar_*, tma_*, make_desc_sw128, wgmma_* (prompts/include/ptxbench)

constexpr int HD = 128;
constexpr bool CAUSAL = true;
constexpr bool GQA = false;
constexpr int CONSUMERS = 1;
constexpr int BN = 128;
constexpr int STAGES = 2;
constexpr bool PINGPONG = false;
constexpr int LPT_GROUP = 0;
constexpr bool EPILOGUE_TMA = false;
constexpr int PRODUCER_REGS = 24;
constexpr int CONSUMER_REGS = 240;

// O = softmax(scale * Q K^T) V and the natural-log LSE, bf16 in / out, in the FlashAttention-3 layout:
// one CTA per (BM = 64 x CONSUMERS query rows, batch * head); NTHREADS = 128 x (1 + CONSUMERS):
//   * warpgroup 0, the producer (setmaxnreg PRODUCER_REGS): one thread loads the BM x D Q tile once, then
//     streams BN-key K and V tiles into a STAGES-deep ring with TMA (128B swizzle: a tile is SLABS slabs of
//     rows x 64 d), guarded by full / empty mbarriers, K and V separately so S = Q K^T starts before V lands.
//   * warpgroups 1..CONSUMERS (setmaxnreg CONSUMER_REGS), 64 query rows each:
//     S = Q K^T  : HD / 16 x wgmma m64nBNk16, Q and K from shared memory, both K-major (d contiguous).
//     softmax    : online, in registers, base 2 with scale*log2(e) folded in; a thread holds rows r and r+8
//                  of its warp's 16, the row max reduced over the quad (shfl.xor 1, 2), the row sum kept per
//                  thread until the end (the running max is quad-uniform, so partial sums rescale alike).
//     O += P V   : BN / 16 x wgmma m64nONk16, A = P from registers (the fp32 S fragment of a k16 slice is the
//                  bf16 A fragment once packed in pairs), B = V N-major from shared memory (imm-trans-b = 1).
//     S_j = Q K_j^T and O += P_{j-1} V_{j-1} are issued back to back; the softmax of S_j runs while P V is in
//     flight and only the O rescale waits for it.
//   PINGPONG: the consumers take turns to issue their wgmmas (named barriers 1..CONSUMERS, immediate ids),
//     so one's softmax runs while the next one's GEMMs occupy the tensor cores (FA3's warp scheduling).
// D = 96 pads each tile to two slabs: the TMA box over d 64..127 reads d 64..95 and zero-fills the rest,
// so S = Q K^T takes 6 k16 steps and P V runs at N = 128 with zero columns that are never stored.
// Keys past S (BN not dividing S) and, with CAUSAL, keys after the query are masked to -inf; a tile with
// no such key runs the unmasked step. Query rows past S (BM not dividing S) are computed and not stored.
// GQA: K / V are [B, HKV, S, D] and query row bh = b * H + h reads KV head bh / group (group = H / HKV).

constexpr int BM = 64 * CONSUMERS;              // query rows per CTA
constexpr int NTHREADS = 128 * (CONSUMERS + 1);
constexpr int SLABS = (HD + 63) / 64;           // 64-wide d slabs per tile (D = 96: the second half zero)
constexpr int ON = 64 * SLABS;                  // O accumulator columns per row block
constexpr int Q_SLAB = BM * 128;                // bytes of one Q slab: BM rows x 128 B
constexpr int KV_SLAB = BN * 128;
constexpr int Q_BYTES = SLABS * Q_SLAB;
constexpr int KV_BYTES = SLABS * KV_SLAB;
constexpr int SN = BN / 2;                      // S accumulator registers per thread (m64nBN)
constexpr int PN = BN / 4;                      // P registers: bf16 pairs
constexpr bool KEY_TAIL = (BN & (BN - 1)) != 0;  // BN not a power of two: the last key tile may pass S
constexpr bool MASKED = CAUSAL || KEY_TAIL;      // some tile needs the masked step
constexpr int BAR_TURN = 1;                     // named barriers 1..CONSUMERS: consumer c's turn to issue
constexpr int BAR_EPI = 4;                      // 4 + c: consumer c's epilogue staging (after 3 turn ids)

static_assert(HD == 64 || HD == 96 || HD == 128, "head dim 64, 96 or 128");
static_assert(BN % 16 == 0 && BN <= 256, "wgmma N and the TMA box");
static_assert(1 + 4 * STAGES <= 32, "the mbarriers fit their 256 bytes");
static_assert(!PINGPONG || CONSUMERS >= 2, "ping-pong needs two consumers");

// The `rows` rows starting at `row` of a [rows, D] tensor map: SLABS boxes of 64 d, one per slab.
template <int SLAB_BYTES>
__device__ __forceinline__ void tma_load_tile(uint8_t* dst, const CUtensorMap* map, uint64_t* bar, int row) {
#pragma unroll
  for (int s = 0; s < SLABS; ++s) tma_load_2d(dst + s * SLAB_BYTES, map, bar, 64 * s, row);
}

// Descriptor of an MN-major (N contiguous), 128B-swizzled B operand: each 128-byte row is one k (key)
// holding 64 consecutive n (d); LBO = bytes between 64-wide n slabs, SBO = between 8-k atoms (PTX ISA
// canonical layout ((T,8,m),(8,k)):((1,T,LBO),(8T,SBO)), T = 8 bf16). With ON = 64 the LBO is never applied.
__device__ __forceinline__ uint64_t desc_nmajor(const void* p) {
  uint64_t d = static_cast<uint64_t>((smem_u32(p) & 0x3FFFF) >> 4);
  d |= static_cast<uint64_t>(KV_SLAB >> 4) << 16;
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

// Named barriers with immediate ids (bar.sync / bar.arrive): COUNT threads meet at barrier ID.
template <int ID, int COUNT>
__device__ __forceinline__ void bar_sync_imm() {
  asm volatile("bar.sync %0, %1;" :: "n"(ID), "n"(COUNT) : "memory");
}
template <int ID, int COUNT>
__device__ __forceinline__ void bar_arrive_imm() {
  asm volatile("bar.arrive %0, %1;" :: "n"(ID), "n"(COUNT) : "memory");
}

// Ping-pong turns. Barrier BAR_TURN + c completes when consumer c waits on it (128 threads) and consumer
// c - 1 (mod CONSUMERS) has arrived (128): c may then issue its wgmmas, and after issuing it passes the turn
// to c + 1. Every consumer has the same number of issue points (n_tiles + 1), the last consumer starts the
// ring with one arrival for consumer 0 and skips its arrival after its final issue, so arrivals and waits
// pair up exactly; a consumer cannot arrive twice before the next one waited (it needs the turn back first).
__device__ __forceinline__ void turn_wait(int c) {
  if constexpr (PINGPONG) {
    if (c == 0) bar_sync_imm<BAR_TURN, 256>();
    else if (c == 1) bar_sync_imm<BAR_TURN + 1, 256>();
    else bar_sync_imm<BAR_TURN + 2, 256>();
  }
}
__device__ __forceinline__ void turn_pass(int c) {
  if constexpr (PINGPONG) {
    const int next = c + 1 == CONSUMERS ? 0 : c + 1;
    if (next == 0) bar_arrive_imm<BAR_TURN, 256>();
    else if (next == 1) bar_arrive_imm<BAR_TURN + 1, 256>();
    else bar_arrive_imm<BAR_TURN + 2, 256>();
  }
}

// The 128 threads of consumer c meet (before one of them TMA-stores what all of them staged).
__device__ __forceinline__ void epilogue_sync(int c) {
  if (c == 0) bar_sync_imm<BAR_EPI, 128>();
  else if (c == 1) bar_sync_imm<BAR_EPI + 1, 128>();
  else bar_sync_imm<BAR_EPI + 2, 128>();
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
// N-major (d contiguous), hence imm-trans-b = 1. (ON = 128: D = 96 or 128)
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
// Inside a 128-byte swizzle row a k16 step is 32 bytes further (+2 in the descriptor's 16-byte units); steps
// 4.. read the second slab (Q_SLAB / KV_SLAB bytes further).
__device__ __forceinline__ void issue_qk(float (&s)[SN], const uint8_t* q, const uint8_t* k) {
  const uint64_t dq = make_desc_sw128(q), dk = make_desc_sw128(k);
#pragma unroll
  for (int kk = 0; kk < HD / 16; ++kk) {
    const uint64_t qo = (kk / 4) * (Q_SLAB >> 4) + 2 * (kk % 4), ko = (kk / 4) * (KV_SLAB >> 4) + 2 * (kk % 4);
    wgmma_m64k16_bf16<BN>(s, dq + qo, dk + ko, kk != 0);
  }
}

// O += P V: BN / 16 k16 steps over the keys; step kk reads keys 16kk..16kk+15 = two 8-key atoms, 2 KiB
// further into every d slab. p[4kk..4kk+3] is P's register fragment of that step.
__device__ __forceinline__ void issue_pv(float (&o)[ON / 2], const uint32_t (&p)[PN], const uint8_t* v) {
  const uint64_t dv = desc_nmajor(v);
#pragma unroll
  for (int kk = 0; kk < BN / 16; ++kk) {
    wgmma_rs(o, p[4 * kk], p[4 * kk + 1], p[4 * kk + 2], p[4 * kk + 3], dv + kk * (2048 >> 4));
  }
}

// Online softmax of one S tile, in place (S becomes P = 2^(S*sl2 - m)). Accumulator element j of this
// thread is row r0 + 8 * ((j / 2) % 2), column 8 * (j / 4) + 2 * (t % 4) + j % 2. Returns the factors
// exp2(m_old - m_new) that the running output and sum must be scaled by. A row fully masked in this tile
// keeps its max (finite: tile 0 always holds key 0, which no row masks) and adds zeros.
__device__ __forceinline__ void softmax_tile(float (&s)[SN], float sl2, float& m0, float& m1, float& l0, float& l1,
                                             float& a0, float& a1) {
  float x0 = s[0], x1 = s[2];
#pragma unroll
  for (int j = 0; j < SN; j += 4) {
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
  for (int j = 0; j < SN; j += 4) {
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

// Masks a tile: element j sits at tile column 8 * (j / 4) + 2 * (lane % 4) + j % 2 and gets -inf past its
// row's last key: `lim` (tile-relative) for row r0; with CAUSAL row r0 + 8 may see 8 keys more.
__device__ __forceinline__ void mask_tile(float (&s)[SN], int lim, int lane) {
  const int col0 = 2 * (lane % 4);
#pragma unroll
  for (int j = 0; j < SN; ++j) {
    if (8 * (j / 4) + col0 + (j % 2) > lim + (CAUSAL ? 8 * ((j / 2) % 2) : 0)) s[j] = -INFINITY;
  }
}

// The k16 slice kk of the m64nBN accumulator (elements 8kk..8kk+7) packed in pairs is the A fragment
// {a0a1, a2a3, a4a5, a6a7} of wgmma m64nNk16: rows r0 / r0+8, columns 2(t%4) / +8.
__device__ __forceinline__ void pack_p(const float (&s)[SN], uint32_t (&p)[PN]) {
#pragma unroll
  for (int i = 0; i < PN; ++i) p[i] = pack_bf16(s[2 * i], s[2 * i + 1]);
}

// A consumer warpgroup's view of the CTA: its Q rows, the ring, its softmax state.
struct Consumer {
  const uint8_t* sQc;  // the warpgroup's 64 rows inside each Q slab
  const uint8_t* sK;
  const uint8_t* sV;
  uint64_t* fullK;
  uint64_t* fullV;
  uint64_t* emptyK;
  uint64_t* emptyV;
  int c, lane;
  int qrow;            // query index of this thread's first row (the second is qrow + 8)
  int S;
  float sl2;
  float m0, m1, l0, l1;
};

// The last key of key tile j that this thread's first row may see, relative to the tile. Causal: the query
// index (for rows inside S it also stops keys past S); else S - 1, the key tail.
__device__ __forceinline__ int tile_limit(const Consumer& w, int j) {
  return (CAUSAL ? w.qrow : w.S - 1) - j * BN;
}

// One key tile j >= 1: S_j = Q K_j^T and O += P_{j-1} V_{j-1} issued back to back (one turn under
// ping-pong); the softmax of S_j runs while the P V product is in flight, only the O rescale waits for it.
template <bool MASK>
__device__ __forceinline__ void consumer_step(int j, Consumer& w, float (&s)[SN], float (&o)[ON / 2], uint32_t (&p)[PN]) {
  const int st = j % STAGES, sp = (j - 1) % STAGES;
  float a0, a1;
  mbar_wait(&w.fullK[st], (j / STAGES) & 1);
  mbar_wait(&w.fullV[sp], ((j - 1) / STAGES) & 1);
  turn_wait(w.c);
  wgmma_fence();
  issue_qk(s, w.sQc, w.sK + st * KV_BYTES);  // S_j = Q K_j^T
  wgmma_commit();
  issue_pv(o, p, w.sV + sp * KV_BYTES);      // O += P_{j-1} V_{j-1}
  wgmma_commit();
  turn_pass(w.c);
  wgmma_wait<1>();  // S_j is done (groups complete in order)
  wgmma_fence_regs(s);
  if (w.lane == 0) mbar_arrive(&w.emptyK[st]);
  if constexpr (MASK) {
    mask_tile(s, tile_limit(w, j), w.lane);
  }
  softmax_tile(s, w.sl2, w.m0, w.m1, w.l0, w.l1, a0, a1);
  wgmma_wait<0>();  // P_{j-1} V_{j-1} is done: O and P may be touched again
  wgmma_fence_regs(o);
  wgmma_fence_regs(p);
  if (w.lane == 0) mbar_arrive(&w.emptyV[sp]);
#pragma unroll
  for (int i = 0; i < ON / 2; i += 4) {
    o[i] *= a0;
    o[i + 1] *= a0;
    o[i + 2] *= a1;
    o[i + 3] *= a1;
  }
  pack_p(s, p);
}

// O / l as bf16 straight from registers (the first HD columns).
__device__ __forceinline__ void store_direct(const float (&o)[ON / 2], __nv_bfloat16* O, size_t row, int lane,
                                             float inv0, float inv1) {
  __nv_bfloat16* o0 = O + row * HD + 2 * (lane % 4);
  __nv_bfloat16* o1 = o0 + 8 * HD;
#pragma unroll
  for (int q = 0; q < HD / 8; ++q) {
    *reinterpret_cast<uint32_t*>(o0 + 8 * q) = pack_bf16(o[4 * q] * inv0, o[4 * q + 1] * inv0);
    *reinterpret_cast<uint32_t*>(o1 + 8 * q) = pack_bf16(o[4 * q + 2] * inv1, o[4 * q + 3] * inv1);
  }
}

// O / l staged as bf16 in the consumer's own (no longer read) Q rows, in the 128B-swizzled layout of a
// 64 x 64 TMA box (16-byte chunk ^ row % 8: the quad's rows land in different banks), then one thread
// stores each slab with TMA. Columns past HD are outside the O map and not written.
__device__ __forceinline__ void store_tma(const float (&o)[ON / 2], uint8_t* stage, const CUtensorMap* tmO, int row0,
                                          int c, int t, float inv0, float inv1) {
  const int lane = t % 32, r0 = 16 * (t / 32) + lane / 4;
#pragma unroll
  for (int q = 0; q < HD / 8; ++q) {
    uint8_t* dst = stage + (q / 8) * Q_SLAB + r0 * 128 + (((q % 8) ^ (r0 % 8)) << 4) + 4 * (lane % 4);
    *reinterpret_cast<uint32_t*>(dst) = pack_bf16(o[4 * q] * inv0, o[4 * q + 1] * inv0);
    *reinterpret_cast<uint32_t*>(dst + 8 * 128) = pack_bf16(o[4 * q + 2] * inv1, o[4 * q + 3] * inv1);
  }
  fence_proxy_async();  // the generic-proxy stores above, before the TMA (async proxy) reads them
  epilogue_sync(c);
  if (t == 0) {
#pragma unroll
    for (int s = 0; s < SLABS; ++s) tma_store_2d(tmO, stage + s * Q_SLAB, 64 * s, row0);
    tma_store_commit();
    tma_store_wait<0>();
  }
}

// The whole kernel. GQA: query row bh = b * H + h reads KV head bh / group (H = HKV * group).
__device__ __forceinline__ void attn_fwd(const CUtensorMap* tmQ, const CUtensorMap* tmK, const CUtensorMap* tmV,
                                         const CUtensorMap* tmO, __nv_bfloat16* __restrict__ O,
                                         float* __restrict__ LSE, int S, int D, float scale, int group) {
  // this build's tiling only; fail loudly
  if (D != HD || S % 64 != 0 || (!KEY_TAIL && S % BN != 0) || group < 1) asm volatile("trap;");
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  // dynamic shared memory is only 16-byte aligned; the swizzled tiles need 1024
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  uint8_t* sQ = smem;
  uint8_t* sK = sQ + Q_BYTES;
  uint8_t* sV = sK + STAGES * KV_BYTES;
  uint64_t* fullQ = reinterpret_cast<uint64_t*>(sV + STAGES * KV_BYTES);  // 1 + 4 * STAGES barriers <= 256 bytes
  uint64_t* fullK = fullQ + 1;
  uint64_t* fullV = fullK + STAGES;
  uint64_t* emptyK = fullV + STAGES;
  uint64_t* emptyV = emptyK + STAGES;

  const int wg = threadIdx.x / 128;
  const int t = threadIdx.x % 128;
  const int n_q = (S + BM - 1) / BM;
  int q_tile, bh;
  if (CAUSAL && LPT_GROUP > 0) {
    // longest first across groups of LPT_GROUP heads (a 1-D grid): the block scheduler hands the longest
    // rows of every head out before the shorter ones, while the heads running at once stay few (L2 reuse)
    const int heads = gridDim.x / n_q;
    const int grp = blockIdx.x / (LPT_GROUP * n_q), in_grp = blockIdx.x % (LPT_GROUP * n_q);
    const int g_heads = min(LPT_GROUP, heads - grp * LPT_GROUP);
    q_tile = n_q - 1 - in_grp / g_heads;
    bh = grp * LPT_GROUP + in_grp % g_heads;
  } else {
    q_tile = CAUSAL ? n_q - 1 - blockIdx.x : blockIdx.x;  // causal: each head's longest rows first
    bh = blockIdx.y;
  }
  const int q0 = q_tile * BM;
  const int head_row = bh * S;  // first row of this (batch, head) in the [B*H*S, D] view of Q and O
  // key tiles: causal up to the one holding key min(q0 + BM, S) - 1; tiles from n_plain on need the mask
  const int n_tiles = CAUSAL ? (min(q0 + BM, S) + BN - 1) / BN : (S + BN - 1) / BN;
  const int n_plain = CAUSAL ? (q0 + 1) / BN : S / BN;

  if (threadIdx.x == 0) {
    mbar_init(fullQ, 1);
    for (int i = 0; i < STAGES; ++i) {
      mbar_init(&fullK[i], 1);
      mbar_init(&fullV[i], 1);
      mbar_init(&emptyK[i], 4 * CONSUMERS);  // one arrival per consumer warp
      mbar_init(&emptyV[i], 4 * CONSUMERS);
    }
    mbar_fence_init();
  }
  __syncthreads();

  if (wg == 0) {
    setmaxnreg_dec<PRODUCER_REGS>();
    if (t == 0) {
      // first row of this head's keys / values in the [B*HKV*S, D] view of K and V (HKV = H without GQA)
      const int kv_row = GQA ? (bh / group) * S : head_row;
      mbar_arrive_expect_tx(fullQ, Q_BYTES);
      tma_load_tile<Q_SLAB>(sQ, tmQ, fullQ, head_row + q0);
      for (int j = 0; j < n_tiles; ++j) {
        const int st = j % STAGES;
        const uint32_t ph = (j / STAGES) & 1;
        const int row = kv_row + j * BN;
        mbar_wait(&emptyK[st], ph ^ 1);  // a fresh barrier passes parity 1 at once
        mbar_arrive_expect_tx(&fullK[st], KV_BYTES);  // out-of-bounds boxes count in full
        tma_load_tile<KV_SLAB>(sK + st * KV_BYTES, tmK, &fullK[st], row);
        mbar_wait(&emptyV[st], ph ^ 1);
        mbar_arrive_expect_tx(&fullV[st], KV_BYTES);
        tma_load_tile<KV_SLAB>(sV + st * KV_BYTES, tmV, &fullV[st], row);
      }
    }
  } else {
    setmaxnreg_inc<CONSUMER_REGS>();
    const int c = wg - 1;
    const int lane = t % 32;
    const int r0 = 16 * (t / 32) + lane / 4;  // this thread's rows: r0 and r0 + 8 of the warpgroup's 64
    Consumer w{sQ + c * 64 * 128, sK, sV, fullK, fullV, emptyK, emptyV, c, lane, q0 + 64 * c + r0, S,
               scale * 1.4426950408889634f, -INFINITY, -INFINITY, 0.f, 0.f};

    float s[SN], o[ON / 2];  // S: 64 x BN keys; O: 64 x ON (m64nN accumulators: N / 2 per thread)
    uint32_t p[PN];
    float a0, a1;
#pragma unroll
    for (int i = 0; i < ON / 2; ++i) o[i] = 0.f;
    if (PINGPONG && c == CONSUMERS - 1) turn_pass(c);  // consumer 0 issues first

    mbar_wait(fullQ, 0);
    // tile 0: S only
    mbar_wait(&fullK[0], 0);
    turn_wait(c);
    wgmma_fence();
    issue_qk(s, w.sQc, sK);
    wgmma_commit();
    turn_pass(c);
    wgmma_wait<0>();
    wgmma_fence_regs(s);
    if (lane == 0) mbar_arrive(&emptyK[0]);
    if (MASKED && n_plain == 0) {
      mask_tile(s, tile_limit(w, 0), lane);
    }
    softmax_tile(s, w.sl2, w.m0, w.m1, w.l0, w.l1, a0, a1);
    pack_p(s, p);

    // tiles 1 .. n-1: unmasked up to n_plain, then the masked ones (causal diagonal, the key tail)
    const int n_main = MASKED ? min(n_plain, n_tiles) : n_tiles;
    for (int j = 1; j < n_main; ++j) consumer_step<false>(j, w, s, o, p);
    if constexpr (MASKED) {
      for (int j = max(n_main, 1); j < n_tiles; ++j) consumer_step<true>(j, w, s, o, p);
    }
    {
      const int sp = (n_tiles - 1) % STAGES;
      mbar_wait(&fullV[sp], ((n_tiles - 1) / STAGES) & 1);
      turn_wait(c);
      wgmma_fence();
      issue_pv(o, p, sV + sp * KV_BYTES);
      wgmma_commit();
      if (c != CONSUMERS - 1) turn_pass(c);  // the last consumer's final turn goes to no one
      wgmma_wait<0>();
      wgmma_fence_regs(o);
    }

    // the row sums were kept per thread: reduce over the quad now
    float l0 = w.l0, l1 = w.l1;
    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
    const float inv0 = 1.f / l0, inv1 = 1.f / l1;
    const bool live = q0 + 64 * c < S;  // S % 64 == 0: a warpgroup's rows are all inside S or all past it
    if constexpr (EPILOGUE_TMA) {
      if (live) store_tma(o, sQ + c * 64 * 128, tmO, head_row + q0 + 64 * c, c, t, inv0, inv1);
    } else if (live) {
      store_direct(o, O, static_cast<size_t>(head_row) + w.qrow, lane, inv0, inv1);
    }
    if (live && lane % 4 == 0) {
      // m is the running max of scale*S in log2 units: ln(sum e^(scale*S)) = m ln 2 + ln(l)
      LSE[head_row + w.qrow] = w.m0 * 0.6931471805599453f + logf(l0);
      LSE[head_row + w.qrow + 8] = w.m1 * 0.6931471805599453f + logf(l1);
    }
  }
}

// The entry point the plan launches.
extern "C" __global__ void __launch_bounds__(256, 1)
attn_fwd_wgmma_causal(const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmK,
    const __grid_constant__ CUtensorMap tmV, __nv_bfloat16* __restrict__ O, float* __restrict__ LSE,
    int S, int D, float scale) {
  attn_fwd(&tmQ, &tmK, &tmV, nullptr, O, LSE, S, D, scale, 1);
}
