"""writer_all (on writer_d96): the writer warp reduces the D = 64 kernels' dQ tiles as well, so every main kernel has it.

D = 64's block (`consumer_block`, 128 query rows, each consumer's dQ over all 128 keys for its own 64 rows) publishes
its tile as the 128-wide block did before dq_writer: thread 0 waits for its previous reduction to have read the tile
before barrier 1, and after the stores the consumer's four warps meet on named barrier 3 + c so that thread 0 can issue
the reduce-add. dq_writer removed exactly that at D = 128 (-7.6%). Here the D = 64 block syncs on 7 + c before its
stores and arrives on 5 + c after its fence, and the writer warp runs in the D = 64 kernels too: consumer c's tile is
query rows 64c.. of the block, all 64 columns, which is `rows + 64 * 64 * c` as at D = 128 (D = 64), 64 columns wide.
ptxas 13.5 spills 8-20 bytes in the D = 64 kernels: values computed before the warpgroups part, stored once there and
read back once after the loop (and the producer's D = 64 loop keeps its division: stepped rows spilled 40-68 bytes).
"""
from __future__ import annotations

WRITER = ("    } else if (HD == 128 && t / 32 == 1) {  // dq_writer: the consumers' dQ tiles, reduced (writer_d96: KD = 96 "
          "too)\n",
          "    } else if (t / 32 == 1) {  // dq_writer: the consumers' dQ tiles, reduced (writer_all: in every kernel)\n")
# consumer 1's tile is 32 columns only at D = 96; D = 64's are 64 wide like D = 128's
WIDTH = ("            bulk_reduce_add(rows + 64 * 64 * c, sdQ + c * BM * 64, BM * (KD == 128 || c == 0 ? 64 : 32) * 4);\n",
         "            bulk_reduce_add(rows + 64 * 64 * c, sdQ + c * BM * 64, BM * (KD == 96 && c == 1 ? 32 : 64) * 4);\n")
# The thread's wait stays, though it has no reduction of its own to wait for now (it returns at once): without it ptxas
# schedules the D = 64 block anew and spills 88-104 bytes (as bwd_dq_bulk_no_wait_read's mutants do).
D64_WAIT = ("  if (t == 0) bulk_wait_read();  // this consumer's previous dQ reduction has read its tile\n"
            "  named_barrier_sync(1, 256);  // both consumers' dS^T rows are in `buf` (and sdQ is free again)\n",
            "  if (t == 0) bulk_wait_read();  // writer_all: nothing of this thread's in flight; kept for ptxas (see above)\n"
            "  named_barrier_sync(1, 256);  // both consumers' dS^T rows are in `buf`\n")
D64_FREE = ("  float* tile = sdQ + c * BM * 64;\n#pragma unroll\n  for (int j = 0; j < 32; j += 2) {\n"
            "    const int g = j / 4, row = r + 8 * ((j / 2) % 2);\n",
            "  float* tile = sdQ + c * BM * 64;\n"
            "  named_barrier_sync(7 + c, 160);  // writer_all: the writer warp has read this consumer's previous tile\n"
            "#pragma unroll\n  for (int j = 0; j < 32; j += 2) {\n"
            "    const int g = j / 4, row = r + 8 * ((j / 2) % 2);\n")
D64_PUBLISH = ("  fence_proxy_async();\n"
               "  named_barrier_sync(3 + c, 128);  // this consumer's rows are in its tile\n"
               "  if (t == 0)\n"
               "    bulk_reduce_add(dq_rows + static_cast<size_t>(q0 + (HD == 128 ? 0 : 64 * c)) * D + (HD == 128 ? 64 * 64 * c : 0), tile,\n"
               "                    BM * W * 4);\n}",
               "  fence_proxy_async();\n"
               "  named_barrier_arrive(5 + c, 160);  // writer_all: the tile is the writer warp's to reduce\n}")
WRITER_ALL = [WRITER, WIDTH, D64_WAIT, D64_FREE, D64_PUBLISH]
