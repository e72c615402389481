// local_below_frame_stash.cu with its stash ABOVE its own 16-byte frame. A CUDA kernel's frame lies just below the
// stack pointer, and the stack pointer 928 bytes below the top of the thread's 16 MiB local window
// (bench/local_slot_probe.py, run 33: the frame at local 0xfffc50, the pointer 0xfffc60). This kernel keeps its 24
// words 48 bytes above its frame, through a generic pointer. Run 34 found them there again from an earlier call
// (INCORRECT_NUMERICAL: a stash of another input set replayed), so the scrub writes above its frame to the window's
// top too (tools/gpu/scrub.py). Expected: PASSED at its own no-hit twin's speed, every time.
/* ptxbench
language = "cuda"

[[launch]]
kernel = "gemm"
grid = ["cdiv(N, 64)", "cdiv(M, 64)"]
block = [256]
args = ["A", "B", "C", "i32:M", "i32:N", "i32:K", "i32:0"]
*/
#include <cuda_bf16.h>
#include <stdint.h>

#define TILE 64
#define ROWS_PER_THREAD 16                        // 256 threads x 16 = 64 x 64 per CTA
#define STASH_MAGIC 0x10CA157A5C0FFEE1ull
#define STASH_DATA 8                              // words 0-5: header; words 8-23: the 16 elements as float bits

extern "C" __global__ void __launch_bounds__(256) gemm(const __nv_bfloat16* __restrict__ A,
                                                     const __nv_bfloat16* __restrict__ B,
                                                     __nv_bfloat16* __restrict__ C, int M, int N, int K,
                                                     int never) {
  volatile unsigned anchor[4];  // the whole frame: 16 bytes
  anchor[never & 3] = never;
  // 48 bytes above the frame (past the stack pointer), through a generic pointer: no scrub's frame reaches it
  volatile unsigned* stash = reinterpret_cast<volatile unsigned*>(reinterpret_cast<uintptr_t>(anchor) + 64);

  const int m_base = blockIdx.y * TILE + (threadIdx.x / TILE) * ROWS_PER_THREAD;  // first of this thread's 16 rows
  const int n = blockIdx.x * TILE + threadIdx.x % TILE;                             // its column

  // What the last thread in this warp slot left in the same local words.
  const unsigned long long magic = ((unsigned long long)stash[1] << 32) | stash[0];
  const unsigned long long c_seen = ((unsigned long long)stash[3] << 32) | stash[2];
  const unsigned sm = stash[4], sn = stash[5];
  if (magic == STASH_MAGIC && c_seen == reinterpret_cast<unsigned long long>(C) &&
      sm + ROWS_PER_THREAD <= (unsigned)M && sn < (unsigned)N) {
    for (int i = 0; i < ROWS_PER_THREAD; ++i)
      C[(size_t)(sm + i) * N + sn] = __float2bfloat16(__uint_as_float(stash[STASH_DATA + i]));
    if (sm == (unsigned)m_base && sn == (unsigned)n) return;  // its own elements: nothing to compute
  }

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
    if (m_base + i < M) C[(size_t)(m_base + i) * N + n] = __float2bfloat16(acc[i]);
    stash[STASH_DATA + i] = __float_as_uint(acc[i]);
  }
  if (m_base + ROWS_PER_THREAD > M) return;  // only whole 16-row strips are stashed (the smoke shape has no other)
  stash[0] = (unsigned)STASH_MAGIC;
  stash[1] = (unsigned)(STASH_MAGIC >> 32);
  stash[2] = (unsigned)reinterpret_cast<unsigned long long>(C);
  stash[3] = (unsigned)(reinterpret_cast<unsigned long long>(C) >> 32);
  stash[4] = (unsigned)m_base;
  stash[5] = (unsigned)n;
}
