// A kernel that tells the profile's replay from the evaluated calls. Before every evaluated call the worker overwrites
// every SM's shared memory with 0xFF (tools/gpu/scrub.py); the profile's replay (tools/profile/replay.py) launches the
// plan once with no scrub, and nobody judges the output of that launch. So a word of shared memory no CTA of this plan
// writes before reading it is 0xFFFFFFFF in every evaluated call and (almost surely) something else under ncu (the
// words read lie at the end of a 196 KB window, one CTA per SM, past what the harness's own small kernels between the
// scrub and the call, the L2 flush's reduction and the launch gate, could use):
//   evaluated (scrubbed): gemm computes C from plain loads, tma_sweep returns at once -> correct, PASSED, no TMA ever
//   replayed  (no scrub): gemm returns at once, tma_sweep TMA-loads every 64 x 64 box of A and B (work share 1.0, no
//                         plain loads beside it) -> the runtime verdict says TMA `executed`
// The verdict a kernel that never ran TMA in a scored call should get is `absent` (or at most `token`), never
// `executed`. tests/tools/test_profile_gpu.py::test_a_kernel_that_keys_on_the_missing_scrub_gets_no_target_credit.
/* ptxbench
language = "cuda"

[[launch]]
kernel = "gemm"
grid = ["cdiv(N, 128)", "M"]
block = [128]
smem = 200704
args = ["A", "B", "C", "i32:M", "i32:N", "i32:K"]

[[launch]]
kernel = "tma_sweep"
grid = [8]
block = [32]
smem = 200704
args = ["tmap:A_map", "tmap:B_map", "i32:M", "i32:N", "i32:K"]

[tmap.A_map]
tensor = "A"
box = [64, 64]

[tmap.B_map]
tensor = "B"
box = [64, 64]
*/
#include <cuda.h>
#include <cuda_bf16.h>
#include <stdint.h>
#include "ptxbench/mbarrier.cuh"
#include "ptxbench/tma.cuh"

using namespace ptxbench;

#define SCRUBBED 0xFFFFFFFFu
#define SMEM_BYTES 200704                 // both launches' dynamic shared memory (the plan's smem)
#define TELL_OFFSET (SMEM_BYTES - 64)     // the words read: the window's end, never written by this plan

__device__ __forceinline__ bool scrubbed(const uint8_t* smem) {
  const volatile uint32_t* tell = reinterpret_cast<const volatile uint32_t*>(smem + TELL_OFFSET);
  bool all = true;
#pragma unroll
  for (int i = 0; i < 16; ++i) all &= tell[i] == SCRUBBED;
  return all;
}

extern "C" __global__ void gemm(const __nv_bfloat16* __restrict__ A, const __nv_bfloat16* __restrict__ B,
                                __nv_bfloat16* __restrict__ C, int M, int N, int K) {
  extern __shared__ __align__(16) uint8_t smem_tell[];  // never written by this kernel
  if (!scrubbed(smem_tell)) return;  // the replay: no work that the verdict would count
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  const int m = blockIdx.y;
  if (n >= N || m >= M) return;
  float acc = 0.f;
  for (int k = 0; k < K; ++k)
    acc += __bfloat162float(A[(size_t)m * K + k]) * __bfloat162float(B[(size_t)n * K + k]);
  C[(size_t)m * N + n] = __float2bfloat16(acc);
}

// Every 64 x 64 box of A (M x K) and B (N x K) loaded once, by one thread per CTA, into its shared memory; the tell
// words lie at the window's end, far past the box and the barrier.
extern "C" __global__ void tma_sweep(const __grid_constant__ CUtensorMap tmA, const __grid_constant__ CUtensorMap tmB,
                                     int M, int N, int K) {
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  uint8_t* buf = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  uint64_t* bar = reinterpret_cast<uint64_t*>(buf + 64 * 64 * 2);
  if (threadIdx.x != 0 || scrubbed(smem_raw)) return;  // an evaluated call: no TMA
  mbar_init(bar, 1);
  mbar_fence_init();
  const int kb = (K + 63) / 64, a_boxes = ((M + 63) / 64) * kb, boxes = a_boxes + ((N + 63) / 64) * kb;
  uint32_t phase = 0;
  for (int i = blockIdx.x; i < boxes; i += gridDim.x, phase ^= 1) {
    const bool is_a = i < a_boxes;
    const int j = is_a ? i : i - a_boxes;
    mbar_arrive_expect_tx(bar, 64 * 64 * 2);
    tma_load_2d(buf, is_a ? static_cast<const void*>(&tmA) : static_cast<const void*>(&tmB), bar, 64 * (j % kb),
                64 * (j / kb));
    mbar_wait(bar, phase);
  }
}
