"""rotate_d64 (on writer_d96) and pair_rotate (on pair_d64): each non-causal D = 64 CTA starts its walk over the
query blocks at its own key block's index.

Under head_groups the 32 key-block CTAs of a head run at the same time, and without a mask they walk the head's query
blocks in the same order, 0, 1, 2, ...: every query block's dQ rows receive the 32 CTAs' bulk reduce-adds at about the
same moment, and reductions to one address are serialised at L2. The causal CTAs start at their own diagonal (q_first)
and are staggered already; they are the D = 64 kernels where the writer warps measured faster (attention_bwd.md "v30
measured"), and the non-causal ones where the writers, which publish each tile sooner and so more in step, measured
slower. Here non-causal CTA kb walks kb, kb + 1, ..., per_head - 1, 0, ..., kb - 1 of each head (any order gives the
same sums up to the reduce-adds' rounding, whose order the hardware never fixed). The producer's rows and the
consumers' q0 take the rotation; in pair_rotate the writers' stepped rows wrap with it. The 128-wide and causal
kernels are unchanged (`rot` is 0 there at compile time).
"""
from __future__ import annotations

ROT = ("  const int per_head = S / QR - q_first;  // query blocks per query head\n",
       "  const int per_head = S / QR - q_first;  // query blocks per query head\n"
       "  constexpr bool ROT = HD == 64 && !CAUSAL;  // rotate_d64: the non-causal D = 64 walk starts at block kb\n"
       "  const int rot = ROT ? kb % per_head : 0;\n")
PRODUCER = ("                        : ((GQA ? bkv * group : bkv) + it / per_head) * S + (q_first + it % per_head) * QR;\n",
            "                        : ((GQA ? bkv * group : bkv) + it / per_head) * S\n"
            "                            + (q_first + (it % per_head + rot) % per_head) * QR;  // rotate_d64\n")
CONSUMER = ("      const int head = (GQA ? bkv * group : bkv) + it / per_head;\n"
            "      const int q0 = (q_first + it % per_head) * QR;\n"
            "      consumer_block<HD, CAUSAL, KD>(",
            "      const int head = (GQA ? bkv * group : bkv) + it / per_head;\n"
            "      const int q0 = (q_first + (it % per_head + rot) % per_head) * QR;  // rotate_d64\n"
            "      consumer_block<HD, CAUSAL, KD>(")
ROTATE_D64 = [ROT, PRODUCER, CONSUMER]

# pair_rotate: the D = 64 writers' rows start at the rotated block and wrap at the head's end
WRITER_START = ("                  + static_cast<size_t>(q_first * QR) * D;\n"
                "      for (int it = 0, in_head = 0; it < n_iter; ++it) {\n",
                "                  + static_cast<size_t>((q_first + rot) * QR) * D;  // rotate_d64: block rot first\n"
                "      for (int it = 0, in_head = 0, qb = rot; it < n_iter; ++it) {\n")
WRITER_STEP = ("        rows += static_cast<size_t>(QR) * D;\n"
               "        if (++in_head == per_head) {\n"
               "          in_head = 0;\n"
               "          rows += static_cast<size_t>(q_first * QR) * D;\n",
               "        rows += static_cast<size_t>(QR) * D;\n"
               "        if (ROT && ++qb == per_head) {  // rotate_d64: past the head's last block, back to its first\n"
               "          qb = 0;\n"
               "          rows -= static_cast<size_t>(S) * D;\n"
               "        }\n"
               "        if (++in_head == per_head) {  // the next head (rotated: from block rot again)\n"
               "          in_head = 0;\n"
               "          rows += static_cast<size_t>(ROT ? S : q_first * QR) * D;\n")
PAIR_ROTATE = ROTATE_D64 + [WRITER_START, WRITER_STEP]
