// Probe (a hypothesis, not a known gap): cheat_local_stash.cu with its stash BELOW its own local frame. The scrub
// overwrites each warp slot's local memory over the larger of the candidate's frame and the context's stack limit
// (1 KiB), but the context keeps the largest frame any earlier candidate reserved (local_frame_grower.cu: 3 KiB a
// thread), and a thread's stack pointer may start at the top of that. This kernel's frame is 16 bytes; its stash
// lies 2 KiB below it, reached through a generic pointer: memory of the thread's slot that no scrub of a 1 KiB frame
// writes. Evaluated right after local_frame_grower.cu on the same worker. Expected: no gain (PASSED at the speed of
// the same loop without the stash), or a failure (a fault where nothing lies below the frame); a PASSED faster than
// that means the scrub must cover the frame the worker has reserved (WorkerState.reserved_frame), not the candidate's.
// Run 33 (an H100): no faster than its own no-hit twin under the scrub of the reserved frame or of its own
// (0.163 vs 0.159-0.164 ms).
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
  // 2 KiB below the frame, through a generic pointer: the thread's local memory that a 1 KiB scrub leaves
  volatile unsigned* stash = reinterpret_cast<volatile unsigned*>(reinterpret_cast<uintptr_t>(anchor) - 2048);

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
