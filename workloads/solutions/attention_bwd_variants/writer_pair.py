"""writer_pair (on writer_d96): two writer warps, one per consumer, in the 128-wide kernels.

writer_d96's writer (warp 1 of the producer warpgroup) serves the consumers in turn each block: it waits for consumer
0's tile, issues its reduce-add, waits for that copy to have read the tile, and only then takes consumer 1's, so
consumer 1's reduction starts a tile-read later than its tile was ready. Here warp 1 serves consumer 0 and warp 2
consumer 1, each syncing only on its own consumer's barrier 5 + c and freeing that consumer's tile on 7 + c; each
issuer waits on its own bulk groups. The barriers' counts stay 160 (a consumer's 128 threads and one writer warp).
The D = 64 kernels have no writer (writer_all, which gave them one, measured +1.3%).
"""
from __future__ import annotations

WARPS = ("    } else if (HD == 128 && t / 32 == 1) {  // dq_writer: the consumers' dQ tiles, reduced (writer_d96: KD = 96 "
         "too)\n"
         "      const bool issuer = t == 32;\n"
         "      if (n_iter > 0) {  // both tiles are free for the first block (no arrival a consumer never meets)\n"
         "        named_barrier_arrive(7, 160);\n"
         "        named_barrier_arrive(8, 160);\n"
         "      }\n",
         "    } else if (HD == 128 && (t / 32 == 1 || t / 32 == 2)) {  // writer_pair: warp 1 + c reduces consumer c's "
         "dQ tiles\n"
         "      const int c = t / 32 - 1;\n"
         "      const bool issuer = t % 32 == 0;\n"
         "      if (n_iter > 0) named_barrier_arrive(7 + c, 160);  // the tile is free for the first block\n")
# writer_d96's loop body over c, once: inside `for (int c ...)` there, alone (one less indent) here
_BODY = ("named_barrier_sync(5 + c, 160);  // consumer c's tile is stored and fenced",
         "if (issuer) {",
         "  bulk_reduce_add(rows + 64 * 64 * c, sdQ + c * BM * 64, BM * (KD == 128 || c == 0 ? 64 : 32) * 4);",
         "  bulk_wait_read();  // the reduction has read the tile",
         "}",
         "__syncwarp();",
         "if (it + 1 < n_iter) named_barrier_arrive(7 + c, 160);  // the tile is free (none after the last)")


def _body(indent: int) -> str:
    return "".join(" " * indent + line + "\n" for line in _BODY)


LOOP = ("#pragma unroll\n        for (int c = 0; c < 2; ++c) {\n" + _body(10) + "        }\n", _body(8))
WRITER_PAIR = [WARPS, LOOP]
