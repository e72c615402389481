// Calls every helper of prompts/helpers_sm90a.md once, spelled as the prompt shows it
// (tests/prompts/test_prompt_contract.py compiles it and checks that no helper is missing here).
#include <cuda.h>
#include "ptxbench/mbarrier.cuh"
#include "ptxbench/tma.cuh"
#include "ptxbench/wgmma.cuh"
using namespace ptxbench;

extern "C" __global__ void __launch_bounds__(256, 1)
helpers_calls(const __grid_constant__ CUtensorMap tmA, float* out) {
  __shared__ __align__(1024) uint8_t tile[64 * 128 + 16 * 128];
  __shared__ uint64_t bars[2];
  float acc[8];
  const uint32_t rank = cluster_ctarank();
  if (threadIdx.x == 0) {
    mbar_init(&bars[0], 1);
    mbar_init(&bars[1], 2);
    mbar_fence_init();
  }
  cluster_sync();
  if (threadIdx.x >= 128) {
    setmaxnreg_dec<40>();
    if (threadIdx.x == 128) {
      tma_prefetch_desc(&tmA);
      mbar_expect_tx(&bars[0], 8192);
      mbar_arrive_expect_tx(&bars[0], 8192);
      tma_load_2d(tile, &tmA, &bars[0], 0, 0);
      tma_load_2d_multicast(tile + 4096, &tmA, &bars[0], 0, 32, 0x3);
    }
  } else {
    setmaxnreg_inc<232>();
    mbar_wait(&bars[0], 0);
    while (!mbar_try_wait(&bars[0], 0)) {
    }
    wgmma_fence();
    const uint64_t da = make_desc_sw128(tile);
    const uint64_t db = make_desc_sw128(tile + 64 * 128);
    wgmma_m64k16_bf16<16>(acc, da, db, 0);
    wgmma_m64k16_bf16<16>(acc, da + 2, db + 2, threadIdx.x < 1024);
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_fence_regs(acc);
    if (threadIdx.x % 32 == 0) {
      mbar_arrive(&bars[1]);
      mbar_arrive_cluster(&bars[1], rank ^ 1);
    }
    named_barrier_sync(1, 128);
    reinterpret_cast<float*>(tile)[threadIdx.x] = acc[0] + acc[7];
    fence_proxy_async();
    named_barrier_sync(1, 128);
    if (threadIdx.x == 0) {
      tma_store_2d(&tmA, tile, 0, 0);
      tma_store_commit();
      tma_store_wait_read<0>();
      tma_store_wait<0>();
    }
    out[threadIdx.x] = static_cast<float>(smem_u32(tile));
  }
  cluster_arrive();
  cluster_wait();
}
