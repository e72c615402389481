"""l2_hints=True of the GEMM template: L2 eviction priorities on the TMA copies.

With group_m 16 a round of 128 tiles covers 16 tile rows x 8 tile columns, and the next round of the same group
re-reads the same 16 A strips 80 k-steps later: about 42 MB of A and B loads and 8 MB of C stores later, the L2's
size. B's strips and C's tiles are never read again once a round is past them. So A's loads are marked evict_last,
B's loads and C's stores evict_first (createpolicy.fractional, the whole access), and the A strips the next round
needs stay in L2 (gemm_sweep.md round 14: -0.63% kernel time in 5 of 5 paired evaluations, where one or two of the
priorities alone measured -0.2 to +0.2%, and A evict_first +1.1%). B's multicast loads (cluster_m = 2) keep the
default priority.
"""
from __future__ import annotations

import re

from .gemm_body import swap

L2_HINT_HELPERS = r"""// ---- L2 eviction priorities (l2_hints) ----
template <bool LAST>
__device__ __forceinline__ uint64_t l2_policy() {  // evict_last (LAST) or evict_first, for every access it marks
  uint64_t p;
  if constexpr (LAST) asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(p));
  else asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
  return p;
}
__device__ __forceinline__ void tma_load_2d_hint(void* smem_dst, const void* tmap, uint64_t* bar, int32_t c0,
                                                 int32_t c1, uint64_t policy) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1, {%3, %4}], [%2], %5;"
      :: "r"(static_cast<uint32_t>(__cvta_generic_to_shared(smem_dst))), "l"(reinterpret_cast<uint64_t>(tmap)),
         "r"(static_cast<uint32_t>(__cvta_generic_to_shared(bar))), "r"(c0), "r"(c1), "l"(policy)
      : "memory");
}
__device__ __forceinline__ void tma_store_2d_hint(const void* tmap, const void* smem_src, int32_t c0, int32_t c1,
                                                  uint64_t policy) {
  asm volatile(
      "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group.L2::cache_hint [%0, {%2, %3}], [%1], %4;"
      :: "l"(reinterpret_cast<uint64_t>(tmap)), "r"(static_cast<uint32_t>(__cvta_generic_to_shared(smem_src))),
         "r"(c0), "r"(c1), "l"(policy)
      : "memory");
}

"""

_STORE = re.compile(r"tma_store_2d\(tmC, ([^;]*)\);")


def l2_hints_body(body: str) -> str:
    """A's loads evict_last, B's (unicast) loads and C's stores evict_first."""
    body = swap(body, "constexpr int NTHREADS = ", L2_HINT_HELPERS + "constexpr int NTHREADS = ")
    body = swap(body, "      tma_prefetch_desc(&tmB);\n",
                "      tma_prefetch_desc(&tmB);\n"
                "      const uint64_t keep = l2_policy<true>(), stream = l2_policy<false>();  // l2_hints: A kept, B streamed\n")
    body = swap(body, "tma_load_2d(sA + kc * A_CHUNK, &tmA, &full[stage], kx, m0);",
                "tma_load_2d_hint(sA + kc * A_CHUNK, &tmA, &full[stage], kx, m0, keep);")
    body = swap(body, "tma_load_2d(sB + kc * B_CHUNK, &tmB, &full[stage], kx, n0);",
                "tma_load_2d_hint(sB + kc * B_CHUNK, &tmB, &full[stage], kx, n0, stream);")
    body, stores = _STORE.subn(r"tma_store_2d_hint(tmC, \1, l2_policy<false>());", body)
    if not stores:
        raise ValueError("l2_hints: no TMA store of C in the body")
    return body
