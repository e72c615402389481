"""causal_skip: the causal 128-wide kernel skips the consumer block that no query row sees.

A causal key block (128 keys from key0) starts at query block q0 = key0. There, consumer 1's keys (key0 + 64 ..
key0 + 127) are all past the block's 64 query rows (key0 .. key0 + 63): its P and dS are zero, and the reference
still runs its S^T and dP^T products, its exponentials, its dV / dK products (adding zeros) and stores its zero dS^T
rows, on tensor cores it shares with consumer 0. That is one consumer-block per causal key block: 32 of 2,112 at
S = 4096 (1.5%), each the first block, where nothing is ahead in the pipe yet.

Here consumer 1 runs that block as `consumer_block_dead`: no S^T (not issued before the loop), no dP^T, exponentials,
dV / dK or dS^T rows. It meets consumer 0 on the block's barrier, releases the stage, and adds its dQ column half
over consumer 0's keys; consumer 0's dQ product of that block stops after its own keys too (the first 4 of the 8
k16 steps), so the rows consumer 1 did not write are never read. Causal kernels have no GQA entry point, so the
block is the loop's first. (Skipping the region inside the shared block function instead made ptxas serialise the
causal kernels' wgmma, C7512.)

skip_plain is the same skip without dq_late (on pre_plain): the dead block stores its dQ tile and sends it itself, as
st_static's block does (fence, the consumer's barrier, reduce-add).
"""
from __future__ import annotations

DEAD_BLOCK = r"""
// causal_skip: consumer 1's first block of a causal key block. Its keys are past every query row of the block (P = dS
// = 0), so it has no S^T, dP^T, exponentials, dV / dK or dS^T rows; it meets consumer 0 on the block's barrier,
// releases the stage and adds its dQ column half over consumer 0's keys, as consumer_block_pf's tail does.
template <int HD, bool CAUSAL, int KD>
__device__ __forceinline__ void consumer_block_dead(bool has_next, int q0, int c, int t, const uint8_t* sK,
                                                    const uint8_t* sQ0, uint8_t* sdS, uint64_t* fullQ,
                                                    uint64_t* fulldO, uint64_t* empty, float (&s)[32],
                                                    float* __restrict__ dq_rows, int D, float* sdQ, float*& pending) {
  constexpr int NS = Stages<HD>::N, QT = 2 * QSLAB;
  const int lane = t % 32;
  mbar_wait(&fulldO[0], 0);    // as the live block: the stage's phases stay in step for both consumers
  // dq_late's publication (nothing is pending before the first block)
  fence_proxy_async();
  named_barrier_sync(1, 256);  // consumer 0's dS^T rows are in buffer 0
  const int W = KD == 128 || c == 0 ? 64 : 32;
  float* tile = sdQ + c * BM * 64;
  if (t == 0 && pending != nullptr) bulk_reduce_add(pending, tile, BM * W * 4);
  if (lane == 0) mbar_arrive(&empty[0]);

  float dq[32];
  const uint64_t da = desc_mn(sdS, 0), dbk = desc_mn(sK + c * KSLAB, 0);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) wgmma_ss_tt(dq, da + kk * (2048 >> 4), dbk + kk * (2048 >> 4), kk != 0);
  wgmma_commit();
  if (has_next) {  // the next block's S^T, behind dQ in the tensor pipe
    mbar_wait(&fullQ[1 % NS], (1 / NS) & 1);
    issue_nt<HD, 64, KD>(s, sK + c * 64 * 128, sQ0 + (1 % NS) * QT);
    wgmma_commit();
    wgmma_wait<1>();
  } else {
    wgmma_wait<0>();
  }
  wgmma_fence_regs(dq);
  if (t == 0) bulk_wait_read();
  named_barrier_sync(3 + c, 128);
  const int r = 16 * (t / 32) + lane / 4, col0 = 2 * (lane % 4);  // this thread's rows and first column
  if (W == 64) store_dq_tile<64>(tile, dq, r, col0);
  else store_dq_tile<32>(tile, dq, r, col0);
  pending = dq_rows + static_cast<size_t>(q0) * D + 64 * 64 * c;
}
"""

# the dead block's function, after consumer_block_pf (dq_late's last line of it)
ADD_FUNCTION = ("  pending = dq_rows + static_cast<size_t>(q0) * D + 64 * 64 * c;  // dq_late: sent by the next block, or after the loop\n}\n",
                "  pending = dq_rows + static_cast<size_t>(q0) * D + 64 * 64 * c;  // dq_late: sent by the next block, or after the loop\n}\n"
                + DEAD_BLOCK)

# consumer 0's dQ product of that block over its own keys alone
DQ_PRODUCT = ("""  float dq[32];
  const uint64_t da = desc_mn(buf, 0), dbk = desc_mn(sK + c * KSLAB, 0);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 8; ++kk) wgmma_ss_tt(dq, da + kk * (2048 >> 4), dbk + kk * (2048 >> 4), kk != 0);
""", """  float dq[32];
  const uint64_t da = desc_mn(buf, 0), dbk = desc_mn(sK + c * KSLAB, 0);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) wgmma_ss_tt(dq, da + kk * (2048 >> 4), dbk + kk * (2048 >> 4), kk != 0);
  if (!CAUSAL || q0 > key0) {  // causal_skip: keys 64.. of the block, unless no row of it sees them (consumer 1 skipped)
#pragma unroll
    for (int kk = 4; kk < 8; ++kk) wgmma_ss_tt(dq, da + kk * (2048 >> 4), dbk + kk * (2048 >> 4), true);
  }
""")

# consumer 1 issues no S^T for the dead first block, and runs it before the loop
FIRST_ST = ("""      wgmma_fence();
      issue_nt<HD, 64, KD>(s, sK + c * 64 * 128, sQ);  // S^T of the first block
      wgmma_commit();
      float* pending = nullptr;  // dq_late: where this consumer's dQ tile in sdQ is still to be added
      for (int it = 0; it < n_iter; ++it) {
""", """      if (!CAUSAL || c == 0) {  // causal_skip: consumer 1's first block is dead
        wgmma_fence();
        issue_nt<HD, 64, KD>(s, sK + c * 64 * 128, sQ);  // S^T of the first block
        wgmma_commit();
      }
      float* pending = nullptr;  // dq_late: where this consumer's dQ tile in sdQ is still to be added
      int it = 0;
      if (CAUSAL && c == 1 && n_iter > 0) {  // causal_skip: the first block (q0 = key0) sees none of its keys
        consumer_block_dead<HD, CAUSAL, KD>(n_iter > 1, q_first * QR, c, t, sK, sQ, sdS, fullQ, fulldO, empty, s,
                                            dQacc + static_cast<size_t>(GQA ? bkv * group : bkv) * S * D, D, sdQ,
                                            pending);
        it = 1;
      }
      for (; it < n_iter; ++it) {
""")

CAUSAL_SKIP = [ADD_FUNCTION, DQ_PRODUCT, FIRST_ST]



# skip_plain: the same dead block with st_static's dQ tail (no dq_late before it): nothing to publish at the barrier,
# and its own tile stored, fenced and sent at the end
_PLAIN_EDITS = [
    ("// causal_skip: consumer 1's first block", "// skip_plain: consumer 1's first block"),
    ("float* sdQ, float*& pending) {", "float* sdQ) {"),
    ("""  // dq_late's publication (nothing is pending before the first block)
  fence_proxy_async();
  named_barrier_sync(1, 256);  // consumer 0's dS^T rows are in buffer 0
  const int W = KD == 128 || c == 0 ? 64 : 32;
  float* tile = sdQ + c * BM * 64;
  if (t == 0 && pending != nullptr) bulk_reduce_add(pending, tile, BM * W * 4);
""", """  named_barrier_sync(1, 256);  // consumer 0's dS^T rows are in buffer 0 (nothing of this consumer's is pending)
"""),
    ("""  if (t == 0) bulk_wait_read();
  named_barrier_sync(3 + c, 128);
  const int r""", """  const int W = KD == 128 || c == 0 ? 64 : 32;
  float* tile = sdQ + c * BM * 64;
  const int r"""),
    ("""  pending = dq_rows + static_cast<size_t>(q0) * D + 64 * 64 * c;
}""", """  fence_proxy_async();
  named_barrier_sync(3 + c, 128);  // this consumer's rows are in its tile
  if (t == 0) bulk_reduce_add(dq_rows + static_cast<size_t>(q0) * D + 64 * 64 * c, tile, BM * W * 4);
}"""),
]
DEAD_BLOCK_PLAIN = DEAD_BLOCK
for _old, _new in _PLAIN_EDITS:
    if DEAD_BLOCK_PLAIN.count(_old) != 1:
        raise ValueError(f"skip_plain: {_old[:40]!r} is not in causal_skip's dead block once")
    DEAD_BLOCK_PLAIN = DEAD_BLOCK_PLAIN.replace(_old, _new)

_BLOCK_END = ("  if (t == 0) bulk_reduce_add(dq_rows + static_cast<size_t>(q0) * D + 64 * 64 * c, tile, BM * W * 4);\n}\n")
ADD_FUNCTION_PLAIN = (_BLOCK_END, _BLOCK_END + DEAD_BLOCK_PLAIN)

FIRST_ST_PLAIN = ("""      wgmma_fence();
      issue_nt<HD, 64, KD>(s, sK + c * 64 * 128, sQ);  // S^T of the first block
      wgmma_commit();
      for (int it = 0; it < n_iter; ++it) {
""", """      if (!CAUSAL || c == 0) {  // skip_plain: consumer 1's first block is dead
        wgmma_fence();
        issue_nt<HD, 64, KD>(s, sK + c * 64 * 128, sQ);  // S^T of the first block
        wgmma_commit();
      }
      int it = 0;
      if (CAUSAL && c == 1 && n_iter > 0) {  // skip_plain: the first block (q0 = key0) sees none of its keys
        consumer_block_dead<HD, CAUSAL, KD>(n_iter > 1, q_first * QR, c, t, sK, sQ, sdS, fullQ, fulldO, empty, s,
                                            dQacc + static_cast<size_t>(GQA ? bkv * group : bkv) * S * D, D, sdQ);
        it = 1;
      }
      for (; it < n_iter; ++it) {
""")

CAUSAL_SKIP_PLAIN = [ADD_FUNCTION_PLAIN, DQ_PRODUCT, FIRST_ST_PLAIN]
