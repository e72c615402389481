"""dq_late: the 128-wide block's dQ tile leaves at the next block's dS^T fence and barrier, not behind its own.

The reference's profile (attention_bwd.md, 2026-12-01): after a consumer stores its dQ tile it waits in
`fence.proxy.async.shared::cta` for those stores to land (6.4% of the main kernel's stall samples, long_scoreboard),
then on a 128-thread named barrier, and only then does its thread 0 issue the tile's bulk reduce-add. The next block
stores its dS^T tile and runs the same fence and a 256-thread barrier a few hundred cycles later. Here the dQ tile
is published by that later pair: one fence covers both tiles' stores, the barrier that tells the consumers that
dS^T is whole also tells each consumer's thread 0 that its previous dQ tile is, and thread 0 issues that tile's
reduce-add right after it (to the destination the previous block left in `pending`). The tile is rewritten only
after its reduce-add has read it: thread 0 waits for the read (the dV / dK wait, the dQ product and the next S^T
issue lie between) and a 128-thread barrier releases the consumer's stores, which used to be the barrier after
them. Per block: one fence and its wait fewer; the barrier count is the same. After the loop the last tile goes
out as before (fence, barrier, reduce-add), then the final wait for every reduction. The D = 64 block is unchanged.
"""
from __future__ import annotations

# the 128-wide block's signature: where its dQ tile is still to go
SIGNATURE = ("                                                  float* __restrict__ dq_rows, int D, float sl2, float* sdQ) {\n",
             "                                                  float* __restrict__ dq_rows, int D, float sl2, float* sdQ,\n"
             "                                                  float*& pending) {  // dq_late: the last tile's destination\n")

# the dS^T fence and barrier publish the previous dQ tile; its reduce-add is issued right after them
PUBLISH = ("""  fence_proxy_async();
  if (t == 0) bulk_wait_read();  // this consumer's previous dQ reduction has read its tile
  named_barrier_sync(1, 256);    // both consumers' dS^T rows are in `buf` (and sdQ is free again)
""", """  // dq_late: this fence also covers this consumer's dQ tile of the previous block
  fence_proxy_async();
  named_barrier_sync(1, 256);    // both consumers' dS^T rows are in `buf`, and each one's previous dQ tile in sdQ
  const int W = KD == 128 || c == 0 ? 64 : 32;  // D = 128: both halves 64 wide; D = 96: 64 and 32 (dq_static)
  float* tile = sdQ + c * BM * 64;
  if (t == 0 && pending != nullptr) bulk_reduce_add(pending, tile, BM * W * 4);  // dq_late: the previous block's dQ
""")

# the tile is rewritten once that reduce-add has read it; it leaves with the next block (or after the loop)
STORE = ("""  const int W = KD == 128 || c == 0 ? 64 : 32;  // D = 128: both halves 64 wide; D = 96: 64 and 32 (dq_static)
  float* tile = sdQ + c * BM * 64;
""", """  if (t == 0) bulk_wait_read();    // dq_late: the previous tile's reduce-add has read it
  named_barrier_sync(3 + c, 128);  // ... before any thread of this consumer writes the tile again
""")
LEAVE = ("""  fence_proxy_async();
  named_barrier_sync(3 + c, 128);  // this consumer's rows are in its tile
  if (t == 0) bulk_reduce_add(dq_rows + static_cast<size_t>(q0) * D + 64 * 64 * c, tile, BM * W * 4);
}
""", """  pending = dq_rows + static_cast<size_t>(q0) * D + 64 * 64 * c;  // dq_late: sent by the next block, or after the loop
}
""")

# the loop carries the pending destination and sends the last tile after it
LOOP = ("""      wgmma_commit();
      for (int it = 0; it < n_iter; ++it) {
""", """      wgmma_commit();
      float* pending = nullptr;  // dq_late: where this consumer's dQ tile in sdQ is still to be added
      for (int it = 0; it < n_iter; ++it) {
""")
CALL = ("""                                          sl2, sdQ);
      }
""", """                                          sl2, sdQ, pending);
      }
      // dq_late: the last block's dQ tile
      fence_proxy_async();
      named_barrier_sync(3 + c, 128);
      if (t == 0 && pending != nullptr)
        bulk_reduce_add(pending, sdQ + c * BM * 64, BM * (KD == 128 || c == 0 ? 64 : 32) * 4);
""")

DQ_LATE = [SIGNATURE, STORE, PUBLISH, LEAVE, LOOP, CALL]  # STORE first: PUBLISH adds the lines it removes
