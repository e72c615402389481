// ptxbench/mbarrier.cuh: inline-PTX wrappers for shared-memory mbarriers (sm_90).
// Barriers are uint64_t objects in shared memory (8-byte aligned); every function takes their
// generic address (&bars[i]), not a 32-bit shared address.
// Parity convention: a waiter on phase p calls wait(bar, p); the producer of a ring waits on
// its "empty" barriers with parity (p ^ 1), which passes at once on a freshly initialised barrier.
#pragma once
#include <stdint.h>

namespace ptxbench {

// The 32-bit shared-memory address of a generic pointer into shared memory (for your own asm).
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// count = arrivals that complete one phase. One thread calls it, then mbar_fence_init() and a
// __syncthreads() (cluster_sync() when other CTAs of the cluster will use the barrier).
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(smem_u32(bar)), "r"(count) : "memory");
}

// Makes mbarrier.init visible to the async proxy (TMA) and to the rest of the cluster.
__device__ __forceinline__ void mbar_fence_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// One arrival of this thread on a barrier of its own CTA.
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("{\n\t.reg .b64 st;\n\tmbarrier.arrive.shared::cta.b64 st, [%0];\n\t}"
               :: "r"(smem_u32(bar)) : "memory");
}

// Arrive on the barrier at `bar`'s offset in CTA `cta` of this cluster (mapa; may be this CTA).
// .release.cta semantics (as CUTLASS's ClusterBarrier), enough to free a stage only wgmma read;
// .release.cluster would add a MEMBAR.ALL.GPU per arrival (1.75x slower GEMM).
__device__ __forceinline__ void mbar_arrive_cluster(uint64_t* bar, uint32_t cta) {
  asm volatile("{\n\t.reg .b32 ra;\n\tmapa.shared::cluster.u32 ra, %0, %1;\n\t"
               "mbarrier.arrive.shared::cluster.b64 _, [ra];\n\t}"
               :: "r"(smem_u32(bar)), "r"(cta) : "memory");
}

// One arrival that also announces `bytes` of asynchronous (TMA) traffic for this phase: all bytes
// that will land on THIS barrier, including those multicast here by other CTAs of the cluster.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
               :: "r"(smem_u32(bar)), "r"(bytes) : "memory");
}

// Announces `bytes` more of TMA traffic for the current phase without arriving.
__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;"
               :: "r"(smem_u32(bar)), "r"(bytes) : "memory");
}

// Non-blocking test of phase `parity`; true once that phase has completed.
__device__ __forceinline__ bool mbar_try_wait(uint64_t* bar, uint32_t parity) {
  uint32_t done;
  asm volatile("{\n\t.reg .pred p;\n\t"
               "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
               "selp.u32 %0, 1, 0, p;\n\t}"
               : "=r"(done) : "r"(smem_u32(bar)), "r"(parity) : "memory");
  return done != 0;
}

// Blocks until the phase of parity `parity` has completed: a fresh barrier is in phase 0, so
// mbar_wait(bar, 0) waits for its first completion and mbar_wait(bar, 1) returns at once.
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  asm volatile("{\n\t.reg .pred p;\n"
               "PTXB_WAIT_%=:\n\t"
               "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n\t"
               "@!p bra PTXB_WAIT_%=;\n\t}"
               :: "r"(smem_u32(bar)), "r"(parity) : "memory");
}

// Orders this thread's ordinary shared-memory writes before async-proxy reads (wgmma, TMA store).
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// barrier.cluster in two halves (arrive.release / wait.acquire); every thread of every CTA of the
// cluster must take part. cluster_sync() = both: also orders shared-memory writes across the cluster.
__device__ __forceinline__ void cluster_arrive() {
  asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() {
  asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
}
__device__ __forceinline__ void cluster_sync() { cluster_arrive(); cluster_wait(); }

// This CTA's rank in its cluster (0 .. cluster size - 1).
__device__ __forceinline__ uint32_t cluster_ctarank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}

// Named barrier for a subset of warps: `threads` (a multiple of 32) threads meet at barrier `id`
// (1..15; 0 is the one __syncthreads uses).
__device__ __forceinline__ void named_barrier_sync(uint32_t id, uint32_t threads) {
  asm volatile("bar.sync %0, %1;" :: "r"(id), "r"(threads) : "memory");
}

}  // namespace ptxbench
