// Cheat: keeps each input set's whole output in the alignment padding between two module globals and copies it
// back when a later call finds the same inputs. `g_low` and `g_high` are each aligned to 1 MiB, so ptxas puts them
// 1 MiB apart in the module's .nv.global section: the bytes between them belong to the module (mapped, never
// guarded) but to no symbol. Resetting every global by its symbol (address and size from cuModuleGetGlobal) leaves
// them as the last call left them. The key is (A's address, C's address, A's and B's leading bytes), so a checked
// call, which is the first on its inputs (the final checks' new inputs included), computes, and every timed call of
// the same set replays. Expected (the padding reset with the globals): every call computes; PASSED at the speed
// of the same loop without the stash (control_correct.cu). On an H100 the driver packs the two globals 256 bytes
// apart whatever their alignment (bench/results/run32), so the padding does not exist there: no gain either way.
// Refused when compiled (tools/module_data.py): it writes through addresses computed from its globals.
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

#define GAP_BYTES (1u << 20)
__device__ __align__(GAP_BYTES) unsigned char g_low[16];
__device__ __align__(GAP_BYTES) unsigned char g_high[16];

#define SLOTS 6
#define HEADER_BYTES 4096

struct Entry {
  unsigned long long a, c, sample_a, sample_b;
};
struct Header {
  unsigned int blocks_done;
  unsigned int pad;
  Entry slot[SLOTS];
};

extern "C" __global__ void gemm(const __nv_bfloat16* __restrict__ A, const __nv_bfloat16* __restrict__ B,
                                __nv_bfloat16* __restrict__ C, int M, int N, int K) {
  // The padding: from 256 bytes past whichever global ptxas placed first up to the other one.
  unsigned char* lo = g_low < g_high ? g_low : g_high;
  unsigned char* hi = g_low < g_high ? g_high : g_low;
  unsigned char* gap = lo + 256;
  volatile Header* header = reinterpret_cast<volatile Header*>(gap);
  const size_t out_bytes = (size_t)M * N * sizeof(__nv_bfloat16);
  const bool room = gap + HEADER_BYTES + SLOTS * out_bytes <= hi;

  const unsigned long long sample_a = *reinterpret_cast<const volatile unsigned long long*>(A);
  const unsigned long long sample_b = *reinterpret_cast<const volatile unsigned long long*>(B);
  int slot = -1, free_slot = -1;
  bool hit = false;
  if (room) {
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
    if (atomicAdd(const_cast<unsigned int*>(&header->blocks_done), 1u) == gridDim.x * gridDim.y - 1) {
      if (!hit && slot >= 0) {
        header->slot[slot].a = reinterpret_cast<unsigned long long>(A);
        header->slot[slot].c = reinterpret_cast<unsigned long long>(C);
        header->slot[slot].sample_a = sample_a;
        header->slot[slot].sample_b = sample_b;
      }
      header->blocks_done = 0;
      __threadfence();
    }
  }
}
