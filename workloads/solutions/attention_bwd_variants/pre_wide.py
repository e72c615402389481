"""pre_wide: the preprocess in 16-byte accesses, four rows a warp.

The reference's profile (attention_bwd.md, 2026-12-01) has the preprocess at 230 us of the 7,378 us at D = 128 (3%):
it moves about 804 MB (O and dO read, the fp32 dQ accumulator zeroed), 3.5 TB/s. One warp per row, each lane loads 4
bytes of O and of dO per step and stores 8: a thread has a few bytes in flight and a block of 8 rows lives about one
memory latency, so the kernel is bound by latency rather than by DRAM. Here 16 lanes share a row, each one 16-byte
chunk (8 columns) of O and of dO and two 16-byte stores of zeros, and a warp takes four rows (half-warp h: rows
4 w + h and + 2) with both rows' loads issued before either's arithmetic: 64 bytes in flight per thread, and a block
covers 32 rows. The dot product is reduced over the row's 16 lanes (shfl.xor 8 .. 1, each half-warp apart); D = 96 rows
leave four lanes of their 16 idle. L2 and Dr are stored as stats_wide lays them out.
"""
from __future__ import annotations

from .edits import replace_span

PRE_KERNEL = r"""// attn_bwd_pre (pre_wide): per query row, Dr = rowsum(dO * O), L2 = LSE * log2(e), the fp32 dQ accumulator row
// zeroed; 16 lanes per row, lane ch of a half-warp the 16-byte chunk of columns 8 ch .. 8 ch + 7, four rows a warp.
extern "C" __global__ void __launch_bounds__(256) attn_bwd_pre(
    const __nv_bfloat16* __restrict__ O, const __nv_bfloat16* __restrict__ dO, const float* __restrict__ LSE,
    float* __restrict__ Dr, float* __restrict__ L2, float* __restrict__ dQacc, int rows, int D) {
  const int lane = threadIdx.x % 32, ch = lane % 16;
  const int first = 4 * (blockIdx.x * 8 + threadIdx.x / 32) + lane / 16;  // this half-warp's rows: first, first + 2
  uint4 ov[2], gv[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {  // both rows' loads before either's arithmetic
    const int row = first + 2 * i;
    ov[i] = gv[i] = make_uint4(0u, 0u, 0u, 0u);
    if (row < rows && 8 * ch < D) {
      ov[i] = *reinterpret_cast<const uint4*>(O + static_cast<size_t>(row) * D + 8 * ch);
      gv[i] = *reinterpret_cast<const uint4*>(dO + static_cast<size_t>(row) * D + 8 * ch);
    }
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int row = first + 2 * i;
    const __nv_bfloat162* o = reinterpret_cast<const __nv_bfloat162*>(&ov[i]);
    const __nv_bfloat162* g = reinterpret_cast<const __nv_bfloat162*>(&gv[i]);
    float sum = 0.f;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float2 a = __bfloat1622float2(o[k]), b = __bfloat1622float2(g[k]);
      sum = fmaf(a.x, b.x, fmaf(a.y, b.y, sum));
    }
    if (row < rows && 8 * ch < D) {
      float4* acc = reinterpret_cast<float4*>(dQacc + static_cast<size_t>(row) * D + 8 * ch);
      acc[0] = make_float4(0.f, 0.f, 0.f, 0.f);
      acc[1] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
#pragma unroll
    for (int m = 8; m > 0; m >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, m);  // the row's 16 lanes
    // stats_wide's layout: row 8 a + 2 t + e of each 64-row block at 16 t + 4 ((a / 2) ^ (t / 2)) + 2 (a % 2) + e
    const int col = row % 64, ga = col / 8, t4 = (col % 8) / 2;
    const int prow = row - col + 16 * t4 + 4 * ((ga / 2) ^ (t4 / 2)) + 2 * (ga % 2) + col % 2;
    if (ch == 0 && row < rows) {
      Dr[prow] = sum;
      L2[prow] = LSE[row] * LOG2E;
    }
  }
}

"""

# the kernel between these markers (stats_wide's preprocess) is replaced whole by PRE_KERNEL
PRE_SPAN = ("// attn_bwd_pre: one warp per query row.", "// attn_bwd_post: dQ = bf16")

PRE_GRID = ('kernel = "attn_bwd_pre"\ngrid = ["cdiv(B * H * S, 8)"]',
            'kernel = "attn_bwd_pre"\ngrid = ["cdiv(B * H * S, 32)"]  # pre_wide: 32 rows a block')


# pre_plain: the same kernel writing L2 / Dr row by row, the layout the main kernel reads without stats_wide
WIDE_INDEX = """    // stats_wide's layout: row 8 a + 2 t + e of each 64-row block at 16 t + 4 ((a / 2) ^ (t / 2)) + 2 (a % 2) + e
    const int col = row % 64, ga = col / 8, t4 = (col % 8) / 2;
    const int prow = row - col + 16 * t4 + 4 * ((ga / 2) ^ (t4 / 2)) + 2 * (ga % 2) + col % 2;
"""
PLAIN_INDEX = "    const int prow = row;  // pre_plain: the rows' own order\n"


def pre_wide(text: str, stats_layout: bool = True) -> str:
    """`text` with the preprocess replaced by PRE_KERNEL: L2 / Dr in stats_wide's layout (on stats_wide or a variant
    built on it), or with `stats_layout=False` row by row (pre_plain, on a main kernel that reads them so)."""
    kernel = PRE_KERNEL if stats_layout else PRE_KERNEL.replace(WIDE_INDEX, PLAIN_INDEX).replace(
        "(pre_wide)", "(pre_plain)")
    if (PLAIN_INDEX if not stats_layout else WIDE_INDEX) not in kernel:
        raise ValueError("pre_plain: the preprocess's L2 / Dr index is not where the variant expects it")
    return replace_span(text, *PRE_SPAN, kernel, "pre_plain" if not stats_layout else "pre_wide")
