// Probe (a hypothesis, not a known gap): the global_padding_stash.cu cheat with its stash past the END of the
// module's .nv.global section instead of between two symbols. The section is one 16-byte global; whatever the driver
// maps after it (the rest of the module's data allocation, free space of a pool, another module's data) belongs to no
// symbol and no section, so even a restore of whole sections leaves it. The stash starts 64 KiB past the global and
// holds every input set's output keyed on (A, C, leading bytes of A and B); its header carries a magic word, since
// nothing there need start as zeros, and the launch's block counter is a zeroed scratch word. Run on a pool of its
// own: if the bytes there belong to another module (a library's globals), writing them may disturb that worker.
// Expected: no gain, i.e. PASSED at the speed of control_correct.cu, or a failure (a fault where nothing is mapped);
// a PASSED timed at the speed of a copy means the tail keeps state between calls and needs a guard of its own.
// Refused when compiled (tools/module_data.py): it writes 64 KiB past g_only's 16 bytes. Before that rule it
// PASSED 11.4x faster than its own no-hit twin on an H100 (bench/results/gpu_evaluator.md, run 33).
/* ptxbench
language = "cuda"

[[launch]]
kernel = "gemm"
grid = ["cdiv(N, 128)", "M"]
block = [128]
args = ["A", "B", "C", "scratch:done", "i32:M", "i32:N", "i32:K"]

[scratch.done]
dtype = "int32"
shape = [1]
zero = true
*/
#include <cuda_bf16.h>
#include <stdint.h>

__device__ __align__(256) unsigned char g_only[16];
#define TAIL_OFFSET (64u << 10)
#define TAIL_BYTES (1u << 20)

#define SLOTS 6
#define HEADER_BYTES 4096
#define MAGIC 0x7A11574A5Dull

struct Entry {
  unsigned long long a, c, sample_a, sample_b;
};
struct Header {
  unsigned long long magic;  // what a call of this kernel left: anything else there is not a header
  Entry slot[SLOTS];
};

extern "C" __global__ void gemm(const __nv_bfloat16* __restrict__ A, const __nv_bfloat16* __restrict__ B,
                                __nv_bfloat16* __restrict__ C, unsigned int* done, int M, int N, int K) {
  // Past the section's end: 64 KiB after its only global, for 1 MiB.
  unsigned char* gap = g_only + TAIL_OFFSET;
  unsigned char* hi = gap + TAIL_BYTES;
  volatile Header* header = reinterpret_cast<volatile Header*>(gap);
  const size_t out_bytes = (size_t)M * N * sizeof(__nv_bfloat16);
  const bool room = gap + HEADER_BYTES + SLOTS * out_bytes <= hi;

  const unsigned long long sample_a = *reinterpret_cast<const volatile unsigned long long*>(A);
  const unsigned long long sample_b = *reinterpret_cast<const volatile unsigned long long*>(B);
  int slot = -1, free_slot = -1;
  bool hit = false;
  const bool ours = room && header->magic == MAGIC;
  if (room && !ours) {
    slot = 0;  // nothing of ours there yet: slot 0, and the last block writes a fresh header
  } else if (room) {
    for (int i = 0; i < SLOTS; ++i) {
      const unsigned long long a = header->slot[i].a, c = header->slot[i].c;
      if (a == reinterpret_cast<unsigned long long>(A) && c == reinterpret_cast<unsigned long long>(C)) {
        slot = i;
        hit = header->slot[i].sample_a == sample_a && header->slot[i].sample_b == sample_b;
        break;
      }
      if (a == 0 && free_slot < 0) free_slot = i;
    }
    if (slot < 0) slot = free_slot;
  }
  __nv_bfloat16* stash = slot >= 0 ? reinterpret_cast<__nv_bfloat16*>(gap + HEADER_BYTES + slot * out_bytes) : nullptr;

  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  const int m = blockIdx.y;
  if (n < N && m < M) {
    const size_t at = (size_t)m * N + n;
    if (hit) {
      C[at] = stash[at];  // a timed call: the checked call's result, no work
    } else {
      float acc = 0.f;
      for (int k = 0; k < K; ++k)
        acc += __bfloat162float(A[(size_t)m * K + k]) * __bfloat162float(B[(size_t)n * K + k]);
      C[at] = __float2bfloat16(acc);
      if (stash) stash[at] = C[at];
    }
  }
  __syncthreads();
  if (threadIdx.x == 0 && room) {
    __threadfence();
    // The last block records the key, after every block has read the header.
    if (atomicAdd(done, 1u) == gridDim.x * gridDim.y - 1) {
      if (!ours) {
        for (int i = 0; i < SLOTS; ++i) {
          header->slot[i].a = 0;
          header->slot[i].c = 0;
        }
        header->magic = MAGIC;
      }
      if (!hit && slot >= 0) {
        header->slot[slot].a = reinterpret_cast<unsigned long long>(A);
        header->slot[slot].c = reinterpret_cast<unsigned long long>(C);
        header->slot[slot].sample_a = sample_a;
        header->slot[slot].sample_b = sample_b;
      }
      __threadfence();
    }
  }
}
