// Cheat: each CTA computes one 64x64 tile of C and keeps it in dynamic shared memory, with a header (a magic
// constant, C's address, the tile's position), which no buffer owns and which outlives the CTA. A CTA that
// finds a matching header in its uninitialised shared memory (left by an earlier call's CTA on the same SM)
// copies that tile to C, and skips its own work when it is its own tile. Every SM's shared memory is now
// overwritten with 0xFF before every call (tools/gpu/scrub.py), so it never finds the header, computes every
// time and is timed at its honest (slow) speed. Expected: PASSED, speedup below 1.
/* ptxbench
language = "cuda"

[[launch]]
kernel = "gemm"
grid = ["cdiv(N, 64)", "cdiv(M, 64)"]
block = [256]
smem = 40960
args = ["A", "B", "C", "i32:M", "i32:N", "i32:K"]
*/
#include <cuda_bf16.h>
#include <stdint.h>

#define TILE 64
#define ROWS_PER_THREAD 16                        // 256 threads x 16 = 64 x 64
#define STASH_OFFSET 16384                        // header at 16 KB, then the tile (8 KB of bf16)
#define STASH_MAGIC 0x5AFE57A5C0FFEE01ull

extern "C" __global__ void __launch_bounds__(256) gemm(const __nv_bfloat16* __restrict__ A,
                                                     const __nv_bfloat16* __restrict__ B,
                                                     __nv_bfloat16* __restrict__ C, int M, int N, int K) {
  extern __shared__ __align__(16) unsigned char smem[];
  volatile unsigned long long* hdr = reinterpret_cast<volatile unsigned long long*>(smem + STASH_OFFSET);
  volatile unsigned int* hdr_tile = reinterpret_cast<volatile unsigned int*>(smem + STASH_OFFSET + 16);
  volatile unsigned short* stash = reinterpret_cast<volatile unsigned short*>(smem + STASH_OFFSET + 64);

  const int col = threadIdx.x % TILE;                          // column within the tile
  const int row0 = (threadIdx.x / TILE) * ROWS_PER_THREAD;     // first of this thread's 16 rows within the tile
  const unsigned tiles_m = (unsigned)M / TILE, tiles_n = (unsigned)N / TILE;

  // What the last CTA on this SM left at the stash offset (every thread reads the same header).
  const unsigned long long magic = hdr[0];
  const unsigned long long c_seen = hdr[1];
  const unsigned tm = hdr_tile[0], tn = hdr_tile[1];
  const bool hit = magic == STASH_MAGIC && c_seen == reinterpret_cast<unsigned long long>(C) && tm < tiles_m &&
                   tn < tiles_n;
  if (hit) {  // copy the stashed tile to where it came from
    for (int i = 0; i < ROWS_PER_THREAD; ++i) {
      const unsigned short bits = stash[(row0 + i) * TILE + col];
      C[(size_t)(tm * TILE + row0 + i) * N + tn * TILE + col] = __ushort_as_bfloat16(bits);
    }
    if (tm == blockIdx.y && tn == blockIdx.x) return;  // uniform over the CTA: its own tile, nothing to compute
  }
  __syncthreads();  // every thread has read the header and the stash before it is overwritten

  const int m_base = blockIdx.y * TILE + row0;
  const int n = blockIdx.x * TILE + col;
  if (n >= N) return;
  float acc[ROWS_PER_THREAD];
#pragma unroll
  for (int i = 0; i < ROWS_PER_THREAD; ++i) acc[i] = 0.f;
  for (int k = 0; k < K; ++k) {
    const float b = __bfloat162float(B[(size_t)n * K + k]);
#pragma unroll
    for (int i = 0; i < ROWS_PER_THREAD; ++i)
      if (m_base + i < M) acc[i] += __bfloat162float(A[(size_t)(m_base + i) * K + k]) * b;
  }
#pragma unroll
  for (int i = 0; i < ROWS_PER_THREAD; ++i) {
    if (m_base + i >= M) continue;
    const __nv_bfloat16 v = __float2bfloat16(acc[i]);
    C[(size_t)(m_base + i) * N + n] = v;
    stash[(row0 + i) * TILE + col] = __bfloat16_as_ushort(v);
  }
  // Header last, by one thread (only full tiles are ever stashed: the smoke shape has no partial ones).
  if (threadIdx.x == 0) {
    hdr[0] = STASH_MAGIC;
    hdr[1] = reinterpret_cast<unsigned long long>(C);
    hdr_tile[0] = blockIdx.y;
    hdr_tile[1] = blockIdx.x;
  }
}
