"""stats_wide: L2 and Dr reach the consumers in 16-byte loads, from a layout the preprocess writes for them.

The reference's consumers read each block's L2 and Dr rows with ld.shared.v2: per 64 query rows a thread needs the
pairs (8 a + 2 t, + 1) for a = 0..7 (t = lane % 4), eight 8-byte loads for L2 and eight for Dr in every 128-wide
block (16 of the shared-memory instructions a thread issues per block besides the wgmmas; the
profile has mio_throttle, the shared-memory instruction queue full, at the wgmma issue). Here the preprocess stores
row 8 a + 2 t + e of each 64-row block at 16 t + 4 ((a / 2) ^ (t / 2)) + 2 (a % 2) + e: a thread's sixteen values are
four 16-byte vectors (vector i holds a = 2 i, 2 i + 1), and the XOR puts the four t of a phase of 8 lanes on four
different groups of banks. The bulk copies move each 64-row block as it is, so the main kernel reads four
ld.shared.v4 per array and block (D = 64's 128-row blocks: eight). Nothing else reads L2 or Dr.
"""
from __future__ import annotations

LDS128 = ("__device__ __forceinline__ float2 lds64(const float* p) {\n",
          "__device__ __forceinline__ float4 lds128(const float* p) {  // stats_wide\n"
          "  float4 v;\n"
          '  asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)\n'
          '               : "r"(smem_u32(p)));\n'
          "  return v;\n}\n"
          "__device__ __forceinline__ float2 lds64(const float* p) {\n")

# the preprocess: each row's statistics at its place in the wide layout
PRE = ("""  if (lane == 0) {
    Dr[row] = sum;
    L2[row] = LSE[row] * LOG2E;
  }
""", """  // stats_wide: row 8 a + 2 t + e of each 64-row block at 16 t + 4 ((a / 2) ^ (t / 2)) + 2 (a % 2) + e, so that a
  // consumer thread's values (its pairs of every 8-row group) are four 16-byte vectors
  const int col = row % 64, a = col / 8, t4 = (col % 8) / 2;
  const int prow = row - col + 16 * t4 + 4 * ((a / 2) ^ (t4 / 2)) + 2 * (a % 2) + col % 2;
  if (lane == 0) {
    Dr[prow] = sum;
    L2[prow] = LSE[row] * LOG2E;
  }
""")

# the D = 64 block (128 query rows: two 64-row blocks of the layout)
BLOCK_64 = [
    ("  for (int a = 0; a < QR / 8; ++a) l2[a] = lds64(sL2 + 8 * a + col0);\n",
     "  for (int i = 0; i < QR / 16; ++i) {  // stats_wide: vector i % 4 of 64-row block i / 4\n"
     "    const float4 v = lds128(sL2 + 64 * (i / 4) + 8 * col0 + 4 * ((i % 4) ^ (col0 / 4)));\n"
     "    l2[2 * i] = make_float2(v.x, v.y);\n    l2[2 * i + 1] = make_float2(v.z, v.w);\n  }\n"),
    ("  for (int a = 0; a < QR / 8; ++a) dr[a] = lds64(sDr + 8 * a + col0);\n",
     "  for (int i = 0; i < QR / 16; ++i) {  // stats_wide\n"
     "    const float4 v = lds128(sDr + 64 * (i / 4) + 8 * col0 + 4 * ((i % 4) ^ (col0 / 4)));\n"
     "    dr[2 * i] = make_float2(v.x, v.y);\n    dr[2 * i + 1] = make_float2(v.z, v.w);\n  }\n"),
]

# the 128-wide block: one vector per two 8-row groups
BLOCK_128 = [
    ("""  for (int a = 0; a < 8; ++a) {
    const float2 l2 = lds64(sL2 + 8 * a + col0);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int j = 4 * a + k, q = 8 * a + col0 + (k % 2);
      float x = ex2(fmaf(s[j], sl2, -(k % 2 ? l2.y : l2.x)));
      if (mask && key0 + 64 * c + r + 8 * (k / 2) > q0 + q) x = 0.f;
      e[j] = x;
    }
  }
""", """  for (int i = 0; i < 4; ++i) {  // stats_wide: vector i holds the pairs of a = 2 i, 2 i + 1
    const float4 l4 = lds128(sL2 + 8 * col0 + 4 * (i ^ (col0 / 4)));
#pragma unroll
    for (int a = 2 * i; a < 2 * i + 2; ++a) {
      const float2 l2 = a % 2 ? make_float2(l4.z, l4.w) : make_float2(l4.x, l4.y);
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int j = 4 * a + k, q = 8 * a + col0 + (k % 2);
        float x = ex2(fmaf(s[j], sl2, -(k % 2 ? l2.y : l2.x)));
        if (mask && key0 + 64 * c + r + 8 * (k / 2) > q0 + q) x = 0.f;
        e[j] = x;
      }
    }
  }
"""),
    ("""  for (int a = 0; a < 8; ++a) {
    const float2 dr = lds64(sDr + 8 * a + col0);
#pragma unroll
    for (int k = 0; k < 4; ++k) p[4 * a + k] = e[4 * a + k] * (p[4 * a + k] - (k % 2 ? dr.y : dr.x));
  }
""", """  for (int i = 0; i < 4; ++i) {  // stats_wide
    const float4 d4 = lds128(sDr + 8 * col0 + 4 * (i ^ (col0 / 4)));
#pragma unroll
    for (int a = 2 * i; a < 2 * i + 2; ++a) {
      const float2 dr = a % 2 ? make_float2(d4.z, d4.w) : make_float2(d4.x, d4.y);
#pragma unroll
      for (int k = 0; k < 4; ++k) p[4 * a + k] = e[4 * a + k] * (p[4 * a + k] - (k % 2 ? dr.y : dr.x));
    }
  }
"""),
]

STATS_WIDE = [LDS128, PRE, *BLOCK_64, *BLOCK_128]
