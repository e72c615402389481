// Reference GQA attention forward: attention_fwd.cu's code; the plan passes group = H // HKV (query head i reads KV head i // group).
// Simple and correct, not fast: it validates the harness on every attention forward workload
// (any B, H, S; D a multiple of 16 up to 128; GQA through `group` = H / HKV). One CTA of 128
// threads owns 64 query rows of one (batch, head) and streams 64-key tiles through shared memory
// with an online softmax (FlashAttention's recurrence). The causal variant differs only in its plan.
/* ptxbench
language = "cuda"

[[launch]]
kernel = "attn_fwd"
grid = ["cdiv(S, 64)", "B * H"]
block = [128]
smem = "(3 * 64 * 129 + 64 * 65) * 4"
args = ["Q", "K", "V", "O", "LSE", "i32:S", "i32:D", "i32:H", "i32:H // HKV", "f32:scale", "i32:0"]
*/
#include <cuda_bf16.h>
#include <stdint.h>

#define TILE 64
#define LD 129   // padded row stride (floats) of the 64 x D tiles: conflict-free column reads
#define PLD 65   // padded row stride of the 64 x 64 probability tile

// Rows [row0, row0 + 64) of a [S, D] bf16 matrix into a float tile; rows past S read as 0.
__device__ __forceinline__ void load_tile(float* dst, const __nv_bfloat16* src, int row0, int S, int D) {
  const int pairs = D / 2;
  for (int i = threadIdx.x; i < TILE * pairs; i += blockDim.x) {
    const int r = i / pairs, c = 2 * (i % pairs);
    float2 v = make_float2(0.f, 0.f);
    if (row0 + r < S) v = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(src + (size_t)(row0 + r) * D + c));
    dst[r * LD + c] = v.x;
    dst[r * LD + c + 1] = v.y;
  }
}

extern "C" __global__ void __launch_bounds__(128) attn_fwd(
    const __nv_bfloat16* __restrict__ Q, const __nv_bfloat16* __restrict__ K, const __nv_bfloat16* __restrict__ V,
    __nv_bfloat16* __restrict__ O, float* __restrict__ LSE, int S, int D, int H, int group, float scale, int causal) {
  extern __shared__ float smem[];
  float* Qs = smem;
  float* Ks = Qs + TILE * LD;
  float* Vs = Ks + TILE * LD;
  float* Ps = Vs + TILE * LD;

  const int q0 = blockIdx.x * TILE;
  const int bh = blockIdx.y;                       // b * H + h
  const int bkv = (bh / H) * (H / group) + (bh % H) / group;
  const __nv_bfloat16* q = Q + (size_t)bh * S * D;
  const __nv_bfloat16* k = K + (size_t)bkv * S * D;
  const __nv_bfloat16* v = V + (size_t)bkv * S * D;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;  // rows ty*8 + i, columns tx + 16*j
  const int dcols = D / 16;
  const float sl2 = scale * 1.4426950408889634f;  // scores in log2 units

  load_tile(Qs, q, q0, S, D);
  float m[8], l[8], acc[8][8];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    m[i] = -INFINITY;
    l[i] = 0.f;
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[i][j] = 0.f;
  }
  const int kv_end = causal ? min(S, q0 + TILE) : S;
  for (int k0 = 0; k0 < kv_end; k0 += TILE) {
    __syncthreads();
    load_tile(Ks, k, k0, S, D);
    load_tile(Vs, v, k0, S, D);
    __syncthreads();
    float s[8][4];
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) s[i][j] = 0.f;
    for (int d = 0; d < D; ++d) {
      float a[8], b[4];
#pragma unroll
      for (int i = 0; i < 8; ++i) a[i] = Qs[(ty * 8 + i) * LD + d];
#pragma unroll
      for (int j = 0; j < 4; ++j) b[j] = Ks[(tx + 16 * j) * LD + d];
#pragma unroll
      for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) s[i][j] += a[i] * b[j];
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int qi = q0 + ty * 8 + i;
      float rowmax = -INFINITY;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int kj = k0 + tx + 16 * j;
        const bool masked = kj >= S || (causal && kj > qi);
        s[i][j] = masked ? -INFINITY : s[i][j] * sl2;
        rowmax = fmaxf(rowmax, s[i][j]);
      }
#pragma unroll
      for (int off = 8; off > 0; off >>= 1) rowmax = fmaxf(rowmax, __shfl_xor_sync(0xffffffffu, rowmax, off));
      const float m_new = fmaxf(m[i], rowmax);
      const float base = m_new == -INFINITY ? 0.f : m_new;
      const float correction = exp2f(m[i] - base);
      float rowsum = 0.f;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float p = exp2f(s[i][j] - base);
        rowsum += p;
        Ps[(ty * 8 + i) * PLD + tx + 16 * j] = p;
      }
#pragma unroll
      for (int off = 8; off > 0; off >>= 1) rowsum += __shfl_xor_sync(0xffffffffu, rowsum, off);
      l[i] = l[i] * correction + rowsum;
      m[i] = m_new;
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[i][j] *= correction;
    }
    __syncthreads();
    for (int kk = 0; kk < TILE; ++kk) {
      float p[8];
#pragma unroll
      for (int i = 0; i < 8; ++i) p[i] = Ps[(ty * 8 + i) * PLD + kk];
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        if (j < dcols) {
          const float vv = Vs[kk * LD + tx + 16 * j];
#pragma unroll
          for (int i = 0; i < 8; ++i) acc[i][j] += p[i] * vv;
        }
      }
    }
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int qi = q0 + ty * 8 + i;
    if (qi >= S) continue;
    const float inv = 1.f / l[i];
#pragma unroll
    for (int j = 0; j < 8; ++j)
      if (j < dcols) O[((size_t)bh * S + qi) * D + tx + 16 * j] = __float2bfloat16(acc[i][j] * inv);
    if (tx == 0) LSE[(size_t)bh * S + qi] = (m[i] + log2f(l[i])) * 0.6931471805599453f;
  }
}
