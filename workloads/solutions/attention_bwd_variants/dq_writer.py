"""dq_writer (on late_d96): the 128-wide block's dQ tile reduced by a warp of the producer warpgroup, as
FlashAttention-3's backward does, instead of by a consumer thread after a barrier of its warpgroup.

In the reference, each consumer stores its fp32 dQ tile, fences, meets its four warps on named barrier 3 + c, and one
thread issues the bulk reduce-add; the next block's thread 0 waits for that reduction to have read the tile before
barrier 1. The tile's stores, fence and barrier are about 15% of the main kernel's stall samples (attention_bwd.md,
"The reference again, with its profile"). Here a consumer stores, fences and only *arrives* on barrier 5 + c (160
threads: its 128 and the writer warp's 32), then goes on; the writer warp (warp 1 of the producer warpgroup, idle
until now) waits there, issues the reduce-add, waits for it to have read the tile, and arrives on barrier 7 + c, which
the consumer syncs on before its next tile store (a block later, so it seldom waits). The writer arrives on 7 + c once
before the first block and not after the last, so every barrier's arrivals match. Only the KD = 128 kernels have the
writer, and the block keeps the reference's publication for any other KD; D = 96 (late_d96's own block) and D = 64
keep their reductions. The reference since it was measured on the H200: -7.6% kernel time at D = 128, -6.0% causal,
-8.5% GQA against late_d96 (bench/results/attention_bwd.md "v26-v27 measured").
"""
from __future__ import annotations

from .edits import apply_edits

ARRIVE = ("__device__ __forceinline__ void bulk_wait_all() {",
          "// dq_writer: a named barrier this warp passes without waiting for the others\n"
          "__device__ __forceinline__ void named_barrier_arrive(uint32_t id, uint32_t threads) {\n"
          "  asm volatile(\"bar.arrive %0, %1;\" :: \"r\"(id), \"r\"(threads) : \"memory\");\n}\n"
          "__device__ __forceinline__ void bulk_wait_all() {")

# the 128-wide block (consumer_block_pf): the tile is free once the writer has read the previous one
WAIT_READ = ("  if (t == 0) bulk_wait_read();  // this consumer's previous dQ reduction has read its tile\n"
             "  named_barrier_sync(1, 256);    // both consumers' dS^T rows are in `buf` (and sdQ is free again)\n",
             "  if constexpr (KD != 128) {  // dq_writer: at KD = 128 the writer warp waits for the reads\n"
             "    if (t == 0) bulk_wait_read();  // this consumer's previous dQ reduction has read its tile\n"
             "  }\n"
             "  named_barrier_sync(1, 256);    // both consumers' dS^T rows are in `buf`\n")
PUBLISH = ("  float* tile = sdQ + c * BM * 64;\n"
           "  if (W == 64) store_dq_tile<64>(tile, dq, r, col0);\n"
           "  else store_dq_tile<32>(tile, dq, r, col0);\n"
           "  fence_proxy_async();\n"
           "  named_barrier_sync(3 + c, 128);  // this consumer's rows are in its tile\n"
           "  if (t == 0) bulk_reduce_add(dq_rows + static_cast<size_t>(q0) * D + 64 * 64 * c, tile, BM * W * 4);\n}",
           "  float* tile = sdQ + c * BM * 64;\n"
           "  if constexpr (KD == 128)  // dq_writer: the writer warp has read this consumer's previous tile\n"
           "    named_barrier_sync(7 + c, 160);\n"
           "  if (W == 64) store_dq_tile<64>(tile, dq, r, col0);\n"
           "  else store_dq_tile<32>(tile, dq, r, col0);\n"
           "  fence_proxy_async();\n"
           "  if constexpr (KD == 128) {  // dq_writer: the tile is the writer warp's to reduce\n"
           "    named_barrier_arrive(5 + c, 160);\n"
           "  } else {  // no writer in these kernels: the reference's publication\n"
           "    named_barrier_sync(3 + c, 128);  // this consumer's rows are in its tile\n"
           "    if (t == 0) bulk_reduce_add(dq_rows + static_cast<size_t>(q0) * D + 64 * 64 * c, tile, BM * W * 4);\n"
           "  }\n}")
# the writer warp, beside the producer thread, in the kernels whose blocks are consumer_block_pf's (KD = 128). It runs
# within the producer warpgroup's 24 registers: the CTA's register pool is its launch allocation (384 x 168 = 64,512),
# which the consumers' 256 x 240 leave 3,072 of, 128 x 24. A producer warpgroup at 32 made the consumers'
# setmaxnreg.inc wait forever (the first build of this variant hung there, tools/regpool.py). So the destination is a
# pointer stepped block by block, not an index recomputed from the head and the block.
PRODUCER = ("      for (int it = 0; it < n_iter; ++it) {\n"
            "        const int st = it % Stages<HD>::N;\n"
            "        const uint32_t ph = (it / Stages<HD>::N) & 1;\n"
            "        const int head = (GQA ? bkv * group : bkv) + it / per_head;\n"
            "        const int q_row = head * S + (q_first + it % per_head) * QR;  // first row in the [B*H*S, D] view\n",
            "      // dq_writer: in the writer's kernels the first row is stepped block by block (the division by per_head\n"
            "      // spilled at 24 registers beside the writer); the next head starts again at q_first\n"
            "      [[maybe_unused]] int next_row = (GQA ? bkv * group : bkv) * S + q_first * QR, in_head = 0;\n"
            "      for (int it = 0; it < n_iter; ++it) {\n"
            "        const int st = it % Stages<HD>::N;\n"
            "        const uint32_t ph = (it / Stages<HD>::N) & 1;\n"
            "        const int q_row = HD == 128 && KD == 128 ? next_row  // first row in the [B*H*S, D] view\n"
            "                        : ((GQA ? bkv * group : bkv) + it / per_head) * S + (q_first + it % per_head) * QR;\n")
WRITER = ("        bulk_load(sDr + st * QR, Dr + q_row, QR * 4, &fulldO[st]);\n      }\n    }\n  } else {",
          "        bulk_load(sDr + st * QR, Dr + q_row, QR * 4, &fulldO[st]);\n"
          "        if constexpr (HD == 128 && KD == 128) {\n"
          "          next_row += QR;\n"
          "          if (++in_head == per_head) {\n"
          "            in_head = 0;\n"
          "            next_row += q_first * QR;\n"
          "          }\n"
          "        }\n      }\n"
          "    } else if (HD == 128 && KD == 128 && t / 32 == 1) {  // dq_writer: the consumers' dQ tiles, reduced\n"
          "      const bool issuer = t == 32;\n"
          "      if (n_iter > 0) {  // both tiles are free for the first block (no arrival a consumer never meets)\n"
          "        named_barrier_arrive(7, 160);\n"
          "        named_barrier_arrive(8, 160);\n"
          "      }\n"
          "      // this block's dQ rows; a head's blocks are consecutive, and the next head starts again at q_first\n"
          "      float* rows = dQacc + static_cast<size_t>(GQA ? bkv * group : bkv) * S * D\n"
          "                  + static_cast<size_t>(q_first * QR) * D;\n"
          "      for (int it = 0, in_head = 0; it < n_iter; ++it) {\n"
          "#pragma unroll\n"
          "        for (int c = 0; c < 2; ++c) {\n"
          "          named_barrier_sync(5 + c, 160);  // consumer c's tile is stored and fenced\n"
          "          if (issuer) {\n"
          "            bulk_reduce_add(rows + 64 * 64 * c, sdQ + c * BM * 64, BM * 64 * 4);\n"
          "            bulk_wait_read();  // the reduction has read the tile\n"
          "          }\n"
          "          __syncwarp();\n"
          "          if (it + 1 < n_iter) named_barrier_arrive(7 + c, 160);  // the tile is free (none after the last)\n"
          "        }\n"
          "        rows += static_cast<size_t>(QR) * D;\n"
          "        if (++in_head == per_head) {\n"
          "          in_head = 0;\n"
          "          rows += static_cast<size_t>(q_first * QR) * D;\n"
          "        }\n"
          "      }\n"
          "      if (issuer) bulk_wait_all();  // the last reductions are done before the CTA leaves\n"
          "    }\n  } else {")
EDITS = [ARRIVE, WAIT_READ, PUBLISH, PRODUCER, WRITER]


def dq_writer(text: str) -> str:
    return apply_edits(text, EDITS, "dq_writer")
