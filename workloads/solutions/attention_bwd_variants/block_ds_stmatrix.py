"""ds_stmatrix: st_static's 128-wide block with the dS^T tile written by stmatrix (four 8 x 8 bf16 matrices per
instruction) instead of one st.shared.b32 per packed pair.

The reference's profile (attention_bwd.md, 2026-12-01) has the main kernel bound by L1 / shared memory (68% of its
peak), with mio_throttle (the shared-memory instruction queue full) at the dQ tile's stores and at the S^T / dP^T
wgmma issue, and 6.6% of the stall samples on the dS^T tile's 16 st.shared.b32 per thread and block. A consumer's
dS^T fragment is in wgmma's accumulator layout, which is stmatrix's: for matrix k a lane holds the pair at row
lane / 4, columns 2 (lane % 4), and register 4 g + k of the 16 packed pairs is matrix k of column group pair g (rows
+0 / +8, 8-column groups 2 g / 2 g + 1). Lane l gives the address of row l % 8 of matrix l / 8, in the same 128-byte
swizzled layout. The same bytes in a quarter of the instructions.
"""
from __future__ import annotations

STMATRIX_HELPER = ('__device__ __forceinline__ void sts32(const void* p, uint32_t v) {\n'
                   '  asm volatile("st.shared.b32 [%0], %1;" :: "r"(smem_u32(p)), "r"(v) : "memory");\n}\n',
                   '__device__ __forceinline__ void sts32(const void* p, uint32_t v) {\n'
                   '  asm volatile("st.shared.b32 [%0], %1;" :: "r"(smem_u32(p)), "r"(v) : "memory");\n}\n'
                   '// ds_stmatrix: four 8 x 8 bf16 matrices from a warp\'s registers (a, b, c, d: matrices 0-3), lane l '
                   'addressing\n// row l % 8 of matrix l / 8\n'
                   '__device__ __forceinline__ void stmatrix_x4(const void* p, uint32_t a, uint32_t b, uint32_t c, '
                   'uint32_t d) {\n'
                   '  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" :: '
                   '"r"(smem_u32(p)), "r"(a), "r"(b),\n               "r"(c), "r"(d) : "memory");\n}\n')

DS_STORES = ("""#pragma unroll
  for (int i = 0; i < 16; ++i) {
    const int row = 64 * c + r + 8 * (i % 2), q = 8 * (i / 2) + col0;
    sts32(buf + row * 128 + (((q / 8) ^ (row % 8)) * 16) + (q % 8) * 2, ds[i]);
  }
""", """  {  // ds_stmatrix: the tile by four stmatrix.x4 (matrices: rows +0 / +8 x column groups 2 g / 2 g + 1)
    const int row = 64 * c + 16 * (t / 32) + lane % 8 + 8 * ((lane / 8) % 2);  // the row this lane addresses
#pragma unroll
    for (int g = 0; g < 4; ++g)
      stmatrix_x4(buf + row * 128 + (((2 * g + lane / 16) ^ (row % 8)) * 16), ds[4 * g], ds[4 * g + 1], ds[4 * g + 2],
                  ds[4 * g + 3]);
  }
""")

DS_STMATRIX = [STMATRIX_HELPER, DS_STORES]
