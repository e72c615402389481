// ptxbench/tma.cuh: inline-PTX wrappers for the Tensor Memory Accelerator (sm_90).
// Tensor maps come from the launch plan ([tmap.NAME]) and reach the kernel by value as
// `const __grid_constant__ CUtensorMap`; pass their address (&map) here. Coordinates are in
// elements, innermost dimension first, exactly as the plan's box.
#pragma once
#include <stdint.h>

namespace ptxbench {

// Prefetches a tensor map (&map) into the descriptor cache; optional, once per CTA.
__device__ __forceinline__ void tma_prefetch_desc(const void* tmap) {
  asm volatile("prefetch.tensormap [%0];" :: "l"(reinterpret_cast<uint64_t>(tmap)) : "memory");
}

// 2-D box load global -> shared at smem_dst (1024-byte aligned for 128B swizzle); completes the
// box's bytes on `bar` (announce them first with mbar_arrive_expect_tx). c0 = innermost coordinate.
// Out-of-bounds elements are zero-filled and still count towards the bytes.
__device__ __forceinline__ void tma_load_2d(void* smem_dst, const void* tmap, uint64_t* bar,
                                            int32_t c0, int32_t c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4}], [%2];"
      :: "r"(static_cast<uint32_t>(__cvta_generic_to_shared(smem_dst))),
         "l"(reinterpret_cast<uint64_t>(tmap)),
         "r"(static_cast<uint32_t>(__cvta_generic_to_shared(bar))), "r"(c0), "r"(c1)
      : "memory");
}

// Same, written to the same smem offset in every CTA of the cluster named in `cta_mask`
// (bit i = cluster rank i, the issuing CTA included if its bit is set); each receiving CTA's
// barrier at `bar`'s offset gets the bytes that landed in that CTA.
__device__ __forceinline__ void tma_load_2d_multicast(void* smem_dst, const void* tmap, uint64_t* bar,
                                                      int32_t c0, int32_t c1, uint16_t cta_mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%3, %4}], [%2], %5;"
      :: "r"(static_cast<uint32_t>(__cvta_generic_to_shared(smem_dst))),
         "l"(reinterpret_cast<uint64_t>(tmap)),
         "r"(static_cast<uint32_t>(__cvta_generic_to_shared(bar))), "r"(c0), "r"(c1), "h"(cta_mask)
      : "memory");
}

// 2-D box store shared -> global (out-of-bounds parts of the box are not written).
// Run fence_proxy_async() (mbarrier.cuh) after writing the staging buffer with ordinary stores.
__device__ __forceinline__ void tma_store_2d(const void* tmap, const void* smem_src, int32_t c0, int32_t c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];"
      :: "l"(reinterpret_cast<uint64_t>(tmap)),
         "r"(static_cast<uint32_t>(__cvta_generic_to_shared(smem_src))), "r"(c0), "r"(c1)
      : "memory");
}

// Closes the group of tma_store_2d calls this thread issued since the last commit.
__device__ __forceinline__ void tma_store_commit() {
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

// Waits until at most N committed store groups still read their shared-memory source.
template <int N>
__device__ __forceinline__ void tma_store_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;" :: "n"(N) : "memory");
}

// Waits until at most N committed store groups are still incomplete (writes visible).
template <int N>
__device__ __forceinline__ void tma_store_wait() {
  asm volatile("cp.async.bulk.wait_group %0;" :: "n"(N) : "memory");
}

}  // namespace ptxbench
