// global_tail_stash.cu's way past module data (the driver's pool beside it, which nothing resets: 11.4x faster than
// its own no-hit twin when it ran, run 33), with the address laundered first: g_only's address read back byte by byte
// through a table of the numbers 0..255, in plain CUDA. A value loaded is data, so the check of module data no longer
// followed it, and a launch counter kept 64 KiB past g_only compiled. Refused when compiled (tools/address_use.py): the
// address's bits shifted and masked into a table's index.
/* ptxbench
language = "cuda"

[[launch]]
kernel = "gemm"
grid = ["cdiv(N, 128)", "M"]
block = [128]
args = ["A", "B", "C", "i32:M", "i32:N", "i32:K"]
*/
#include <cuda_bf16.h>
#include <stdint.h>

__device__ __align__(256) unsigned char g_only[16];
__constant__ unsigned char kIdent[256] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63, 64, 65, 66, 67, 68, 69, 70, 71, 72, 73, 74, 75, 76, 77, 78, 79, 80, 81, 82, 83, 84, 85, 86, 87, 88, 89, 90, 91, 92, 93, 94, 95, 96, 97, 98, 99, 100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 110, 111, 112, 113, 114, 115, 116, 117, 118, 119, 120, 121, 122, 123, 124, 125, 126, 127, 128, 129, 130, 131, 132, 133, 134, 135, 136, 137, 138, 139, 140, 141, 142, 143, 144, 145, 146, 147, 148, 149, 150, 151, 152, 153, 154, 155, 156, 157, 158, 159, 160, 161, 162, 163, 164, 165, 166, 167, 168, 169, 170, 171, 172, 173, 174, 175, 176, 177, 178, 179, 180, 181, 182, 183, 184, 185, 186, 187, 188, 189, 190, 191, 192, 193, 194, 195, 196, 197, 198, 199, 200, 201, 202, 203, 204, 205, 206, 207, 208, 209, 210, 211, 212, 213, 214, 215, 216, 217, 218, 219, 220, 221, 222, 223, 224, 225, 226, 227, 228, 229, 230, 231, 232, 233, 234, 235, 236, 237, 238, 239, 240, 241, 242, 243, 244, 245, 246, 247, 248, 249, 250, 251, 252, 253, 254, 255};

extern "C" __global__ void gemm(const __nv_bfloat16* __restrict__ A, const __nv_bfloat16* __restrict__ B,
                                __nv_bfloat16* __restrict__ C, int M, int N, int K) {
  const unsigned long long a = reinterpret_cast<unsigned long long>(g_only);
  unsigned long long b = 0;
#pragma unroll
  for (int j = 0; j < 8; ++j) b |= (unsigned long long)kIdent[(a >> (8 * j)) & 0xff] << (8 * j);
  unsigned int* counter = reinterpret_cast<unsigned int*>(b + (64u << 10));  // b == a, read as data
  if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) atomicAdd(counter, 1u);  // calls counted across calls
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  const int m = blockIdx.y;
  if (n >= N || m >= M) return;
  float acc = 0.f;
  for (int k = 0; k < K; ++k)
    acc += __bfloat162float(A[(size_t)m * K + k]) * __bfloat162float(B[(size_t)n * K + k]);
  C[(size_t)m * N + n] = __float2bfloat16(acc);
}
