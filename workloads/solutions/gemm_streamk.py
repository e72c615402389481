"""tail="streamk" of the GEMM template: the full waves' tiles one CTA each, then the k-blocks of the remaining tiles
split evenly over all the CTAs, partial tiles added by their last contributor (measured slower on the H200:
gemm_sweep.md)."""
from __future__ import annotations

from .gemm_body import swap


def streamk_body(body: str) -> str:
    """tail="streamk": the cooperative kernel walks units of work (StreamK::next: the full waves' tiles, then
    this CTA's k-range of the tail) instead of tiles, and a unit that is part of a tail tile goes through
    streamk_fixup before the epilogue."""
    body = swap(body, "const __grid_constant__ CUtensorMap tmC, __nv_bfloat16* C, int M, int N, int K) {",
                 "const __grid_constant__ CUtensorMap tmC, __nv_bfloat16* C, int M, int N, int K,\n"
                 "             float* ws, int* tickets) {")
    body = swap(body, "  const int step = PERSISTENT ? gridDim.x / CLUSTER_M : cluster_tiles;  // grid: a multiple of CLUSTER_M\n",
                 "  const int step = PERSISTENT ? gridDim.x / CLUSTER_M : cluster_tiles;  // grid: a multiple of CLUSTER_M\n"
                 "  const StreamK sk(cluster_tiles, k_iters, gridDim.x);  // the full waves' tiles, then a k-range of the tail\n"
                 "  if (!sk.fits()) __trap();  // a K of over 12 million: the split's 32-bit arithmetic would wrap\n")
    body = swap(body, "for (int ct = first; ct < cluster_tiles; ct += step) {",
                 "for (int ct = first, it = sk.begin(blockIdx.x), end = sk.begin(blockIdx.x + 1), tile = 0, kb = 0, "
                 "ke = 0, r = -1; sk.next(ct, it, end, step, tile, kb, ke, r);) {", count=2)
    body = swap(body, "tile_coords(ct, cluster_rows, tiles_n, tm, tn);", "tile_coords(tile, cluster_rows, tiles_n, tm, tn);",
                 count=2)
    body = swap(body, "for (int k = 0; k < k_iters; ++k) {", "for (int k = kb; k < ke; ++k) {", count=2)
    body = swap(body, "wgmma_m64k16_bf16<BN>(acc[ms], da + 2 * kk, db + 2 * kk, (k | kc | kk) != 0);",
                 "wgmma_m64k16_bf16<BN>(acc[ms], da + 2 * kk, db + 2 * kk, ((k - kb) | kc | kk) != 0);")
    body = swap(body, "      if constexpr (EPILOGUE_TMA) {\n        store_tile_tma(acc, epi + consumer * 2 * WM * 128,",
                 "      // a tail tile's part: publish it, or (the tile's last contributor) add the others' and store\n"
                 "      if (r >= 0 && !streamk_fixup(acc, ws, tickets, sk, r, consumer)) continue;\n"
                 "      if constexpr (EPILOGUE_TMA) {\n        store_tile_tma(acc, epi + consumer * 2 * WM * 128,")
    body = swap(body, 'extern "C" __global__ void __launch_bounds__(NTHREADS, 1)\ngemm_bf16_tn(',
                 STREAMK_HELPERS + 'extern "C" __global__ void __launch_bounds__(NTHREADS, 1)\ngemm_bf16_tn(')
    return body


# tail="streamk" (Stream-K, Osama et al. 2023; CUTLASS's data-parallel + stream-K hybrid): the device side.
# StreamK's arithmetic is compiled for the host by tests/workloads/test_gemm_streamk.py and compared with its Python
# model; the ticket protocol of streamk_fixup is played there under every interleaving of the contributors.
STREAMK_HELPERS = r"""// ---- Stream-K tail (tail="streamk") ----
// The tiles of the full waves go one per CTA as without it (tile first, first + step, ... below dp_tiles =
// tiles - tiles % ctas). The k-blocks of the remaining tiles (total = tail tiles x k_iters, tile-major) are
// split evenly over ALL the CTAs: CTA c takes [begin(c), begin(c + 1)), begin(c) = total * c / ctas. There are
// fewer tail tiles than CTAs, so a range holds at most k_iters k-blocks and touches at most two tiles: CTA c's
// partial sums of a tile go to its workspace slot 0 (the tile its range starts in) or 1 (the next one).
struct StreamK {
  int dp_tiles;  // tiles of the full waves: one CTA each
  int k_iters;
  int ctas;
  int total;     // k-blocks of the tail tiles (fewer than ctas x k_iters)
  __device__ __forceinline__ StreamK(int tiles, int k_iters_, int ctas_)
      : dp_tiles(tiles - tiles % ctas_), k_iters(k_iters_), ctas(ctas_), total(tiles % ctas_ * k_iters_) {}
  // the first k-block (of the tail's) of CTA c's range; begin(ctas) = total. Divided in 32 bits (see fits()): a
  // 64-bit division is a call, and ptxas spills registers around it
  __device__ __forceinline__ int begin(int c) const {
    return static_cast<int>(static_cast<unsigned>(total) * static_cast<unsigned>(c) / static_cast<unsigned>(ctas));
  }
  // the CTA whose range holds k-block x < total: the largest c with begin(c) <= x
  __device__ __forceinline__ int cta_of(int x) const {
    return static_cast<int>((static_cast<unsigned>(x + 1) * static_cast<unsigned>(ctas) - 1u) /
                            static_cast<unsigned>(total));
  }
  // begin()'s and cta_of()'s products stay below 2^32: tail tiles x k_iters x ctas < 2^32 (K under 12 million at
  // 148 CTAs); the kernel traps otherwise
  __device__ __forceinline__ bool fits() const {
    return static_cast<unsigned long long>(total) * static_cast<unsigned>(ctas) < (1ull << 32);
  }
  // This CTA's next unit of work: a whole tile of the full waves (r = -1), then k-blocks [kb, ke) of tail tile
  // r (tile dp_tiles + r) while its range [it, end) lasts. False when none is left.
  __device__ __forceinline__ bool next(int& ct, int& it, int end, int step, int& tile, int& kb, int& ke,
                                       int& r) const {
    if (ct < dp_tiles) { tile = ct; kb = 0; ke = k_iters; r = -1; ct += step; return true; }
    if (it >= end) return false;
    r = it / k_iters;
    kb = it - r * k_iters;
    ke = min(k_iters, kb + (end - it));
    it += ke - kb;
    tile = dp_tiles + r;
    return true;
  }
};

__device__ __forceinline__ int ld_acquire_gpu(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ int atom_add_acq_rel_gpu(int* p, int v) {
  int old;
  asm volatile("atom.acq_rel.gpu.global.add.s32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory");
  return old;
}
__device__ __forceinline__ void st_relaxed_gpu(int* p, int v) {
  asm volatile("st.relaxed.gpu.global.b32 [%0], %1;" :: "l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void fence_acq_rel_gpu() { asm volatile("fence.acq_rel.gpu;" ::: "memory"); }
__device__ __forceinline__ void st_cg_v4(float* p, float a, float b, float c, float d) {
  asm volatile("st.global.cg.v4.f32 [%0], {%1, %2, %3, %4};" :: "l"(p), "f"(a), "f"(b), "f"(c), "f"(d) : "memory");
}
__device__ __forceinline__ float4 ld_cg_v4(const float* p) {
  float4 v;
  asm volatile("ld.global.cg.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p) : "memory");
  return v;
}
// The 128 threads of consumer warpgroup c meet on its named barrier; true on all of them if `p` is on any.
__device__ __forceinline__ bool warpgroup_any(bool p, int c) {
  uint32_t r;
  asm volatile("{\n  .reg .pred pin, pout;\n  setp.ne.u32 pin, %1, 0;\n  bar.red.or.pred pout, %2, 128, pin;\n"
               "  selp.u32 %0, 1, 0, pout;\n}" : "=r"(r) : "r"(static_cast<uint32_t>(p)), "r"(1 + c) : "memory");
  return r != 0;
}

// Consumer warpgroup `consumer` has summed k-blocks [kb, ke) of tail tile r into acc (its WM rows of the tile).
// Every contributor of the tile takes a ticket (one per tile and consumer) after publishing its partial sums;
// the one that draws the last ticket adds everyone else's into acc and returns true (the caller stores the
// tile), the others return false. Ordering: each thread's workspace stores, its fence.acq_rel.gpu, the
// warpgroup's barrier, then thread 0's atom.acq_rel (release); the last contributor's thread 0 reads the final
// count with acquire (ld.acquire or its own atom), the barrier, each thread's fence, then the loads. The
// ticket goes back to 0 once all have drawn (nobody touches it again this call).
__device__ __forceinline__ bool streamk_fixup(float (&acc)[MSUB][BN / 2], float* ws, int* tickets, const StreamK& sk,
                                           int r, int consumer) {
  constexpr int V4 = MSUB * BN / 8;  // float4s of accumulators per thread
  constexpr int ROW4 = BN / 8;       // float4s per m64 slice
  const int t = threadIdx.x % 128;
  const int me = blockIdx.x;
  const int k0 = r * sk.k_iters;
  const int c_lo = sk.cta_of(k0), c_hi = sk.cta_of(k0 + sk.k_iters - 1);
  int parts = 0;  // contributors: the CTAs of c_lo..c_hi with a non-empty range
  for (int c = c_lo; c <= c_hi; ++c) parts += sk.begin(c + 1) > sk.begin(c);
  int* ticket = tickets + r * CONSUMERS + consumer;
  // CTA c's slot for tile r, this warpgroup's rows, this thread's first float4: thread-major, so each of the
  // V4 accesses of the warpgroup covers 2 KB contiguously
  auto slot = [&](int c) {
    const int seg = sk.begin(c) / sk.k_iters == r ? 0 : 1;
    return ws + (static_cast<size_t>(2 * c + seg) * BM + consumer * WM) * BN + 4 * t;
  };
  // All the others published already (the usual case for the contributor of the tile's first k-blocks, which
  // end its range): then this one is the last and stores nothing.
  bool last = warpgroup_any(t == 0 && ld_acquire_gpu(ticket) == parts - 1, consumer);
  if (!last) {
    float* p = slot(me);
#pragma unroll
    for (int i = 0; i < V4; ++i) {
      const float* a = &acc[i / ROW4][4 * (i % ROW4)];
      st_cg_v4(p + 4 * 128 * i, a[0], a[1], a[2], a[3]);
    }
    fence_acq_rel_gpu();
    last = warpgroup_any(t == 0 && atom_add_acq_rel_gpu(ticket, 1) == parts - 1, consumer);
    if (!last) return false;
  }
  fence_acq_rel_gpu();
  for (int c = c_lo; c <= c_hi; ++c) {
    if (c == me || sk.begin(c + 1) == sk.begin(c)) continue;
    const float* p = slot(c);
#pragma unroll
    for (int i = 0; i < V4; ++i) {
      const float4 v = ld_cg_v4(p + 4 * 128 * i);
      float* a = &acc[i / ROW4][4 * (i % ROW4)];
      a[0] += v.x; a[1] += v.y; a[2] += v.z; a[3] += v.w;
    }
  }
  if (t == 0) st_relaxed_gpu(ticket, 0);  // every contributor has drawn: zero for the next call
  return true;
}

"""
