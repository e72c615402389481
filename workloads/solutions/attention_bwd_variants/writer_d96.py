"""writer_d96 (on dq_writer): the writer warp reduces the D = 96 kernels' dQ tiles too.

dq_writer took the dQ reduction off the 128-wide block's consumers at D = 128 (-7.6% kernel time, -6.0% causal,
attention_bwd.md "v26-v27 measured"). The D = 96 entry points run late_d96's own copy of that block
(`consumer_block_late`, and consumer 1's first causal block as `consumer_block_dead`), which publishes its tile
dq_late's way: the next block's thread 0 issues the previous tile's reduce-add after barrier 1, and before storing the
next tile waits for that copy to have read it (`bulk_wait_read`), with the rest of its warpgroup behind it on named
barrier 3 + c. Here both D = 96 blocks publish as dq_writer's: wait on barrier 7 + c (the writer has read the previous
tile), store, fence, arrive on 5 + c and go on; the writer warp runs in the D = 96 kernels as well, reducing consumer
0's 64-column tile and consumer 1's 32-column one, and no tile is left for after the loop. D = 64 is unchanged.
"""
from __future__ import annotations

# consumer_block_late: no reduce-add of the previous tile after barrier 1 (the writer issued it)
LATE_ISSUE = ("  if (t == 0 && pending != nullptr) bulk_reduce_add(pending, tile, BM * W * 4);  // dq_late: the previous "
              "block's dQ\n", "")
LATE_PUBLISH = ("  if (t == 0) bulk_wait_read();    // dq_late: the previous tile's reduce-add has read it\n"
                "  named_barrier_sync(3 + c, 128);  // ... before any thread of this consumer writes the tile again\n"
                "  if (W == 64) store_dq_tile<64>(tile, dq, r, col0);\n"
                "  else store_dq_tile<32>(tile, dq, r, col0);\n"
                "  pending = dq_rows + static_cast<size_t>(q0) * D + 64 * 64 * c;  // dq_late: sent by the next block, "
                "or after the loop\n}",
                "  named_barrier_sync(7 + c, 160);  // writer_d96: the writer warp has read this consumer's previous tile\n"
                "  if (W == 64) store_dq_tile<64>(tile, dq, r, col0);\n"
                "  else store_dq_tile<32>(tile, dq, r, col0);\n"
                "  fence_proxy_async();\n"
                "  named_barrier_arrive(5 + c, 160);  // writer_d96: the tile is the writer warp's to reduce\n}")
# consumer_block_dead (consumer 1's first causal block at D = 96): nothing pending before it; it publishes the same way
DEAD_ISSUE = ("  if (t == 0 && pending != nullptr) bulk_reduce_add(pending, tile, BM * W * 4);\n"
              "  if (lane == 0) mbar_arrive(&empty[0]);\n",
              "  if (lane == 0) mbar_arrive(&empty[0]);\n")
DEAD_PUBLISH = ("  if (t == 0) bulk_wait_read();\n"
                "  named_barrier_sync(3 + c, 128);\n"
                "  const int r = 16 * (t / 32) + lane / 4, col0 = 2 * (lane % 4);  // this thread's rows and first column\n"
                "  if (W == 64) store_dq_tile<64>(tile, dq, r, col0);\n"
                "  else store_dq_tile<32>(tile, dq, r, col0);\n"
                "  pending = dq_rows + static_cast<size_t>(q0) * D + 64 * 64 * c;\n}",
                "  named_barrier_sync(7 + c, 160);  // writer_d96: the writer's first arrival (the tile is free)\n"
                "  const int r = 16 * (t / 32) + lane / 4, col0 = 2 * (lane % 4);  // this thread's rows and first column\n"
                "  if (W == 64) store_dq_tile<64>(tile, dq, r, col0);\n"
                "  else store_dq_tile<32>(tile, dq, r, col0);\n"
                "  fence_proxy_async();\n"
                "  named_barrier_arrive(5 + c, 160);  // writer_d96: the tile is the writer warp's to reduce\n}")
# the loop's end: the last tile is the writer's too
AFTER_LOOP = ("      if constexpr (LATE) {  // dq_late: the last block's dQ tile\n"
              "        fence_proxy_async();\n"
              "        named_barrier_sync(3 + c, 128);\n"
              "        if (t == 0 && pending != nullptr) bulk_reduce_add(pending, sdQ + c * BM * 64, BM * (c == 0 ? 64 : 32) * 4);\n"
              "      }\n", "")
# the writer warp and the producer's stepped rows in every 128-wide kernel (KD = 96 as well as 128)
WRITER = ("    } else if (HD == 128 && KD == 128 && t / 32 == 1) {  // dq_writer: the consumers' dQ tiles, reduced\n",
          "    } else if (HD == 128 && t / 32 == 1) {  // dq_writer: the consumers' dQ tiles, reduced (writer_d96: KD = 96 too)\n")
WIDTH = ("            bulk_reduce_add(rows + 64 * 64 * c, sdQ + c * BM * 64, BM * 64 * 4);\n",
         "            bulk_reduce_add(rows + 64 * 64 * c, sdQ + c * BM * 64, BM * (KD == 128 || c == 0 ? 64 : 32) * 4);\n")
ROW = ("        const int q_row = HD == 128 && KD == 128 ? next_row  // first row in the [B*H*S, D] view\n",
       "        const int q_row = HD == 128 ? next_row  // first row in the [B*H*S, D] view (writer_d96: KD = 96 too)\n")
STEP = ("        if constexpr (HD == 128 && KD == 128) {\n          next_row += QR;\n",
        "        if constexpr (HD == 128) {\n          next_row += QR;\n")
WRITER_D96 = [LATE_ISSUE, LATE_PUBLISH, DEAD_ISSUE, DEAD_PUBLISH, AFTER_LOOP, WRITER, WIDTH, ROW, STEP]
