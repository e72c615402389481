// global_tail_stash.cu with its stash past a kernel PARAMETER's generic address instead of a module global's. The TMA
// kernels need a parameter's generic address (`cvta.param`: a __grid_constant__ CUtensorMap), and what the driver
// keeps around a launch's parameters (constant bank 0, in device memory) is no buffer of the protocol's. This kernel
// takes the generic address of its first parameter and keeps every input set's output 64 KiB past it. Expected:
// COMPILE_ERROR, at the line of the store (tools/param_reach.py: an address computed from a parameter's is only read).
// bench/param_address_probe.py asks the hardware whether a word written there stays from one launch to the next.
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
  // 64 KiB past the generic address of the first parameter (A's pointer), for 1 MiB.
  unsigned long long param;
  asm volatile("mov.b64 %0, gemm_param_0;\n\tcvta.param.u64 %0, %0;" : "=l"(param));
  unsigned char* gap = reinterpret_cast<unsigned char*>(param) + TAIL_OFFSET;
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
