// Kernels that leave a tag in shared, reserved-shared and local memory, and kernels that count what they find of it
// there without writing it first: the scrub's GPU test (tests/tools/test_scrub.py) and bench/context_isolation.py.
#ifndef FRAME
#define FRAME 4096
#endif

#define WORDS (FRAME / 4)
extern "C" __global__ void __launch_bounds__(1024, 2) leave_local(unsigned tag) {
  volatile unsigned frame[WORDS];
  for (int i = 0; i < WORDS; ++i) frame[i] = tag ^ i;
}
extern "C" __global__ void __launch_bounds__(1024, 2) find_local(unsigned* hits, unsigned tag, int never) {
  volatile unsigned frame[WORDS];
  if (never) frame[threadIdx.x % WORDS] = tag;  // the loads below read memory the compiler cannot call undefined
  unsigned n = 0;
  for (int i = 0; i < WORDS; ++i) n += frame[i] == (tag ^ i);
  if (n) atomicAdd(hits, n);
}
extern "C" __global__ void leave_shared(unsigned tag, unsigned words) {
  extern __shared__ unsigned smem[];
  volatile unsigned* s = smem;
  for (unsigned i = threadIdx.x; i < words; i += blockDim.x) s[i] = tag ^ i;
}
extern "C" __global__ void find_shared(unsigned* hits, unsigned tag, unsigned words) {
  extern __shared__ unsigned smem[];
  volatile unsigned* s = smem;
  unsigned n = 0;
  for (unsigned i = threadIdx.x; i < words; i += blockDim.x) n += s[i] == (tag ^ i);
  if (n) atomicAdd(hits, n);
}
// The CTA's reserved shared memory, addressed through its special registers (shared-window offsets).
__device__ unsigned reserved(unsigned i, unsigned* end) {
  unsigned b, e;
  asm volatile("mov.u32 %0, %%reserved_smem_offset_begin;" : "=r"(b));
  asm volatile("mov.u32 %0, %%reserved_smem_offset_end;" : "=r"(e));
  *end = e;
  return b + 4 * i;
}
extern "C" __global__ void leave_reserved(unsigned tag) {
  unsigned end, at = reserved(threadIdx.x, &end);
  if (at < end) asm volatile("st.volatile.shared.b32 [%0], %1;" :: "r"(at), "r"(tag ^ threadIdx.x));
}
extern "C" __global__ void find_reserved(unsigned* hits, unsigned tag) {
  unsigned end, at = reserved(threadIdx.x, &end), v = 0;
  if (at < end) asm volatile("ld.volatile.shared.b32 %0, [%1];" : "=r"(v) : "r"(at));
  if (at < end && v == (tag ^ threadIdx.x)) atomicAdd(hits, 1u);
}
// The local memory above a small frame, up to the top of the thread's 16 MiB local window: a CUDA kernel's stack
// pointer starts below the top (0xfffc60 on an H100, bench/results/run33), and what lies between them is no frame's.
#define LOCAL_TOP (1u << 24)
__device__ volatile unsigned* above(volatile unsigned* anchor, unsigned* words) {
  const unsigned long long local = __cvta_generic_to_local((const void*)anchor) + 16;
  *words = local < LOCAL_TOP ? (unsigned)((LOCAL_TOP - local) / 4) : 0u;
  return reinterpret_cast<volatile unsigned*>(reinterpret_cast<unsigned long long>(anchor) + 16);
}
extern "C" __global__ void __launch_bounds__(1024, 2) leave_above(unsigned tag, int never) {
  volatile unsigned anchor[4];
  anchor[never & 3] = never;
  unsigned words;
  volatile unsigned* p = above(anchor, &words);
  for (unsigned i = 0; i < words; ++i) p[i] = tag ^ i;
}
extern "C" __global__ void __launch_bounds__(1024, 2) find_above(unsigned* hits, unsigned tag, int never) {
  volatile unsigned anchor[4];
  anchor[never & 3] = never;
  unsigned words, n = 0;
  volatile unsigned* p = above(anchor, &words);
  for (unsigned i = 0; i < words; ++i) n += p[i] == (tag ^ i);
  if (n) atomicAdd(hits, n);
}
