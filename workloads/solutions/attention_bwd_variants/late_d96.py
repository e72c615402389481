"""late_d96: dq_late's block, and causal_skip's dead block, in the D = 96 entry points only (on pre_plain).

v21-v22 (attention_bwd.md) measured each of them both ways by head dim: dq_late (the dQ tile published by the next
block's dS^T fence and barrier) -3.0% at D = 96 and +6.3% at D = 128; the dead causal block -0.9 / -1.6% at D = 96
causal and +1.8% at D = 128 causal without dq_late. The 128-wide kernels share one block function, so here the D = 96
entry points (KD = 96) call a copy of it with dq_late's edits and causal_skip's halved dQ product
(`consumer_block_late`), and their causal kernels run consumer 1's first block as dq_late's `consumer_block_dead`;
the D = 128 entry points keep pre_plain's block instruction for instruction.
"""
from __future__ import annotations

from .block_causal_skip import DEAD_BLOCK, DQ_PRODUCT
from .block_st_ahead import ST_AHEAD_LOOP_NEW
from .dq_late import LEAVE, PUBLISH, SIGNATURE, STORE
from .edits import apply_edits

BLOCK_START = "template <int HD, bool CAUSAL, int KD>\n__device__ __forceinline__ void consumer_block_pf("

# st_ahead's consumer loop of the 128-wide kernels (its first S^T, then the blocks), quoted from the variant that wrote it
_ST_AHEAD_LOOP = ST_AHEAD_LOOP_NEW[ST_AHEAD_LOOP_NEW.index("      wgmma_fence();"):ST_AHEAD_LOOP_NEW.index("    } else {")]

LOOP = (_ST_AHEAD_LOOP, """      constexpr bool LATE = KD == 96;  // late_d96: dq_late's block and the dead causal block at D = 96 only
      if (!(LATE && CAUSAL) || c == 0) {  // D = 96 causal: consumer 1's first block is dead
        wgmma_fence();
        issue_nt<HD, 64, KD>(s, sK + c * 64 * 128, sQ);  // S^T of the first block
        wgmma_commit();
      }
      [[maybe_unused]] float* pending = nullptr;  // dq_late: where this consumer's dQ tile in sdQ is still to be added
      int it = 0;
      if constexpr (LATE && CAUSAL) {
        if (c == 1 && n_iter > 0) {  // the first block (q0 = key0) sees none of consumer 1's keys
          consumer_block_dead<HD, CAUSAL, KD>(n_iter > 1, q_first * QR, c, t, sK, sQ, sdS, fullQ, fulldO, empty, s,
                                              dQacc + static_cast<size_t>(GQA ? bkv * group : bkv) * S * D, D, sdQ,
                                              pending);
          it = 1;
        }
      }
      for (; it < n_iter; ++it) {
        const int head = (GQA ? bkv * group : bkv) + it / per_head;
        const int q0 = (q_first + it % per_head) * QR;
        if constexpr (LATE)
          consumer_block_late<HD, CAUSAL, KD>(it, it + 1 < n_iter, q0, key0, c, t, sK, sV, sQ, sdO, sL2, sDr, sdS,
                                              fullQ, fulldO, empty, s, dv, dk,
                                              dQacc + static_cast<size_t>(head) * S * D, D, sl2, sdQ, pending);
        else
          consumer_block_pf<HD, CAUSAL, KD>(it, it + 1 < n_iter, q0, key0, c, t, sK, sV, sQ, sdO, sL2, sDr, sdS, fullQ,
                                            fulldO, empty, s, dv, dk, dQacc + static_cast<size_t>(head) * S * D, D,
                                            sl2, sdQ);
      }
      if constexpr (LATE) {  // dq_late: the last block's dQ tile
        fence_proxy_async();
        named_barrier_sync(3 + c, 128);
        if (t == 0 && pending != nullptr) bulk_reduce_add(pending, sdQ + c * BM * 64, BM * (c == 0 ? 64 : 32) * 4);
      }
""")


def late_d96(text: str) -> str:
    """`text` (pre_plain's) with consumer_block_late and consumer_block_dead after consumer_block_pf, and the D = 96
    entry points calling them."""
    start = text.index(BLOCK_START)
    end = text.index("\n}\n", start) + 3
    block = text[start:end]
    late = apply_edits(block, [STORE, PUBLISH, SIGNATURE, LEAVE, DQ_PRODUCT], "late_d96").replace(
        "void consumer_block_pf(", "void consumer_block_late(")
    late = "// late_d96: consumer_block_pf with dq_late's publication of the dQ tile and causal_skip's dQ product\n" + late
    text = text[:end] + "\n" + late + DEAD_BLOCK + text[end:]
    return apply_edits(text, [LOOP], "late_d96")
