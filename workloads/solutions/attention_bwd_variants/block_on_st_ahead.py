"""The builds on st_ahead's 128-wide block: dv_early (dV issued before dP^T is waited for), the consumer index made
warp-uniform (dv_uniform, st_uniform) and the dQ tile's width known to ptxas (dq_static, st_static: the reference)."""
from __future__ import annotations

from ..template_text import uniform_index_edit
from .block_st_ahead import ST_AHEAD_DQ_STORE, ST_AHEAD_DS

# dv_early: in st_ahead's block dV += P^T dO is issued right after the exponentials, before dP^T is waited for. In
# st_ahead's SASS ptxas 13.5 sinks 23 of the 32 MUFU.EX2 below the WARPGROUP.DEPBAR of dP^T (the PTX has them before
# the wait_group), so the exponentials run after dP^T instead of under it; the dV wgmma reads their packed values,
# which keeps them ahead of its issue and of the wait that follows it. To hold the registers (with P^T in fp32 next to
# the packed copy in flight, ptxas spilled 80-92 bytes), dS = P (dP - Dr) reads P back from its packed bf16 pairs:
# dS is rounded to bf16 for its two products anyway.
DV_EARLY = [
    (ST_AHEAD_DS, """#pragma unroll
  for (int i = 0; i < 16; ++i) pp[i] = pack_bf16(e[2 * i], e[2 * i + 1]);
  wgmma_fence();
  issue_tn<HD, 64>(dv, pp, sdO);  // dV += P^T dO (dv_early: before dP^T's wait, so the exponentials stay under dP^T)
  wgmma_commit();
  wgmma_wait<1>();  // dP^T is done (groups complete in order; dV may still run)
  wgmma_fence_regs(p);
#pragma unroll
  for (int a = 0; a < 8; ++a) {
    const float2 dr = lds64(sDr + 8 * a + col0);
#pragma unroll
    for (int k = 0; k < 4; ++k) {  // P from its packed pair (the registers of P^T in fp32 are given up for dV's issue)
      const float2 pk = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&pp[2 * a + k / 2]));
      p[4 * a + k] = (k % 2 ? pk.y : pk.x) * (p[4 * a + k] - (k % 2 ? dr.y : dr.x));
    }
  }
#pragma unroll
  for (int i = 0; i < 16; ++i) ds[i] = pack_bf16(p[2 * i], p[2 * i + 1]);
  wgmma_fence();
  issue_tn<HD, 64>(dk, ds, sQ);   // dK += dS^T Q
  wgmma_commit();
"""),
]


# dv_uniform: dv_early with the consumer index broadcast from lane 0 (__shfl_sync), so that ptxas knows it is
# warp-uniform: the wgmma descriptors that depend on it (K_c, V_c) are then built in uniform registers. In st_ahead's
# SASS each of them is a 64-bit add in ordinary registers and two R2UR per k-step (89 R2UR in the D = 128 kernel, 22
# here), and the profile's largest stall (20%, `wait`) is on the wgmma issue line.
# Only in the 128-wide kernels (D = 96 / 128, -1.7 to -4.9% time on the H200): at D = 64 (consumer_block) the same
# broadcast ran 3.3% slower, causal 4.0% (attention_bwd.md v11), so the D = 64 entries keep the plain index.
UNIFORM_C = [uniform_index_edit("c", only_if="HD == 128")]


# dq_static: dv_uniform with the dQ tile's width known to ptxas in the 128-wide block. `W = min(64, D - 64 c)` is a
# runtime value, so each of the 16 float2 stores of a thread's dQ rows sat behind its own `8 g < W` branch and ptxas,
# out of registers, recomputed the row's address and swizzle from threadIdx inside each branch (17 integer
# instructions per pair of STS.64, reusing four registers that each store must read first). The profile of
# dv_uniform put 16% of all stall samples (short_scoreboard) on those instructions (attributed to the
# `const int t = threadIdx.x % 128;` line). Here the width is 64 (D = 128) or, at D = 96, 64 / 32 for consumer 0 / 1
# (a warp-uniform branch): every store is the thread's row base plus a constant XOR its row's swizzle.
DQ_STATIC = [
    ("// st_ahead: one 128-wide block whose S^T was issued before", """\
// This consumer's dq fragment into its W-wide fp32 dQ tile (dq_static): element j at row r + 8 ((j / 2) % 2), column
// 8 (j / 4) + col0 + j % 2, 32-byte group g of a row at g ^ (row % (W / 8)); r + 8 has r's swizzle.
template <int W>
__device__ __forceinline__ void store_dq_tile(float* tile, const float (&dq)[32], int r, int col0) {
  float* base = tile + r * W + col0;
  const int x = 8 * (r & (W / 8 - 1));
#pragma unroll
  for (int j = 0; j < 32; j += 2) {
    const int g = j / 4, h = (j / 2) % 2;
    if (8 * g < W) sts64(base + h * 8 * W + ((8 * g) ^ x), dq[j], dq[j + 1]);
  }
}

// st_ahead: one 128-wide block whose S^T was issued before"""),
    (ST_AHEAD_DQ_STORE,
     """  const int W = KD == 128 || c == 0 ? 64 : 32;  // D = 128: both halves 64 wide; D = 96: 64 and 32 (dq_static)
  float* tile = sdQ + c * BM * 64;
  if (W == 64) store_dq_tile<64>(tile, dq, r, col0);
  else store_dq_tile<32>(tile, dq, r, col0);
  fence_proxy_async();
  named_barrier_sync(3 + c, 128);  // this consumer's rows are in its tile
  if (t == 0) bulk_reduce_add(dq_rows + static_cast<size_t>(q0) * D + 64 * 64 * c, tile, BM * W * 4);"""),
    # the 128-wide entries with KD = 128 serve D = 128 only (D = 96 has entry points of its own)
    ("  if (D > HD || D % 16 != 0 || S % BN != 0 || (GQA && group < 1)) asm volatile(\"trap;\");",
     "  if (D > HD || D % 16 != 0 || S % BN != 0 || (GQA && group < 1) || (HD == 128 && KD == 128 && D != 128))\n"
     "    asm volatile(\"trap;\");"),
]


# dv_early takes P from its bf16 pair for dS = P (dP - Dr) (P^T's fp32 registers given up for dV's issue): one more
# bf16 rounding in every dS, so dQ's relative Frobenius error rose from 0.00236 to 0.00289 (cuDNN's 0.0024) and its
# worst element past twice the library's on some causal inputs (the harness's library_x2 rule: INCORRECT_NUMERICAL in
# 2 of 5 causal runs of dv_uniform on 2026-12-01). So the reference is st_static: the uniform index and dq_static's
# stores on st_ahead's order, where dV is issued after dS and both read fp32 P^T (attention_bwd.md v13).
