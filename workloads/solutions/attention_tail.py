"""tail_split for the attention forward: the last wave's query tiles cut into pieces over their key tiles.

One CTA per (query tile, head) with one CTA per SM leaves part of the last wave idle: 60 of 132 SMs for a CTA's time at
D = 128 and 96 (6,144 CTAs, 0.97% of the SM-time) and 128 at GQA (4,096 CTAs, 3%), attention_template.md "The forward's
last wave, by count". With tail_split the grid is 1-D: the first `full` CTAs take a whole tile each (in the 2-D grid's
order, tile fastest); the last `rem` tiles (items % num_sms) are cut into TAIL_PIECES CTAs each, over equal parts of
their key tiles (tail_pieces.py: what the backward's tail_split shares). A piece stores its unnormalised fp32 O with its rows' max and sum, fences and counts itself in; the
tile's last piece merges them as flash-decoding does (M = max m_p, O = sum O_p 2^(m_p - M), l = sum l_p 2^(m_p - M),
exact with the lazy rescale too: each piece's O and l are consistent with its own m) and leaves through the usual
epilogue. A piece with no key tile (a short smoke sequence) adds nothing (m = -inf, l = 0, O = 0). Non-causal,
cooperative points with power-of-two key tiles only: the masked steps index key tiles by their global number, and a
piece with no key tile would leave a ping-pong turn unanswered.
"""
from __future__ import annotations

from .tail_pieces import PIECES as TAIL_PIECES, count_in, tail_args, tail_grid, tail_scratch

BAR_TAIL = 7  # after the turn (1-3) and epilogue (4-6) barrier ids

EDITS = [
    ("float* __restrict__ LSE, int S, int D, float scale, int group) {",
     "float* __restrict__ LSE, int S, int D, float scale, int group, int heads,\n"
     "                                         int nsm, int pieces, float* __restrict__ tail_part,\n"
     "                                         int* __restrict__ tail_count) {"),
    ("    q_tile = CAUSAL ? n_q - 1 - blockIdx.x : blockIdx.x;  // causal: each head's longest rows first\n"
     "    bh = blockIdx.y;\n",
     "    // tail_split: a 1-D grid, the whole tiles (tile fastest) first, then the last wave's in pieces\n"
     "    const int items = n_q * heads, rem = pieces > 1 ? items % nsm : 0, full = items - rem;\n"
     "    const int bx = static_cast<int>(blockIdx.x);\n"
     "    lin = bx < full ? bx : full + (bx - full) / pieces;\n"
     "    piece = bx < full ? -1 : (bx - full) % pieces;\n"
     "    slot = lin - full;\n"
     "    q_tile = lin % n_q;\n"
     "    bh = lin / n_q;\n"),
    ("  int q_tile, bh;\n", "  int q_tile, bh, lin = 0, piece = -1, slot = 0;  // tail_split: this CTA's tile, its piece (-1: whole)\n"),
    ("  const int n_tiles = CAUSAL ? (min(q0 + BM, S) + BN - 1) / BN : (S + BN - 1) / BN;\n",
     "  const int n_all = CAUSAL ? (min(q0 + BM, S) + BN - 1) / BN : (S + BN - 1) / BN;\n"
     "  // tail_split: this CTA's key tiles j_lo .. j_lo + n_tiles - 1 (the ring and the steps count from its first)\n"
     "  const int j_lo = piece < 0 ? 0 : piece * n_all / pieces;\n"
     "  const int n_tiles = piece < 0 ? n_all : (piece + 1) * n_all / pieces - j_lo;\n"),
    ("        const int row = kv_row + j * BN;\n", "        const int row = kv_row + (j_lo + j) * BN;\n"),
    ("    // tile 0: S only\n", "    if (n_tiles > 0) {  // tail_split: a piece with no key tile adds nothing\n    // tile 0: S only\n"),
    ("\n    // the row sums were kept per thread: reduce over the quad now\n",
     "    }\n\n    // the row sums were kept per thread: reduce over the quad now\n"),
    ("    const float inv0 = 1.f / l0, inv1 = 1.f / l1;\n", f"""    if (piece >= 0) {{  // tail_split: this piece's O, max and sum out; the tile's last piece merges the others'
      __shared__ int last_piece;
      constexpr int SLOT = ON / 2 + 4;  // a consumer thread's floats: its O, then its rows' max and sum
      constexpr size_t PIECE = static_cast<size_t>(128 * CONSUMERS) * SLOT;
      float* parts = tail_part + static_cast<size_t>(slot) * pieces * PIECE + (threadIdx.x - 128) * SLOT;
      float* mine = parts + piece * PIECE;
#pragma unroll
      for (int i = 0; i < ON / 2; i += 4) *reinterpret_cast<float4*>(mine + i) = make_float4(o[i], o[i + 1], o[i + 2], o[i + 3]);
      *reinterpret_cast<float4*>(mine + ON / 2) = make_float4(w.m0, w.m1, l0, l1);
""" + count_in(f"bar_sync_imm<{BAR_TAIL}, 128 * CONSUMERS>()", "slot") + f"""      float m0 = w.m0, m1 = w.m1;
      for (int q = 0; q < pieces; ++q) {{
        if (q == piece) continue;  // its own max is w.m0 / w.m1
        const float4 st = __ldcg(reinterpret_cast<const float4*>(parts + q * PIECE + ON / 2));  // past L1: another SM wrote it
        m0 = fmaxf(m0, st.x);
        m1 = fmaxf(m1, st.y);
      }}
      const float f0 = w.m0 == m0 ? 1.f : ex2(w.m0 - m0), f1 = w.m1 == m1 ? 1.f : ex2(w.m1 - m1);
      l0 *= f0;
      l1 *= f1;
#pragma unroll
      for (int i = 0; i < ON / 2; i += 4) {{
        o[i] *= f0;
        o[i + 1] *= f0;
        o[i + 2] *= f1;
        o[i + 3] *= f1;
      }}
      for (int q = 0; q < pieces; ++q) {{
        if (q == piece) continue;
        const float* other = parts + q * PIECE;
        const float4 st = __ldcg(reinterpret_cast<const float4*>(other + ON / 2));
        const float g0 = st.x == m0 ? 1.f : ex2(st.x - m0), g1 = st.y == m1 ? 1.f : ex2(st.y - m1);  // -inf: 0
        l0 += st.z * g0;
        l1 += st.w * g1;
#pragma unroll
        for (int i = 0; i < ON / 2; i += 4) {{
          const float4 v = __ldcg(reinterpret_cast<const float4*>(other + i));
          o[i] += v.x * g0;
          o[i + 1] += v.y * g0;
          o[i + 2] += v.z * g1;
          o[i + 3] += v.w * g1;
        }}
      }}
      w.m0 = m0;
      w.m1 = m1;
    }}
    const float inv0 = 1.f / l0, inv1 = 1.f / l1;
"""),
]


def tail_plan(grid_items: str, threads: int) -> tuple[str, list[str], str]:
    """The 1-D grid over `grid_items` tiles, the arguments after the kernel's others, and the scratch tables."""
    # each consumer thread's 68 floats at most: O's 64 and its rows' max and sum
    return tail_grid(grid_items, "tiles"), tail_args("B * H"), "\n" + tail_scratch(threads - 128, 68, "O, max and sum")
