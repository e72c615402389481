// Device-only CUDA with inline PTX: out[i] = in[i] * scale + 1 through an fma.rn.f32 asm block,
// and the same value rounded to bf16.
#include <cstdint>
#include <cuda_bf16.h>  // pulls in <nv/target> from CCCL

__device__ __forceinline__ float fma_asm(float a, float b, float c) {
  float d;
  asm volatile("fma.rn.f32 %0, %1, %2, %3;" : "=f"(d) : "f"(a), "f"(b), "f"(c));
  return d;
}

extern "C" __global__ void scale_add(float* out, __nv_bfloat16* out_bf16, const float* in, float scale, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    out[i] = fma_asm(in[i], scale, 1.0f);
    out_bf16[i] = __float2bfloat16(out[i]);
  }
}
