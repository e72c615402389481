"""dq_stmatrix: ds_stmatrix with the fp32 dQ tile written by stmatrix too, in a layout made for it.

The reference's profile (attention_bwd.md, 2026-12-01): the dQ tile's 16 st.shared.v2.f32 per thread and block
hold 6.9% of the main kernel's stall samples, mostly mio_throttle (the shared-memory instruction queue full).
stmatrix stores b16 pairs, one 32-bit register per lane and matrix, so an fp32 value can travel as one "pair": a
matrix row of 16 bytes then holds one value from each of 4 lanes, which are a row's columns 2 (lane % 4) + h of
one 8-column group (h = 0 or 1). So the tile's layout changes: in each row (W floats), the 16-byte chunk 2 g + h
holds columns 8 g + h, + 2, + 4, + 6 of group g, at chunk (2 g + h) ^ (row % 8) so that a matrix's 8 rows fall on 8
different groups of banks. The tile is dQacc's layout (the bulk reduce-add copies it as it is), so attn_bwd_post
reads the same layout back: one thread per 8-column group, two 16-byte loads, one 16-byte store. Both head dims
(the D = 64 block writes its tile the same way) and the D = 96 half (W = 32, 8 chunks a row).
Per thread and block: 8 stmatrix.x4 (W = 64) for 16 st.shared.v2.
"""
from __future__ import annotations

from .edits import replace_span

STORE_HELPER = ('               "r"(c), "r"(d) : "memory");\n}\n', '               "r"(c), "r"(d) : "memory");\n}\n' + r"""// dq_stmatrix: a consumer's dq fragment into its W-wide fp32 dQ tile, each fp32 value one b16 pair of a matrix.
// Element j is at row 16 (t / 32) + lane / 4 + 8 ((j / 2) % 2), column 8 (j / 4) + 2 (lane % 4) + j % 2; matrix
// m = 0..3 of group g holds elements 4 g + m: columns of parity h = m % 2, rows + 8 (m / 2). In the tile (dQacc's
// layout) a row's 16-byte chunk 2 g + h holds columns 8 g + h, + 2, + 4, + 6, at chunk (2 g + h) ^ (row % 8).
template <int W>
__device__ __forceinline__ void store_dq_tile_stsm(float* tile, const float (&dq)[32], int t) {
  const int lane = t % 32, m = lane / 8;  // this lane addresses row lane % 8 of matrix m
  const int row = 16 * (t / 32) + lane % 8 + 8 * (m / 2);
  uint8_t* base = reinterpret_cast<uint8_t*>(tile) + row * W * 4;
#pragma unroll
  for (int g = 0; g < W / 8; ++g)
    stmatrix_x4(base + 16 * ((2 * g + m % 2) ^ (row % 8)), __float_as_uint(dq[4 * g]), __float_as_uint(dq[4 * g + 1]),
                __float_as_uint(dq[4 * g + 2]), __float_as_uint(dq[4 * g + 3]));
}
""")

# the 128-wide block (D = 96 / 128)
BLOCK_128 = ("""  if (W == 64) store_dq_tile<64>(tile, dq, r, col0);
  else store_dq_tile<32>(tile, dq, r, col0);
""", """  if (W == 64) store_dq_tile_stsm<64>(tile, dq, t);  // dq_stmatrix
  else store_dq_tile_stsm<32>(tile, dq, t);
""")

# the D = 64 block (W = 64 there)
BLOCK_64 = ("""  // Rows W floats long, 32-byte group g of row `row` at g ^ (row % (W / 8)):
  // a warp's 8 rows of one group land on 8 different groups of banks.
  const int W = HD == 128 ? min(64, D - 64 * c) : 64, sw = W / 8 - 1;
  float* tile = sdQ + c * BM * 64;
#pragma unroll
  for (int j = 0; j < 32; j += 2) {
    const int g = j / 4, row = r + 8 * ((j / 2) % 2);
    if (8 * g < W) sts64(tile + row * W + 8 * (g ^ (row & sw)) + col0, dq[j], dq[j + 1]);
  }
""", """  // dq_stmatrix: by stmatrix, in the tile layout store_dq_tile_stsm describes (HD = 64 here: W = 64)
  const int W = HD == 128 ? min(64, D - 64 * c) : 64;
  float* tile = sdQ + c * BM * 64;
  store_dq_tile_stsm<64>(tile, dq, t);
""")

POST_KERNEL = r"""// attn_bwd_post (dq_stmatrix): dQ = bf16(scale * acc), one 8-column group per thread. acc is in the main kernel's
// tile layout: per 64-row block, the columns in halves of 64 (the second W = D - 64 wide at D = 96), one after the
// other; in a half's rows (W floats) group g's even columns in 16-byte chunk 2 g, its odd ones in chunk 2 g + 1,
// chunk k at k ^ (row % 8).
extern "C" __global__ void __launch_bounds__(256) attn_bwd_post(const float* __restrict__ dQacc,
                                                                 __nv_bfloat16* __restrict__ dQ, int n, float scale,
                                                                 int D) {
  const int i = 8 * (blockIdx.x * 256 + threadIdx.x);
  if (i >= n) return;
  const int row = i / D, d = i % D, rr = row % 64, c = d / 64, g = (d % 64) / 8, W = min(64, D - 64 * c);
  const float* half = dQacc + static_cast<size_t>(row - rr) * D + 64 * 64 * c + rr * W;
  const float4 ev = *reinterpret_cast<const float4*>(half + 4 * ((2 * g) ^ (rr & 7)));
  const float4 od = *reinterpret_cast<const float4*>(half + 4 * ((2 * g + 1) ^ (rr & 7)));
  const __nv_bfloat162 p0 = __floats2bfloat162_rn(ev.x * scale, od.x * scale);  // columns 8 g, 8 g + 1
  const __nv_bfloat162 p1 = __floats2bfloat162_rn(ev.y * scale, od.y * scale);
  const __nv_bfloat162 p2 = __floats2bfloat162_rn(ev.z * scale, od.z * scale);
  const __nv_bfloat162 p3 = __floats2bfloat162_rn(ev.w * scale, od.w * scale);
  *reinterpret_cast<uint4*>(dQ + i) = make_uint4(*reinterpret_cast<const uint32_t*>(&p0), *reinterpret_cast<const uint32_t*>(&p1),
                                                 *reinterpret_cast<const uint32_t*>(&p2), *reinterpret_cast<const uint32_t*>(&p3));
}
"""

POST_GRID = ('kernel = "attn_bwd_post"\ngrid = ["cdiv(B * H * S * D, 1024)"]',
             'kernel = "attn_bwd_post"\ngrid = ["cdiv(B * H * S * D, 2048)"]  # dq_stmatrix: 8 elements per thread')


# the postprocess, replaced whole by POST_KERNEL (edits.replace_span between these two markers)
POST_SPAN = ("// attn_bwd_post: dQ = bf16(scale * acc), four elements per thread.",
             "\n// ---------------------------------------------------------------------------------------------------------\n"
             "// Descriptor of an MN-major")

DQ_STMATRIX = [STORE_HELPER, BLOCK_128, BLOCK_64, POST_GRID]


def dq_stmatrix(text: str) -> str:
    """The postprocess of `text` (ds_stmatrix's, with DQ_STMATRIX's edits) replaced by POST_KERNEL."""
    return replace_span(text, *POST_SPAN, POST_KERNEL, "dq_stmatrix")
