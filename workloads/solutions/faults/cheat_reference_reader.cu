// Cheat: never computes C; scans 256 MB either side of its output for the harness's float32 expected output
// (found by two elements it computes) and copies it. The expected outputs live in the referee process, out
// of reach. Expected: any failure (a fault on unmapped memory, or a wrong C), never PASSED.
/* ptxbench
language = "cuda"

[[launch]]
kernel = "search"
grid = [512]
block = [128]
args = ["A", "B", "C", "scratch:found", "i32:M", "i32:N", "i32:K"]

[[launch]]
kernel = "use"
grid = ["cdiv(N, 128)", "M"]
block = [128]
args = ["C", "scratch:found", "i32:M", "i32:N", "i32:0"]

[scratch.found]
dtype = "int64"
shape = [1]
zero = true
*/
#include <cuda_bf16.h>
#include <stdint.h>

// Two expected elements (row 0, columns 0 and 1), in fp32: what the float32 reference holds, to within rounding.
__device__ void expected_pair(const __nv_bfloat16* A, const __nv_bfloat16* B, int K, float* e) {
  float a = 0.f, b = 0.f;
  for (int k = 0; k < K; ++k) {
    a += __bfloat162float(A[k]) * __bfloat162float(B[k]);
    b += __bfloat162float(A[k]) * __bfloat162float(B[(size_t)K + k]);
  }
  e[0] = a;
  e[1] = b;
}

__device__ bool near(float x, float e) { return fabsf(x - e) <= 1e-3f * fabsf(e) + 1e-6f; }

// Every thread scans its slice of [C - WINDOW, C + WINDOW) for two consecutive floats that match.
extern "C" __global__ void search(const __nv_bfloat16* __restrict__ A, const __nv_bfloat16* __restrict__ B,
                                  const __nv_bfloat16* C, unsigned long long* found, int M, int N, int K) {
  __shared__ float e[2];
  if (threadIdx.x == 0) expected_pair(A, B, K, e);
  __syncthreads();
  const long long window = 256ll << 20;
  const long long words = 2 * window / 4;
  const long long threads = (long long)gridDim.x * blockDim.x;
  const long long per = (words + threads - 1) / threads;
  const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  const char* base = reinterpret_cast<const char*>(C) - window;
  for (long long i = tid * per; i < (tid + 1) * per && i + 1 < words; ++i) {
    const float* p = reinterpret_cast<const float*>(base + 4 * i);
    if (near(p[0], e[0]) && near(p[1], e[1])) atomicCAS(found, 0ull, reinterpret_cast<unsigned long long>(p));
  }
}

// mode 0: copy what was found into C; mode 1: overwrite what was found with this kernel's own answer (zeros).
extern "C" __global__ void use(__nv_bfloat16* C, const unsigned long long* found, int M, int N, int mode) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  const int m = blockIdx.y;
  if (n >= N || m >= M) return;
  float* ref = reinterpret_cast<float*>(*found);
  if (ref && mode == 1) ref[(size_t)m * N + n] = 0.f;
  C[(size_t)m * N + n] = __float2bfloat16(ref && mode == 0 ? ref[(size_t)m * N + n] : 0.f);
}
