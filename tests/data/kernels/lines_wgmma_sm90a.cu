/* ptxbench
# A plan-style header block: the compiled file keeps these lines, so line N of this file is line N
# in every report. One warpgroup runs a single m64n64k16 wgmma on shared tiles, guarded by an
# mbarrier from the ptxbench wrappers, and writes its fp32 accumulators.
[[kernel]]
entry = "lines_wgmma"
*/
#include <cstdint>
#include <ptxbench/mbarrier.cuh>
using namespace ptxbench;

__device__ __forceinline__ uint64_t make_desc(const void* smem) {
  uint64_t addr = (static_cast<uint64_t>(__cvta_generic_to_shared(smem)) >> 4) & 0x3FFF;
  return addr | (uint64_t(8) << 16) | (uint64_t(8) << 32);
}

extern "C" __global__ void __launch_bounds__(128) lines_wgmma(float* out) {
  __shared__ alignas(1024) uint16_t tile_a[64 * 16];
  __shared__ alignas(1024) uint16_t tile_b[64 * 16];
  __shared__ alignas(8) uint64_t bar;
  for (int i = threadIdx.x; i < 64 * 16; i += 128) { tile_a[i] = 0x3F80; tile_b[i] = 0x3F80; }
  if (threadIdx.x == 0) mbar_init(&bar, 128);
  __syncthreads();
  mbar_arrive(&bar);
  mbar_wait(&bar, 0);
  uint64_t da = make_desc(tile_a), db = make_desc(tile_b);
  float d[32];
  for (int i = 0; i < 32; ++i) d[i] = 0.f;
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(da), "l"(db));
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
  for (int i = 0; i < 32; ++i) out[threadIdx.x * 32 + i] = d[i];
}
