"""D = 96's S^T and dP^T over its own 96 columns: d96_ksteps and tiles_stack (behind a per-block branch) and
tiles_d96 (in entry points of its own)."""
from __future__ import annotations

# d96_ksteps: dq_tiles with S^T and dP^T over D = 96's 96 columns: the 128-wide kernel serves D = 96 with d 96..127
# zero-filled by TMA, whose two k16 steps of each product add nothing. The consumer loop holds both builds of the
# block and picks one per launch (a uniform branch between blocks, each ending with wgmma.wait_group 0). The same
# edits serve tiles_stack on q128_d64's text, whose issue_nt also takes the query rows N and whose stages hold QR rows.
def _d96_ksteps(on_q128: bool) -> list[tuple[str, str]]:
    tparams, xs, n, rows = (", int N = 64", "N / 2", ", QR", "QR") if on_q128 else ("", "32", "", "BM")
    call = """consumer_block<HD, CAUSAL{kd}>(it, q0, key0, c, t, sK, sV, sQ + st * QT, sdO + st * QT, sL2 + st * {rows},
                                 {pad}sDr + st * {rows}, sdS, fullQ, fulldO, empty, dv, dk,"""
    return [
        (f"""template <int HD{tparams}>
__device__ __forceinline__ void issue_nt(float (&x)[{xs}], const uint8_t* a, const uint8_t* b) {{
  const uint64_t da = make_desc_sw128(a), db = make_desc_sw128(b);
#pragma unroll
  for (int kk = 0; kk < HD / 16; ++kk) {{""",
         f"""template <int HD{tparams}, int KD = HD>
__device__ __forceinline__ void issue_nt(float (&x)[{xs}], const uint8_t* a, const uint8_t* b) {{
  const uint64_t da = make_desc_sw128(a), db = make_desc_sw128(b);
#pragma unroll
  for (int kk = 0; kk < KD / 16; ++kk) {{"""),
        ("""template <int HD, bool CAUSAL>
__device__ __forceinline__ void consumer_block(""",
         """// KD: the d extent S^T and dP^T run over (d96_ksteps: 96 at D = 96, whose d 96..127 are TMA's zero fill, so
// their two k16 steps are skipped; dV, dK and dQ keep the 128-wide tiles).
template <int HD, bool CAUSAL, int KD = HD>
__device__ __forceinline__ void consumer_block("""),
        (f"  issue_nt<HD{n}>(s, sK + c * 64 * 128, sQ);     // S^T = K_c Q^T",
         f"  issue_nt<HD{n}, KD>(s, sK + c * 64 * 128, sQ);  // S^T = K_c Q^T"),
        (f"  issue_nt<HD{n}>(p, sV + c * 64 * 128, sdO);    // dP^T = V_c dO^T",
         f"  issue_nt<HD{n}, KD>(p, sV + c * 64 * 128, sdO); // dP^T = V_c dO^T"),
        ("      " + call.format(kd="", rows=rows, pad="") + """
                                 dQacc + static_cast<size_t>(head) * S * D, D, sl2, sdQ, threadIdx.x == 128);""",
         """      float* dq_rows = dQacc + static_cast<size_t>(head) * S * D;
      if (HD == 128 && D <= 96) {  // D = 96: S^T and dP^T over its 96 columns (a uniform branch between blocks)
        """ + call.format(kd=", 96", rows=rows, pad="      ") + """ dq_rows, D, sl2, sdQ,
                                       threadIdx.x == 128);
      } else {
        """ + call.format(kd="", rows=rows, pad="  ") + """ dq_rows, D, sl2, sdQ,
                                   threadIdx.x == 128);
      }"""),
    ]


D96_KSTEPS = _d96_ksteps(on_q128=False)
# tiles_stack: the three candidates that change separate parts of dq_tiles, together: q128_d64 (D = 64's blocks),
# d96_ksteps (D = 96's S^T / dP^T steps) and the wide epilogue, for a promotion measured as a whole.
STACK_D96 = _d96_ksteps(on_q128=True)


# tiles_d96: tiles_stack with D = 96's build in entry points of its own (attn_bwd_wgmma_d96 + _causal, _gqa; the plan
# names them, attention_backward.backward_entry_point) instead of a branch per block: the 128-wide kernels then hold
# one build of the block, as before d96_ksteps (tiles_stack measured 0.5-1.4% slower than dq_tiles_wide at D = 128).
_D96_ENTRY = """extern "C" __global__ void __launch_bounds__(384, 1) attn_bwd_wgmma_d96{suffix}(
    const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmK,
    const __grid_constant__ CUtensorMap tmV, const __grid_constant__ CUtensorMap tmdO, const float* __restrict__ L2,
    const float* __restrict__ Dr, float* __restrict__ dQacc, __nv_bfloat16* __restrict__ dK,
    __nv_bfloat16* __restrict__ dV, int S, int D, float scale{group_param}) {{
  attn_bwd<128, {causal}, {gqa}, 96>(&tmQ, &tmK, &tmV, &tmdO, L2, Dr, dQacc, dK, dV, S, D, scale, {group});
}}
"""
D96_ENTRIES = STACK_D96[:4] + [
    ("""template <int HD, bool CAUSAL, bool GQA>
__device__ __forceinline__ void attn_bwd(""",
     """template <int HD, bool CAUSAL, bool GQA, int KD = HD>  // KD: S^T / dP^T's d extent (96 in D = 96's entries)
__device__ __forceinline__ void attn_bwd("""),
    ("      consumer_block<HD, CAUSAL>(it, q0, key0, c,", "      consumer_block<HD, CAUSAL, KD>(it, q0, key0, c,"),
    ("""  attn_bwd<128, true, false>(&tmQ, &tmK, &tmV, &tmdO, L2, Dr, dQacc, dK, dV, S, D, scale, 1);
}
""", """  attn_bwd<128, true, false>(&tmQ, &tmK, &tmV, &tmdO, L2, Dr, dQacc, dK, dV, S, D, scale, 1);
}

// D = 96: the 128-wide kernel with S^T and dP^T over d 0..95 (d 96..127 are TMA's zero fill).
""" + "\n".join(_D96_ENTRY.format(suffix=sfx, causal=c, gqa=g, group_param=gp, group=gr)
                for sfx, c, g, gp, gr in (("", "false", "false", "", "1"), ("_causal", "true", "false", "", "1"),
                                          ("_gqa", "false", "true", ", int group", "group")))),
]
