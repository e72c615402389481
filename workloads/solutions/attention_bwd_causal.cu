// Reference causal attention backward (key j > query i masked): the plan passes causal = 1; the code is attention_bwd.cu's.
// validates the harness on every attention backward workload (any B, H, S; D a multiple of 16 up
// to 128). Three kernels, no atomics:
//   attn_bwd_dot : Dr = rowsum(dO * O)                      (one warp per query row)
//   attn_bwd_dkdv: one CTA per 64-key tile, looping over query tiles: dV += P^T dO, dK += scale dS^T Q
//   attn_bwd_dq  : one CTA per 64-query tile, looping over key tiles: dQ = scale dS K
// with P = exp(scale Q K^T - LSE) and dS = P * (dO V^T - Dr). The causal variant differs only in its plan.
/* ptxbench
language = "cuda"

[[launch]]
kernel = "attn_bwd_dot"
grid = ["cdiv(B * H * S, 4)"]
block = [128]
args = ["dO", "O", "scratch:Dr", "i32:B * H * S", "i32:D"]

[[launch]]
kernel = "attn_bwd_dkdv"
grid = ["cdiv(S, 64)", "B * H"]
block = [128]
smem = "(4 * 64 * 129 + 2 * 64 * 65) * 4"
args = ["Q", "K", "V", "dO", "LSE", "scratch:Dr", "dK", "dV", "i32:S", "i32:D", "f32:scale", "i32:1"]

[[launch]]
kernel = "attn_bwd_dq"
grid = ["cdiv(S, 64)", "B * H"]
block = [128]
smem = "(4 * 64 * 129 + 64 * 65) * 4"
args = ["Q", "K", "V", "dO", "LSE", "scratch:Dr", "dQ", "i32:S", "i32:D", "f32:scale", "i32:1"]

[scratch.Dr]
dtype = "float32"
shape = ["B", "H", "S"]
*/
#include <cuda_bf16.h>
#include <stdint.h>

#define TILE 64
#define LD 129
#define PLD 65
#define LOG2E 1.4426950408889634f

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

// s[i][j] = sum_d A[ty*8+i][d] * B[tx+16j][d]   (A, B: 64 x D tiles)
__device__ __forceinline__ void mm_nt(float (&s)[8][4], const float* A, const float* B, int D, int tx, int ty) {
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) s[i][j] = 0.f;
  for (int d = 0; d < D; ++d) {
    float a[8], b[4];
#pragma unroll
    for (int i = 0; i < 8; ++i) a[i] = A[(ty * 8 + i) * LD + d];
#pragma unroll
    for (int j = 0; j < 4; ++j) b[j] = B[(tx + 16 * j) * LD + d];
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) s[i][j] += a[i] * b[j];
  }
}

// acc[i][j] += sum_t P[ty*8+i][t] * M[t][tx+16j]      (P: 64 x 64, M: 64 x D)
__device__ __forceinline__ void mm_nn(float (&acc)[8][8], const float* P, const float* M, int dcols, int tx, int ty) {
  for (int t = 0; t < TILE; ++t) {
    float p[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) p[i] = P[(ty * 8 + i) * PLD + t];
#pragma unroll
    for (int j = 0; j < 8; ++j)
      if (j < dcols) {
        const float m = M[t * LD + tx + 16 * j];
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[i][j] += p[i] * m;
      }
  }
}

// acc[i][j] += sum_t P[t][ty*8+i] * M[t][tx+16j]      (P^T times M)
__device__ __forceinline__ void mm_tn(float (&acc)[8][8], const float* P, const float* M, int dcols, int tx, int ty) {
  for (int t = 0; t < TILE; ++t) {
    float p[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) p[i] = P[t * PLD + ty * 8 + i];
#pragma unroll
    for (int j = 0; j < 8; ++j)
      if (j < dcols) {
        const float m = M[t * LD + tx + 16 * j];
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[i][j] += p[i] * m;
      }
  }
}

extern "C" __global__ void __launch_bounds__(128) attn_bwd_dot(const __nv_bfloat16* __restrict__ dO,
                                                               const __nv_bfloat16* __restrict__ O,
                                                               float* __restrict__ Dr, int rows, int D) {
  const int row = blockIdx.x * 4 + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= rows) return;
  float sum = 0.f;
  for (int c = lane; c < D; c += 32)
    sum += __bfloat162float(dO[(size_t)row * D + c]) * __bfloat162float(O[(size_t)row * D + c]);
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  if (lane == 0) Dr[row] = sum;
}

// P[q][k] and dS[q][k] for query tile q0 and key tile k0 (rows ty*8+i = queries, columns tx+16j = keys),
// written to Ps / dSs in shared memory. Qs, dOs hold the query tile; Ks, Vs the key tile.
__device__ __forceinline__ void probs_and_dscores(float* Ps, float* dSs, const float* Qs, const float* dOs,
                                                  const float* Ks, const float* Vs, const float* lse,
                                                  const float* dr, int q0, int k0, int S, int D, float scale,
                                                  int causal, int tx, int ty) {
  float s[8][4], dp[8][4];
  mm_nt(s, Qs, Ks, D, tx, ty);
  mm_nt(dp, dOs, Vs, D, tx, ty);
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int qi = q0 + ty * 8 + i;
    const float l2 = qi < S ? lse[qi] * LOG2E : 0.f;
    const float d = qi < S ? dr[qi] : 0.f;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int kj = k0 + tx + 16 * j;
      const bool masked = qi >= S || kj >= S || (causal && kj > qi);
      const float p = masked ? 0.f : exp2f(s[i][j] * scale * LOG2E - l2);
      Ps[(ty * 8 + i) * PLD + tx + 16 * j] = p;
      dSs[(ty * 8 + i) * PLD + tx + 16 * j] = p * (dp[i][j] - d);
    }
  }
}

extern "C" __global__ void __launch_bounds__(128) attn_bwd_dkdv(
    const __nv_bfloat16* __restrict__ Q, const __nv_bfloat16* __restrict__ K, const __nv_bfloat16* __restrict__ V,
    const __nv_bfloat16* __restrict__ dO, const float* __restrict__ LSE, const float* __restrict__ Dr,
    __nv_bfloat16* __restrict__ dK, __nv_bfloat16* __restrict__ dV, int S, int D, float scale, int causal) {
  extern __shared__ float smem[];
  float* Ks = smem;
  float* Vs = Ks + TILE * LD;
  float* Qs = Vs + TILE * LD;
  float* dOs = Qs + TILE * LD;
  float* Ps = dOs + TILE * LD;
  float* dSs = Ps + TILE * PLD;
  const int k0 = blockIdx.x * TILE, bh = blockIdx.y;
  const size_t base = (size_t)bh * S * D;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16, dcols = D / 16;
  load_tile(Ks, K + base, k0, S, D);
  load_tile(Vs, V + base, k0, S, D);
  float dk[8][8], dv[8][8];
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j) dk[i][j] = dv[i][j] = 0.f;
  const int q_start = causal ? (k0 / TILE) * TILE : 0;
  for (int q0 = q_start; q0 < S; q0 += TILE) {
    __syncthreads();
    load_tile(Qs, Q + base, q0, S, D);
    load_tile(dOs, dO + base, q0, S, D);
    __syncthreads();
    probs_and_dscores(Ps, dSs, Qs, dOs, Ks, Vs, LSE + (size_t)bh * S, Dr + (size_t)bh * S, q0, k0, S, D, scale,
                      causal, tx, ty);
    __syncthreads();
    mm_tn(dv, Ps, dOs, dcols, tx, ty);
    mm_tn(dk, dSs, Qs, dcols, tx, ty);
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int kr = k0 + ty * 8 + i;
    if (kr >= S) continue;
#pragma unroll
    for (int j = 0; j < 8; ++j)
      if (j < dcols) {
        dK[base + (size_t)kr * D + tx + 16 * j] = __float2bfloat16(dk[i][j] * scale);
        dV[base + (size_t)kr * D + tx + 16 * j] = __float2bfloat16(dv[i][j]);
      }
  }
}

extern "C" __global__ void __launch_bounds__(128) attn_bwd_dq(
    const __nv_bfloat16* __restrict__ Q, const __nv_bfloat16* __restrict__ K, const __nv_bfloat16* __restrict__ V,
    const __nv_bfloat16* __restrict__ dO, const float* __restrict__ LSE, const float* __restrict__ Dr,
    __nv_bfloat16* __restrict__ dQ, int S, int D, float scale, int causal) {
  extern __shared__ float smem[];
  float* Qs = smem;
  float* dOs = Qs + TILE * LD;
  float* Ks = dOs + TILE * LD;
  float* Vs = Ks + TILE * LD;
  float* Ps = Vs + TILE * LD;  // holds P, then is overwritten by nothing: dS goes to dSs
  float* dSs = Ps;             // P itself is not needed for dQ: reuse the buffer for dS
  const int q0 = blockIdx.x * TILE, bh = blockIdx.y;
  const size_t base = (size_t)bh * S * D;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16, dcols = D / 16;
  load_tile(Qs, Q + base, q0, S, D);
  load_tile(dOs, dO + base, q0, S, D);
  float dq[8][8];
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j) dq[i][j] = 0.f;
  const int k_end = causal ? min(S, q0 + TILE) : S;
  for (int k0 = 0; k0 < k_end; k0 += TILE) {
    __syncthreads();
    load_tile(Ks, K + base, k0, S, D);
    load_tile(Vs, V + base, k0, S, D);
    __syncthreads();
    float s[8][4], dp[8][4];
    mm_nt(s, Qs, Ks, D, tx, ty);
    mm_nt(dp, dOs, Vs, D, tx, ty);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int qi = q0 + ty * 8 + i;
      const float l2 = qi < S ? LSE[(size_t)bh * S + qi] * LOG2E : 0.f;
      const float d = qi < S ? Dr[(size_t)bh * S + qi] : 0.f;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int kj = k0 + tx + 16 * j;
        const bool masked = qi >= S || kj >= S || (causal && kj > qi);
        const float p = masked ? 0.f : exp2f(s[i][j] * scale * LOG2E - l2);
        dSs[(ty * 8 + i) * PLD + tx + 16 * j] = p * (dp[i][j] - d);
      }
    }
    __syncthreads();
    mm_nn(dq, dSs, Ks, dcols, tx, ty);
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int qi = q0 + ty * 8 + i;
    if (qi >= S) continue;
#pragma unroll
    for (int j = 0; j < 8; ++j)
      if (j < dcols) dQ[base + (size_t)qi * D + tx + 16 * j] = __float2bfloat16(dq[i][j] * scale);
  }
}
