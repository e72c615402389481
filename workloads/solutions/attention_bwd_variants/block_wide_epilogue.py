"""The wide epilogue (dq_tiles_wide, own_keys_wide, and in tiles_stack / tiles_d96): dK and dV in 16-byte stores."""
from __future__ import annotations

# own_keys_wide, dq_tiles_wide: the dK / dV epilogue in 16-byte stores. A thread holds, for each of its two rows, 4 bytes (two bf16)
# of every 8-column group; the quad's four lanes together hold the group's 16 bytes. Four shuffle rounds transpose
# four groups among the quad, so lane q stores group g0 + q whole.
STORE_ROWS16 = r"""// The dK / dV epilogue in 16-byte stores (own_keys_wide, dq_tiles_wide). acc element j: row r + 8 ((j / 2) % 2), column
// 8 (j / 4) + 2 (lane % 4) + j % 2. For four 8-column groups at a time, the four lanes of a quad swap their bf16
// pairs (round i = 1..3: a lane sends its pair of group g0 + (q - i) % 4 and takes lane q + i's pair of group g0 + q), then
// each lane holds one group's eight columns and stores them as one 16-byte vector: a warp fills whole sectors.
__device__ __forceinline__ uint32_t pick4(uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, int k) {
  return k == 0 ? a0 : k == 1 ? a1 : k == 2 ? a2 : a3;
}

template <int N>
__device__ __forceinline__ void store_rows16(__nv_bfloat16* __restrict__ out, const float (&acc)[N], float mul,
                                             size_t row0, int D, int lane) {
  const int q = lane % 4;
#pragma unroll
  for (int h = 0; h < 2; ++h) {  // rows row0 and row0 + 8
#pragma unroll
    for (int g0 = 0; g0 < N / 4; g0 += 4) {
      uint32_t mine[4], got[4];
#pragma unroll
      for (int k = 0; k < 4; ++k)
        mine[k] = pack_bf16(acc[4 * (g0 + k) + 2 * h] * mul, acc[4 * (g0 + k) + 2 * h + 1] * mul);
      got[0] = pick4(mine[0], mine[1], mine[2], mine[3], q);  // got[i]: lane (q + i) % 4's pair of group g0 + q
#pragma unroll
      for (int i = 1; i < 4; ++i)
        got[i] = __shfl_sync(0xffffffffu, pick4(mine[0], mine[1], mine[2], mine[3], (q - i) & 3),
                             (lane & ~3) | ((q + i) & 3));
      // lane s's pair (columns 2s, 2s + 1 of the group) came in round (s - q) % 4
      const uint4 v = make_uint4(pick4(got[0], got[1], got[2], got[3], (0 - q) & 3),
                                 pick4(got[0], got[1], got[2], got[3], (1 - q) & 3),
                                 pick4(got[0], got[1], got[2], got[3], (2 - q) & 3),
                                 pick4(got[0], got[1], got[2], got[3], (3 - q) & 3));
      const int d = 8 * (g0 + q);
      if (d < D) *reinterpret_cast<uint4*>(out + (row0 + 8 * h) * D + d) = v;
    }
  }
}

"""

WIDE_EPILOGUE = [
    ("// HD: 128 (D = 96 or 128) or 64. GQA: K, V, dK, dV have B * HKV heads;",
     STORE_ROWS16 + "// HD: 128 (D = 96 or 128) or 64. GQA: K, V, dK, dV have B * HKV heads;"),
    ("""#pragma unroll
    for (int j = 0; j < HD / 2; j += 2) {
      const int d = 8 * (j / 4) + 2 * (lane % 4);
      if (d < D) {
        const size_t off = (row0 + 8 * ((j / 2) % 2)) * D + d;
        *reinterpret_cast<__nv_bfloat162*>(dV + off) = __floats2bfloat162_rn(dv[j], dv[j + 1]);
        *reinterpret_cast<__nv_bfloat162*>(dK + off) = __floats2bfloat162_rn(dk[j] * scale, dk[j + 1] * scale);
      }
    }""",
     """    store_rows16(dV, dv, 1.f, row0, D, lane);  // 16-byte stores: whole sectors (the wide epilogue)
    store_rows16(dK, dk, scale, row0, D, lane);"""),
]
