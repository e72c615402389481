"""decoupled: each consumer computes the dQ of the previous query block, so the two consumers can run up to a block
apart (a model of its synchronisation: tests/workloads/test_attention_bwd_decoupled_model.py)."""
from __future__ import annotations

from .edits import apply_edits, replace_span

# The consumer of `decoupled`: the reference's consumer_block keeps its S^T / dP^T / exponential / dV / dK body;
# its dQ moves into consumer_dq (issue_dq + add_dq), run at the start of the next block.
DQ_HELPERS = r"""// dQ of query block `it` (rows q0.. of dq_rows) from its dS^T buffer once both consumers' rows are in it:
// HD = 128: columns 64c.. over all 128 keys; HD = 64: all columns over this consumer's keys. Issued and
// committed here; consumer_dq waits for it.
template <int HD>
__device__ __forceinline__ void issue_dq(float (&dq)[32], int it, int c, const uint8_t* sK, const uint8_t* sdS,
                                         uint64_t* dsReady) {
  const int b = it % DS_BUFS;
  mbar_wait(&dsReady[b], (it / DS_BUFS) & 1);
  constexpr int KSTEPS = HD == 128 ? 8 : 4;
  const int key_row0 = HD == 128 ? 0 : 64 * c;
  const uint8_t* kbase = sK + (HD == 128 ? c * KSLAB : 0) + key_row0 * 128;
  const uint64_t da = desc_mn(sdS + b * DS_BYTES + key_row0 * 128, 0), dbk = desc_mn(kbase, 0);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < KSTEPS; ++kk) wgmma_ss_tt(dq, da + kk * (2048 >> 4), dbk + kk * (2048 >> 4), kk != 0);
  wgmma_commit();
}

// dq element j: query row r + 8 ((j / 2) % 2), column 8 (j / 4) + col0 + j % 2 (+ 64c for HD = 128)
template <int HD>
__device__ __forceinline__ void add_dq(const float (&dq)[32], int q0, int c, int t, float* __restrict__ dq_rows, int D) {
  const int lane = t % 32, r = 16 * (t / 32) + lane / 4, col0 = 2 * (lane % 4);
  const int dcol0 = HD == 128 ? 64 * c : 0;
#pragma unroll
  for (int j = 0; j < 32; j += 2) {
    const int d = dcol0 + 8 * (j / 4) + col0;
    if (d < D) {
      float* dst = dq_rows + static_cast<size_t>(q0 + r + 8 * ((j / 2) % 2)) * D + d;
      atomicAdd(reinterpret_cast<float2*>(dst), make_float2(dq[j], dq[j + 1]));
    }
  }
}

// One query block for one consumer, without its dQ: that product (consumer_dq) runs at the start of the next
// block, so a consumer waits only for the other's dS^T of the previous block, never of this one, and the
// two consumers can run apart and one's exponentials overlap the other's tensor work. dS^T is
// triple-buffered: buffer b is rewritten (block it + 3) only after both consumers' dQ products of block it
// have read it (dsFree). Accumulator element j of this thread: row (key) r + 8 ((j / 2) % 2) of the
// consumer's 64, column (query) 8 (j / 4) + 2 (lane % 4) + j % 2 of the block.
"""

CONSUMER_DQ = r"""}

// The dQ of block `it` (rows q0 of dq_rows), whole: issued once both consumers' dS^T rows are in, waited, the
// buffer released, the rows added to the accumulator. Called at the start of the next block (so the
// accumulator registers are never live beside P^T / dS^T) and once after the last block.
template <int HD>
__device__ __forceinline__ void consumer_dq(int it, int q0, int c, int t, const uint8_t* sK, const uint8_t* sdS,
                                            uint64_t* dsReady, uint64_t* dsFree, float* __restrict__ dq_rows, int D) {
  float dq[32];
  issue_dq<HD>(dq, it, c, sK, sdS, dsReady);
  wgmma_wait<0>();
  wgmma_fence_regs(dq);
  if (t % 32 == 0) mbar_arrive(&dsFree[it % DS_BUFS]);
  add_dq<HD>(dq, q0, c, t, dq_rows, D);
}

"""

# Spans of the reference consumer replaced whole: (from the line starting `start`, up to `end`, new text).
DECOUPLED_SPANS = [
    ("// One query block for one consumer. Accumulator element j of this thread", "template <int HD, bool CAUSAL>\n"
     "__device__ __forceinline__ void consumer_block(", DQ_HELPERS),
    ("  named_barrier_sync(1, 256);  // both consumers' dS^T rows are in `buf`", "  fence_u32(pp);",
     "  __syncwarp();\n  if (lane == 0) mbar_arrive(&dsReady[b]);  // this warp's rows of block it are in\n"
     "  wgmma_wait<0>();  // dV / dK of this block\n"),
    ("\n  // dq element j: query row r + 8", "// HD: 128 (D = 96 or 128) or 64. GQA:", CONSUMER_DQ),
]

DECOUPLED_CONSUMER_EDITS = [
    ("                                               uint64_t* fulldO, uint64_t* empty, float (&dv)[HD / 2],\n"
     "                                               float (&dk)[HD / 2], float* __restrict__ dq_rows, int D, float sl2) {\n"
     "  const int st",
     "                                               uint64_t* fulldO, uint64_t* empty, uint64_t* dsReady,\n"
     "                                               uint64_t* dsFree, float (&dv)[HD / 2], float (&dk)[HD / 2], float sl2) {\n"
     "  constexpr int STAGES = Stages<HD>::N;\n  const int st"),
    ("  uint8_t* buf = sdS + (it & 1) * DS_BYTES;",
     "  const int b = it % DS_BUFS;\n"
     "  if (it >= DS_BUFS) mbar_wait(&dsFree[b], (it / DS_BUFS - 1) & 1);  // block it - 3's dQ products are done\n"
     "  uint8_t* buf = sdS + b * DS_BYTES;"),
]

DECOUPLED = [
    ('// Hopper (sm_90a) attention backward with TMA + wgmma,',
     "// VARIANT decoupled (attention_bwd_variants.py): each consumer computes the dQ of the previous query\n// block, so the two consumers can run up to a block apart; dS^T triple-buffered on mbarriers; a 3-deep ring\n// for the 128-wide kernels; consumer 1 starts once consumer 0's first exponentials are done.\n//\n// Hopper (sm_90a) attention backward with TMA + wgmma,"),
    ('smem = "1024 + 32768 * 2 + 2 * (16384 * 2 + 512) + 16384 * 2 + 256"  # slack, K, V, STAGES x (Q, dO, L2, Dr), 2 x dS, mbarriers',
     'smem = "1024 + 512 * (cdiv(D, 64) * 64) + (2 + cdiv(D, 64) // 2) * (256 * (cdiv(D, 64) * 64) + 512) + 16384 * 3 + 256"  # slack, K, V, STAGES x (Q, dO, L2, Dr), 3 x dS, mbarriers (HD = 64 cdiv(D, 64); STAGES 3 for HD 128)'),
    ('constexpr int STAGES = 2;',
     '// Q / dO ring depth: 3 for the 128-wide kernels, 2 for D = 64; dS^T buffers: 3.\ntemplate <int HD>\nstruct Stages {\n  static constexpr int N = HD == 128 ? 3 : 2;\n};\nconstexpr int DS_BUFS = 3;'),
    ('  uint8_t* sQ = sV + KT;                 // STAGES x QT\n  uint8_t* sdO = sQ + STAGES * QT;       // STAGES x QT\n  uint8_t* sdS = sdO + STAGES * QT;      // 2 x DS_BYTES\n  float* sL2 = reinterpret_cast<float*>(sdS + 2 * DS_BYTES);  // STAGES x 64',
     '  constexpr int STAGES = Stages<HD>::N;\n  uint8_t* sQ = sV + KT;                 // STAGES x QT\n  uint8_t* sdO = sQ + STAGES * QT;       // STAGES x QT\n  uint8_t* sdS = sdO + STAGES * QT;      // DS_BUFS x DS_BYTES\n  float* sL2 = reinterpret_cast<float*>(sdS + DS_BUFS * DS_BYTES);  // STAGES x 64'),
    ('  uint64_t* empty = fulldO + STAGES;\n',
     "  uint64_t* empty = fulldO + STAGES;\n  uint64_t* dsReady = empty + STAGES;    // DS_BUFS: both consumers' dS^T rows of a block are in its buffer\n  uint64_t* dsFree = dsReady + DS_BUFS;  // DS_BUFS: both consumers' dQ products have read the buffer\n  uint64_t* kick = dsFree + DS_BUFS;     // consumer 0's first exponentials are done: consumer 1 may start\n"),
    ('      mbar_init(&empty[i], 8);  // one arrival per consumer warp\n    }',
     '      mbar_init(&empty[i], 8);  // one arrival per consumer warp\n    }\n    for (int i = 0; i < DS_BUFS; ++i) {\n      mbar_init(&dsReady[i], 8);\n      mbar_init(&dsFree[i], 8);\n    }\n    mbar_init(kick, 4);'),
    ('    mbar_wait(fullKV, 0);\n    for (int it = 0; it < n_iter; ++it) {\n      const int st = it % STAGES;\n      const int head = (GQA ? bkv * group : bkv) + it / per_head;\n      const int q0 = (q_first + it % per_head) * BM;\n      consumer_block<HD, CAUSAL>(it, q0, key0, c, t, sK, sV, sQ + st * QT, sdO + st * QT, sL2 + st * BM,\n                                 sDr + st * BM, sdS, fullQ, fulldO, empty, dv, dk,\n                                 dQacc + static_cast<size_t>(head) * S * D, D, sl2);\n    }',
     "    mbar_wait(fullKV, 0);\n    if (c == 1) mbar_wait(kick, 0);  // start half a block behind consumer 0: their phases interleave\n    float* dq_prev = dQacc;\n    int q0_prev = 0;\n    for (int it = 0; it < n_iter; ++it) {\n      const int st = it % STAGES;\n      const int head = (GQA ? bkv * group : bkv) + it / per_head;\n      const int q0 = (q_first + it % per_head) * BM;\n      if (it > 0) consumer_dq<HD>(it - 1, q0_prev, c, t, sK, sdS, dsReady, dsFree, dq_prev, D);\n      consumer_block<HD, CAUSAL>(it, q0, key0, c, t, sK, sV, sQ + st * QT, sdO + st * QT, sL2 + st * BM,\n                                 sDr + st * BM, sdS, fullQ, fulldO, empty, dsReady, dsFree, dv, dk, sl2);\n      if (it == 0 && c == 0 && t % 32 == 0) mbar_arrive(kick);\n      dq_prev = dQacc + static_cast<size_t>(head) * S * D;\n      q0_prev = q0;\n    }\n    consumer_dq<HD>(n_iter - 1, q0_prev, c, t, sK, sdS, dsReady, dsFree, dq_prev, D);  // the last block's"),
]


def decoupled(text: str) -> str:
    for start, end, new in DECOUPLED_SPANS:
        text = replace_span(text, start, end, new, "decoupled")
    return apply_edits(text, DECOUPLED_CONSUMER_EDITS + DECOUPLED, "decoupled")
