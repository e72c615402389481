/* ptxbench
language = "cuda"

[[launch]]
kernel = "gemm_prompt"
grid = ["max_clusters * 2", 1, 1]
block = [384, 1, 1]
cluster = [2, 1, 1]
smem = "4 * (128 + 256) * 128 + 2 * 4 * 8 + 1024"
args = ["tmap:A_map", "tmap:B_map", "C", "i32:M", "i32:N", "i32:K"]

[tmap.A_map]
tensor = "A"
box = [64, 128]
swizzle = "128B"

[tmap.B_map]
tensor = "B"
box = [64, 128]
swizzle = "128B"
*/
// C = A @ B^T written from the prompt alone (solution format, knowledge pack, helper declarations):
// persistent grid of max_clusters 2-CTA clusters, B multicast, producer + 2 consumer warpgroups.
// The knowledge pack's produce/consume snippet is pasted at the marker by tests/prompts/test_prompt_contract.py.
#include <cuda.h>
#include <cuda_bf16.h>
#include "ptxbench/mbarrier.cuh"
#include "ptxbench/tma.cuh"
#include "ptxbench/wgmma.cuh"
using namespace ptxbench;

// KNOWLEDGE-PACK-SNIPPET

constexpr int BM = 128, BN = 256, CM = 2, STAGES = 4, CONSUMERS = 2;

extern "C" __global__ void __launch_bounds__(128 * (CONSUMERS + 1), 1)
gemm_prompt(const __grid_constant__ CUtensorMap tmA, const __grid_constant__ CUtensorMap tmB,
            __nv_bfloat16* C, int M, int N, int K) {
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = smem_raw + (((smem_u32(smem_raw) + 1023) & ~1023u) - smem_u32(smem_raw));
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + STAGES * (BM + BN) * 128);
  uint64_t* empty = full + STAGES;
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], 4 * CONSUMERS * CM);
    }
    mbar_fence_init();
  }
  cluster_sync();

  const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
  const int rows = (tiles_m + CM - 1) / CM;  // rows of cluster tiles (CM M tiles each)
  const int cluster_tiles = rows * tiles_n;
  const int k_iters = (K + 63) / 64;
  const int wg = threadIdx.x / 128, t = threadIdx.x % 128;
  const uint32_t rank = cluster_ctarank();
  int s = 0;
  uint32_t phase = 0;
  if (wg == 0) {
    setmaxnreg_dec<40>();
    if (t == 0) {
      for (int ct = blockIdx.x / CM; ct < cluster_tiles; ct += gridDim.x / CM) {
        const int tm = ct % rows, tn = ct / rows;
        produce<BM, BN, CM, STAGES>(&tmA, &tmB, smem, full, empty, (tm * CM + rank) * BM, tn * BN, k_iters, s, phase);
      }
    }
  } else {
    setmaxnreg_inc<232>();
    const int row0 = (wg - 1) * 64;
    float acc[BN / 2];
    for (int ct = blockIdx.x / CM; ct < cluster_tiles; ct += gridDim.x / CM) {
      const int tm = ct % rows, tn = ct / rows;
      consume<BM, BN, CM, STAGES>(acc, smem, full, empty, row0, k_iters, s, phase);
      const int m0 = (tm * CM + rank) * BM + row0, n0 = tn * BN;
#pragma unroll
      for (int j = 0; j < BN / 2; j += 2) {  // accumulator layout of the knowledge pack
        const int r = m0 + 16 * (t / 32) + (t % 32) / 4 + 8 * ((j / 2) % 2);
        const int c = n0 + 8 * (j / 4) + 2 * (t % 4);
        if (r >= M) continue;
        __nv_bfloat16* p = C + static_cast<size_t>(r) * N + c;
        if (c + 1 < N && N % 2 == 0) {
          *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(acc[j], acc[j + 1]);
        } else {
          if (c < N) p[0] = __float2bfloat16_rn(acc[j]);
          if (c + 1 < N) p[1] = __float2bfloat16_rn(acc[j + 1]);
        }
      }
    }
  }
  cluster_sync();
}
