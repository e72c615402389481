"""pair_causal (on pair_d64): the D = 64 writer warps in the causal kernel only.

pair_d64's writers measured -0.7 to -1.4% at D = 64 causal and +1.1% at D = 64 (attention_bwd.md "v30 measured"),
the signs writer_all's single writer had read as well. Here the D = 64 block keeps both ways of publishing its dQ
tile, chosen at compile time: the causal kernel hands it to its consumer's writer warp (pair_d64), the non-causal ones
(GQA among them) send it themselves as writer_d96 does (the consumer's four warps meet on 3 + c, thread 0 issues the
reduce-add). So every kernel is one measured on the H200: the causal D = 64 kernel pair_d64's, the others
writer_d96's, opcode for opcode (tests/workloads/test_attention_bwd_pair_causal.py).
"""
from __future__ import annotations

WRITERS = ("    } else if (t / 32 == 1 || (HD == 64 && t / 32 == 2)) {",
           "    } else if ((HD == 128 || CAUSAL) && (t / 32 == 1 || (HD == 64 && t / 32 == 2))) {  // pair_causal: "
           "no writer in the non-causal D = 64 kernels\n     ")
D64_WAIT = ("  if (t == 0) bulk_wait_read();  // pair_d64: nothing of this thread's in flight; kept for ptxas (see above)\n"
            "  named_barrier_sync(1, 256);  // both consumers' dS^T rows are in `buf`\n",
            "  if (t == 0) bulk_wait_read();  // this consumer's previous dQ reduction has read its tile\n"
            "  named_barrier_sync(1, 256);  // both consumers' dS^T rows are in `buf` (and, non-causal, sdQ is free "
            "again)\n")
D64_FREE = ("  named_barrier_sync(7 + c, 160);  // pair_d64: this consumer's writer has read its previous tile\n",
            "  if constexpr (CAUSAL) named_barrier_sync(7 + c, 160);  // pair_d64: this consumer's writer has read its "
            "previous tile\n")
D64_PUBLISH = ("  fence_proxy_async();\n"
               "  named_barrier_arrive(5 + c, 160);  // pair_d64: the tile is this consumer's writer's to reduce\n}",
               "  fence_proxy_async();\n"
               "  if constexpr (CAUSAL) {\n"
               "    named_barrier_arrive(5 + c, 160);  // pair_d64: the tile is this consumer's writer's to reduce\n"
               "  } else {  // pair_causal: the tile sent by this consumer (writer_d96's block)\n"
               "    named_barrier_sync(3 + c, 128);  // this consumer's rows are in its tile\n"
               "    if (t == 0)\n"
               "      bulk_reduce_add(dq_rows + static_cast<size_t>(q0 + (HD == 128 ? 0 : 64 * c)) * D + (HD == 128 ? 64 * 64 * c : 0), tile,\n"
               "                      BM * W * 4);\n"
               "  }\n}")
PAIR_CAUSAL = [WRITERS, D64_WAIT, D64_FREE, D64_PUBLISH]
