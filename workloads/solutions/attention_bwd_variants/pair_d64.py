"""pair_d64 (on writer_d96): two writer warps in the D = 64 kernels, one per consumer.

writer_all gave the D = 64 kernels writer_d96's single writer warp: +1.3% at D = 64, -0.7 to -1.3% causal
(attention_bwd.md "v28 measured"). D = 64's block is short and both consumers' tiles are ready at once, so one writer
serving them in turn starts consumer 1's reduction a tile-read late every block. Here warp 1 + c serves consumer c
alone at D = 64 (writer_pair's split, which was level in the 128-wide kernels, "v29 measured"); the 128-wide kernels
keep writer_d96's one writer for both consumers, their code unchanged. The D = 64 consumers publish as writer_all's
did: wait on 7 + c before their stores, arrive on 5 + c after their fence. Consumer c's D = 64 tile is query rows
64c.. of the block, all 64 columns: `rows + 64 * 64 * c`, 64 columns wide, as at D = 128.
"""
from __future__ import annotations

WRITERS = ("    } else if (HD == 128 && t / 32 == 1) {  // dq_writer: the consumers' dQ tiles, reduced (writer_d96: KD = 96 "
           "too)\n"
           "      const bool issuer = t == 32;\n"
           "      if (n_iter > 0) {  // both tiles are free for the first block (no arrival a consumer never meets)\n"
           "        named_barrier_arrive(7, 160);\n"
           "        named_barrier_arrive(8, 160);\n"
           "      }\n",
           "    } else if (t / 32 == 1 || (HD == 64 && t / 32 == 2)) {  // dq_writer: the consumers' dQ tiles, reduced "
           "(writer_d96: KD = 96 too; pair_d64: at D = 64 warp 1 + c serves consumer c alone)\n"
           "      constexpr int NC = HD == 128 ? 2 : 1;  // the consumers one writer warp serves\n"
           "      const int c0 = HD == 128 ? 0 : t / 32 - 1;  // its first\n"
           "      const bool issuer = t == 32 * (c0 + 1);\n"
           "      if (n_iter > 0) {  // its tiles are free for the first block (no arrival a consumer never meets)\n"
           "#pragma unroll\n"
           "        for (int c = c0; c < c0 + NC; ++c) named_barrier_arrive(7 + c, 160);\n"
           "      }\n")
LOOP = ("#pragma unroll\n        for (int c = 0; c < 2; ++c) {\n          named_barrier_sync(5 + c, 160);",
        "#pragma unroll\n        for (int c = c0; c < c0 + NC; ++c) {\n          named_barrier_sync(5 + c, 160);")
# consumer 1's tile is 32 columns only at D = 96; D = 64's are 64 wide like D = 128's
WIDTH = ("            bulk_reduce_add(rows + 64 * 64 * c, sdQ + c * BM * 64, BM * (KD == 128 || c == 0 ? 64 : 32) * 4);\n",
         "            bulk_reduce_add(rows + 64 * 64 * c, sdQ + c * BM * 64, BM * (KD == 96 && c == 1 ? 32 : 64) * 4);\n")
# The D = 64 block's own wait stays though nothing of its thread's is in flight (it returns at once): without it
# ptxas schedules the block anew and spills (writer_all's finding, as bwd_dq_bulk_no_wait_read's mutants do).
D64_WAIT = ("  if (t == 0) bulk_wait_read();  // this consumer's previous dQ reduction has read its tile\n"
            "  named_barrier_sync(1, 256);  // both consumers' dS^T rows are in `buf` (and sdQ is free again)\n",
            "  if (t == 0) bulk_wait_read();  // pair_d64: nothing of this thread's in flight; kept for ptxas (see above)\n"
            "  named_barrier_sync(1, 256);  // both consumers' dS^T rows are in `buf`\n")
D64_FREE = ("  float* tile = sdQ + c * BM * 64;\n#pragma unroll\n  for (int j = 0; j < 32; j += 2) {\n"
            "    const int g = j / 4, row = r + 8 * ((j / 2) % 2);\n",
            "  float* tile = sdQ + c * BM * 64;\n"
            "  named_barrier_sync(7 + c, 160);  // pair_d64: this consumer's writer has read its previous tile\n"
            "#pragma unroll\n  for (int j = 0; j < 32; j += 2) {\n"
            "    const int g = j / 4, row = r + 8 * ((j / 2) % 2);\n")
D64_PUBLISH = ("  fence_proxy_async();\n"
               "  named_barrier_sync(3 + c, 128);  // this consumer's rows are in its tile\n"
               "  if (t == 0)\n"
               "    bulk_reduce_add(dq_rows + static_cast<size_t>(q0 + (HD == 128 ? 0 : 64 * c)) * D + (HD == 128 ? 64 * 64 * c : 0), tile,\n"
               "                    BM * W * 4);\n}",
               "  fence_proxy_async();\n"
               "  named_barrier_arrive(5 + c, 160);  // pair_d64: the tile is this consumer's writer's to reduce\n}")
PAIR_D64 = [WRITERS, LOOP, WIDTH, D64_WAIT, D64_FREE, D64_PUBLISH]
