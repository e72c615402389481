"""st_ahead: each 128-wide block's S^T issued by the block before it, behind that block's dQ product."""
from __future__ import annotations

from .dq_tiles import DQ_TILE_ROWS

# st_ahead's dS, dV and dK (dV issued after dS, both from P^T in fp32 `e`), which dv_early rewrites.
ST_AHEAD_DS = """  wgmma_wait<0>();
  wgmma_fence_regs(p);
#pragma unroll
  for (int a = 0; a < 8; ++a) {
    const float2 dr = lds64(sDr + 8 * a + col0);
#pragma unroll
    for (int k = 0; k < 4; ++k) p[4 * a + k] = e[4 * a + k] * (p[4 * a + k] - (k % 2 ? dr.y : dr.x));
  }
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    pp[i] = pack_bf16(e[2 * i], e[2 * i + 1]);
    ds[i] = pack_bf16(p[2 * i], p[2 * i + 1]);
  }
  wgmma_fence();
  issue_tn<HD, 64>(dv, pp, sdO);  // dV += P^T dO
  issue_tn<HD, 64>(dk, ds, sQ);   // dK += dS^T Q
  wgmma_commit();
"""

# st_ahead's dQ tile store (the tile's width a runtime value), which dq_static rewrites.
ST_AHEAD_DQ_STORE = ("  const int W = min(64, D - 64 * c), sw = W / 8 - 1;\n" + DQ_TILE_ROWS +
                     "  if (t == 0) bulk_reduce_add(dq_rows + static_cast<size_t>(q0) * D + 64 * 64 * c, tile, "
                     "BM * W * 4);")

# The consumer loop as tiles_d96 leaves it, which st_ahead keeps for D = 64.
CONSUMER_LOOP = """    for (int it = 0; it < n_iter; ++it) {
      const int st = it % Stages<HD>::N;
      const int head = (GQA ? bkv * group : bkv) + it / per_head;
      const int q0 = (q_first + it % per_head) * QR;
      consumer_block<HD, CAUSAL, KD>(it, q0, key0, c, t, sK, sV, sQ + st * QT, sdO + st * QT, sL2 + st * QR,
                                 sDr + st * QR, sdS, fullQ, fulldO, empty, dv, dk,
                                 dQacc + static_cast<size_t>(head) * S * D, D, sl2, sdQ, threadIdx.x == 128);
    }
"""

# st_ahead: in the 128-wide kernels each block's S^T is issued by the block before it, behind that block's dQ product,
# so the tensor pipe has work while the consumer stores its dQ tile and meets the other consumer (the reference's
# profile: 19% of stall samples wait at the S^T / dP^T issue). D = 64 keeps its block.
ST_AHEAD_BLOCK = r"""// st_ahead: one 128-wide block whose S^T was issued before (by the previous block, or before the loop) into `s`,
// which it only reads; before its dQ epilogue it issues the next block's S^T into `s` again, so the tensor pipe has
// work while the consumer stores its dQ tile and meets the other. To hold the registers for that, P^T goes to fp32
// `e` (s is never written but by its wgmma: a write to the carried accumulator makes ptxas serialise, C7515), and
// dV / dK are waited for before dQ is issued, so their bf16 operands are dead before dQ and the next S^T.
template <int HD, bool CAUSAL, int KD>
__device__ __forceinline__ void consumer_block_pf(int it, bool has_next, int q0, int key0, int c, int t,
                                                  const uint8_t* sK, const uint8_t* sV, const uint8_t* sQ0,
                                                  const uint8_t* sdO0, const float* sL20, const float* sDr0,
                                                  uint8_t* sdS, uint64_t* fullQ, uint64_t* fulldO, uint64_t* empty,
                                                  float (&s)[32], float (&dv)[64], float (&dk)[64],
                                                  float* __restrict__ dq_rows, int D, float sl2, float* sdQ) {
  constexpr int NS = Stages<HD>::N, QT = 2 * QSLAB;
  const int st = it % NS;
  const uint32_t ph = (it / NS) & 1;
  const uint8_t* sQ = sQ0 + st * QT;
  const uint8_t* sdO = sdO0 + st * QT;
  const float* sL2 = sL20 + st * 64;
  const float* sDr = sDr0 + st * 64;
  const int lane = t % 32;
  const int r = 16 * (t / 32) + lane / 4;  // this thread's keys r and r + 8 of the consumer's 64
  const int col0 = 2 * (lane % 4);
  float p[32], e[32];
  uint32_t pp[16], ds[16];

  wgmma_wait<0>();  // this block's S^T, issued before the previous block's dQ epilogue, is done (a wait_group 0:
  wgmma_fence_regs(s);  // ptxas does not follow a group count across the loop's back edge, C7514)
  mbar_wait(&fulldO[st], ph);
  wgmma_fence();
  issue_nt<HD, 64, KD>(p, sV + c * 64 * 128, sdO);  // dP^T = V_c dO^T, under the exponentials
  wgmma_commit();
  const bool mask = CAUSAL && q0 < key0 + BN;
#pragma unroll
  for (int a = 0; a < 8; ++a) {
    const float2 l2 = lds64(sL2 + 8 * a + col0);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int j = 4 * a + k, q = 8 * a + col0 + (k % 2);
      float x = ex2(fmaf(s[j], sl2, -(k % 2 ? l2.y : l2.x)));
      if (mask && key0 + 64 * c + r + 8 * (k / 2) > q0 + q) x = 0.f;
      e[j] = x;
    }
  }
""" + ST_AHEAD_DS + r"""  uint8_t* buf = sdS + (it & 1) * QRows<HD>::DS;
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    const int row = 64 * c + r + 8 * (i % 2), q = 8 * (i / 2) + col0;
    sts32(buf + row * 128 + (((q / 8) ^ (row % 8)) * 16) + (q % 8) * 2, ds[i]);
  }
  fence_proxy_async();
  if (t == 0) bulk_wait_read();  // this consumer's previous dQ reduction has read its tile
  named_barrier_sync(1, 256);    // both consumers' dS^T rows are in `buf` (and sdQ is free again)
  wgmma_wait<0>();               // dV and dK are done: pp, ds and this stage's Q / dO are free
  fence_u32(pp);
  fence_u32(ds);
  if (lane == 0) mbar_arrive(&empty[st]);

  float dq[32];
  const uint64_t da = desc_mn(buf, 0), dbk = desc_mn(sK + c * KSLAB, 0);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 8; ++kk) wgmma_ss_tt(dq, da + kk * (2048 >> 4), dbk + kk * (2048 >> 4), kk != 0);
  wgmma_commit();
  if (has_next) {  // the next block's S^T, behind dQ in the tensor pipe, while this block's dQ tile is stored
    const int nst = (it + 1) % NS;
    mbar_wait(&fullQ[nst], ((it + 1) / NS) & 1);
    issue_nt<HD, 64, KD>(s, sK + c * 64 * 128, sQ0 + nst * QT);
    wgmma_commit();
    wgmma_wait<1>();
  } else {
    wgmma_wait<0>();
  }
  wgmma_fence_regs(dq);
""" + ST_AHEAD_DQ_STORE + """
}

"""

ST_AHEAD_LOOP_OLD = "    mbar_wait(fullKV, 0);\n" + CONSUMER_LOOP

ST_AHEAD_LOOP_NEW = """    mbar_wait(fullKV, 0);
    if constexpr (HD == 128) {  // st_ahead: each block's S^T issued by the block before it
      float s[32];
      mbar_wait(&fullQ[0], 0);
      wgmma_fence();
      issue_nt<HD, 64, KD>(s, sK + c * 64 * 128, sQ);  // S^T of the first block
      wgmma_commit();
      for (int it = 0; it < n_iter; ++it) {
        const int head = (GQA ? bkv * group : bkv) + it / per_head;
        const int q0 = (q_first + it % per_head) * QR;
        consumer_block_pf<HD, CAUSAL, KD>(it, it + 1 < n_iter, q0, key0, c, t, sK, sV, sQ, sdO, sL2, sDr, sdS, fullQ,
                                          fulldO, empty, s, dv, dk, dQacc + static_cast<size_t>(head) * S * D, D,
                                          sl2, sdQ);
      }
    } else {
""" + CONSUMER_LOOP + "    }\n"

ST_AHEAD = [("// The dK / dV epilogue in 16-byte stores", ST_AHEAD_BLOCK + "// The dK / dV epilogue in 16-byte stores"),
            (ST_AHEAD_LOOP_OLD, ST_AHEAD_LOOP_NEW)]
