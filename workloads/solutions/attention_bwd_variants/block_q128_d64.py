"""q128_d64: 128 query rows per iteration at D = 64, each consumer's dQ over all 128 keys for its own 64 rows."""
from __future__ import annotations

from .dq_tiles import DQ_PRODUCT

# q128_d64: dq_tiles with 128 query rows per iteration at D = 64 (FlashAttention-3's 128 x 128 tile there): S^T and
# dP^T at N = 128, half the blocks (and their barriers, waits and stage hand-offs), and each consumer's dQ over all
# 128 keys for its own 64 query rows, so one 16 KB reduce-add per 64 query rows instead of two (6.4 GB at D = 64
# instead of 12.9). The 128-wide kernels keep 64 rows; the same text serves both through QRows<HD>.
Q128_D64 = [
    ("""// Causal (top-left: key j <= query i): the CTA of key block kb starts at query block 2 kb and masks the
// two query blocks that cross the diagonal; key blocks are numbered in launch order, so the longest go first.""",
     """// Causal (top-left: key j <= query i): the CTA of key block kb starts at query block 2 kb and masks the
// two query blocks that cross the diagonal; key blocks are numbered in launch order, so the longest go first.
// (q128_d64) At D = 64 a query block is 128 rows: S^T and dP^T are m64n128 products, P^T dO and dS^T Q take 8 k16
// steps, dS^T is two 64-query slabs, consumer c computes the dQ of query rows 64c.. over all 128 keys, and causal
// starts at query block kb and masks that one block."""),
    ("""// X^T = A_c B^T for this consumer's 64 keys (A = K or V rows, 128-row slabs) against the 64 query rows of
// B (Q or dO, 64-row slabs)""",
     """// X^T = A_c B^T for this consumer's 64 keys (A = K or V rows, 128-row slabs) against the N (64, or 128 at D = 64)
// query rows of B (Q or dO)"""),
    ("""// acc += X^T B: X^T (64 keys x 64 queries) from registers, B = the 64 x HD Q or dO tile, N-major: 4 k16
// steps over the queries""",
     """// acc += X^T B: X^T (64 keys x N queries) from registers, B = the N x HD Q or dO tile, N-major: N / 16 k16
// steps over the queries"""),
    ("""smem = "1024 + 512 * (cdiv(D, 64) * 64) + (1 + cdiv(D, 64)) * (256 * (cdiv(D, 64) * 64) + 512) + 16384 * 2 + 32768 + 256"  # slack, K, V, STAGES x (Q, dO, L2, Dr), 2 x dS, dQ, mbarriers (64 or 128 wide; 2 or 3 stages)""",
     """smem = "1024 + 32768 * cdiv(D, 64) + (1 + cdiv(D, 64)) * (32768 + 512 * (3 - cdiv(D, 64))) + 32768 * (3 - cdiv(D, 64)) + 32768 + 256"  # slack, K, V, STAGES x (Q, dO, L2, Dr), 2 x dS^T, dQ, mbarriers (D = 64: 128 query rows)"""),
    ("""constexpr int DS_BYTES = 128 * 128; // dS^T of the block: 128 keys x 64 queries bf16
""",
     """// Query rows per iteration: 64 for the 128-wide kernels, 128 at D = 64 (q128_d64: half the blocks, each consumer's
// dQ over all 128 keys for its own 64 query rows, so one reduce-add per 64 query rows instead of two), and the
// bytes of one dS^T buffer (128 keys x QR queries bf16, in 64-query slabs of 128 x 128 bytes).
template <int HD>
struct QRows {
  static constexpr int N = HD == 64 ? 128 : 64;
  static constexpr int DS = 128 * 2 * N;
};
"""),
    ("""template <int HD>
__device__ __forceinline__ void issue_nt(float (&x)[32], const uint8_t* a, const uint8_t* b) {""",
     """template <int HD, int N = 64>
__device__ __forceinline__ void issue_nt(float (&x)[N / 2], const uint8_t* a, const uint8_t* b) {"""),
    ("""    wgmma_m64k16_bf16<64>(x, da + (kk / 4) * (KSLAB >> 4) + 2 * (kk % 4), db + (kk / 4) * (QSLAB >> 4) + 2 * (kk % 4),""",
     """    wgmma_m64k16_bf16<N>(x, da + (kk / 4) * (KSLAB >> 4) + 2 * (kk % 4), db + (kk / 4) * (QSLAB >> 4) + 2 * (kk % 4),"""),
    ("""template <int HD>
__device__ __forceinline__ void issue_tn(float (&acc)[HD / 2], const uint32_t (&x)[16], const uint8_t* b) {
  const uint64_t db = desc_mn(b, QSLAB);
#pragma unroll
  for (int kk = 0; kk < 4; ++kk)""",
     """template <int HD, int N = 64>
__device__ __forceinline__ void issue_tn(float (&acc)[HD / 2], const uint32_t (&x)[N / 4], const uint8_t* b) {
  const uint64_t db = desc_mn(b, QSLAB);
#pragma unroll
  for (int kk = 0; kk < N / 16; ++kk)"""),
    ("""  float s[32], p[32];
  uint32_t pp[16], ds[16];
""",
     """  constexpr int QR = QRows<HD>::N;  // query rows of the block
  float s[QR / 2], p[QR / 2];
  uint32_t pp[QR / 4], ds[QR / 4];
"""),
    ("""  issue_nt<HD>(s, sK + c * 64 * 128, sQ);     // S^T = K_c Q^T""",
     """  issue_nt<HD, QR>(s, sK + c * 64 * 128, sQ);     // S^T = K_c Q^T"""),
    ("""  issue_nt<HD>(p, sV + c * 64 * 128, sdO);    // dP^T = V_c dO^T""",
     """  issue_nt<HD, QR>(p, sV + c * 64 * 128, sdO);    // dP^T = V_c dO^T"""),
    ("""  const bool mask = CAUSAL && q0 < key0 + BN;  // the two query blocks that cross the diagonal
  // the 16 query columns of this thread: pairs (8a + col0, + 1), a = 0..7, for L2 and Dr
  float2 l2[8], dr[8];
#pragma unroll
  for (int a = 0; a < 8; ++a) l2[a] = lds64(sL2 + 8 * a + col0);
#pragma unroll
  for (int j = 0; j < 32; ++j) {""",
     """  const bool mask = CAUSAL && q0 < key0 + BN;  // the query blocks that cross the diagonal (D = 64: the one)
  // the QR / 4 query columns of this thread: pairs (8a + col0, + 1), a = 0..QR / 8 - 1, for L2 and Dr
  float2 l2[QR / 8], dr[QR / 8];
#pragma unroll
  for (int a = 0; a < QR / 8; ++a) l2[a] = lds64(sL2 + 8 * a + col0);
#pragma unroll
  for (int j = 0; j < QR / 2; ++j) {"""),
    ("""#pragma unroll
  for (int a = 0; a < 8; ++a) dr[a] = lds64(sDr + 8 * a + col0);
#pragma unroll
  for (int j = 0; j < 32; ++j) p[j] = s[j] * (p[j] - (j % 2 ? dr[j / 4].y : dr[j / 4].x));
#pragma unroll
  for (int i = 0; i < 16; ++i) {""",
     """#pragma unroll
  for (int a = 0; a < QR / 8; ++a) dr[a] = lds64(sDr + 8 * a + col0);
#pragma unroll
  for (int j = 0; j < QR / 2; ++j) p[j] = s[j] * (p[j] - (j % 2 ? dr[j / 4].y : dr[j / 4].x));
#pragma unroll
  for (int i = 0; i < QR / 4; ++i) {"""),
    ("""  issue_tn<HD>(dv, pp, sdO);  // dV += P^T dO
  issue_tn<HD>(dk, ds, sQ);   // dK += dS^T Q""",
     """  issue_tn<HD, QR>(dv, pp, sdO);  // dV += P^T dO
  issue_tn<HD, QR>(dk, ds, sQ);   // dK += dS^T Q"""),
    ("""  // dS^T to shared memory: row = key (64c + r [+ 8]), 64 queries per 128-byte row, 16-byte chunks swizzled
  // by the row's position in its 8-row atom (what TMA writes for a 128B-swizzled box).
  uint8_t* buf = sdS + (it & 1) * DS_BYTES;
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    const int row = 64 * c + r + 8 * (i % 2), q = 8 * (i / 2) + col0;
    sts32(buf + row * 128 + (((q / 8) ^ (row % 8)) * 16) + (q % 8) * 2, ds[i]);
  }""",
     """  // dS^T to shared memory: row = key (64c + r [+ 8]), 64 queries per 128-byte row (D = 64: two such slabs of
  // 128 rows, queries 0..63 and 64..127), 16-byte chunks swizzled by the row's position in its 8-row atom (what
  // TMA writes for a 128B-swizzled box).
  uint8_t* buf = sdS + (it & 1) * QRows<HD>::DS;
#pragma unroll
  for (int i = 0; i < QR / 4; ++i) {
    const int row = 64 * c + r + 8 * (i % 2), q = 8 * (i / 2) + col0;
    sts32(buf + (q / 64) * (128 * 128) + row * 128 + ((((q % 64) / 8) ^ (row % 8)) * 16) + (q % 8) * 2, ds[i]);
  }"""),
    (DQ_PRODUCT,
     """  // dQ_partial = dS K over all 128 keys: HD = 128: the block's 64 query rows, columns 64c..; HD = 64: query rows
  // 64c.. of the 128 (dS^T slab c), all 64 columns.
  float dq[32];
  const uint8_t* kbase = sK + (HD == 128 ? c * KSLAB : 0);
  const uint64_t da = desc_mn(buf + (HD == 128 ? 0 : c * 128 * 128), 0), dbk = desc_mn(kbase, 0);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 8; ++kk)"""),
    ("""  // dq element j: query row r + 8 ((j / 2) % 2), column 8 (j / 4) + col0 + j % 2 (+ 64c for HD = 128)
  // This consumer's partial into its own tile, reduced by its thread 0 without waiting for the other consumer.
  // The tile has dQacc's layout (attn_bwd_post reads it back): HD = 128: consumer c's columns 64c.. (W = min(64,
  // D - 64c) wide), 64 x 64c floats into the block's rows; HD = 64: all 64 columns over its own keys (both
  // consumers add into the block's one tile).""",
     """  // dq element j: query row r + 8 ((j / 2) % 2) (+ 64c for HD = 64), column 8 (j / 4) + col0 + j % 2 (+ 64c for
  // HD = 128). This consumer's partial into its own tile, reduced by its thread 0 without waiting for the other
  // consumer. The tile has dQacc's layout (attn_bwd_post reads it back): HD = 128: consumer c's columns 64c.. (W =
  // min(64, D - 64c) wide), 64 x 64c floats into the block's rows; HD = 64: all 64 columns of query rows 64c..
  //"""),
    ("""  if (t == 0) bulk_reduce_add(dq_rows + static_cast<size_t>(q0) * D + (HD == 128 ? 64 * 64 * c : 0), tile, BM * W * 4);""",
     """  if (t == 0)
    bulk_reduce_add(dq_rows + static_cast<size_t>(q0 + (HD == 128 ? 0 : 64 * c)) * D + (HD == 128 ? 64 * 64 * c : 0), tile,
                    BM * W * 4);"""),
    ("""  constexpr int KT = HD / 64 * KSLAB, QT = HD / 64 * QSLAB;""",
     """  constexpr int QR = QRows<HD>::N;  // query rows per iteration
  constexpr int KT = HD / 64 * KSLAB, QT = 2 * QSLAB;  // a Q / dO tile: HD = 128 two d slabs, HD = 64 two row halves"""),
    ("""  uint8_t* sdS = sdO + Stages<HD>::N * QT;      // 2 x DS_BYTES
  float* sdQ = reinterpret_cast<float*>(sdS + 2 * DS_BYTES);""",
     """  uint8_t* sdS = sdO + Stages<HD>::N * QT;      // 2 x QRows<HD>::DS
  float* sdQ = reinterpret_cast<float*>(sdS + 2 * QRows<HD>::DS);"""),
    ("""  float* sDr = sL2 + Stages<HD>::N * BM;                              // Stages<HD>::N x 64
  uint64_t* fullKV = reinterpret_cast<uint64_t*>(sDr + Stages<HD>::N * BM);""",
     """  float* sDr = sL2 + Stages<HD>::N * QR;                              // Stages<HD>::N x QR
  uint64_t* fullKV = reinterpret_cast<uint64_t*>(sDr + Stages<HD>::N * QR);"""),
    ("""  const int q_first = CAUSAL ? key0 / BM : 0;
  const int per_head = S / BM - q_first;  // query blocks per query head""",
     """  const int q_first = CAUSAL ? key0 / QR : 0;
  const int per_head = S / QR - q_first;  // query blocks per query head"""),
    ("""        const int q_row = head * S + (q_first + it % per_head) * BM;  // first row in the [B*H*S, D] view
        mbar_wait(&empty[st], ph ^ 1);  // a fresh barrier passes parity 1 at once
        mbar_arrive_expect_tx(&fullQ[st], QT + BM * 4);
#pragma unroll
        for (int s = 0; s < HD / 64; ++s) tma_load_2d(sQ + st * QT + s * QSLAB, tmQ, &fullQ[st], 64 * s, q_row);
        bulk_load(sL2 + st * BM, L2 + q_row, BM * 4, &fullQ[st]);
        mbar_arrive_expect_tx(&fulldO[st], QT + BM * 4);
#pragma unroll
        for (int s = 0; s < HD / 64; ++s) tma_load_2d(sdO + st * QT + s * QSLAB, tmdO, &fulldO[st], 64 * s, q_row);
        bulk_load(sDr + st * BM, Dr + q_row, BM * 4, &fulldO[st]);""",
     """        const int q_row = head * S + (q_first + it % per_head) * QR;  // first row in the [B*H*S, D] view
        mbar_wait(&empty[st], ph ^ 1);  // a fresh barrier passes parity 1 at once
        mbar_arrive_expect_tx(&fullQ[st], QT + QR * 4);
        // two 64 x 64 boxes: HD = 128 the two d slabs of 64 rows, HD = 64 rows q_row.. and q_row + 64.. (one slab)
#pragma unroll
        for (int s = 0; s < 2; ++s)
          tma_load_2d(sQ + st * QT + s * QSLAB, tmQ, &fullQ[st], HD == 128 ? 64 * s : 0, q_row + (HD == 128 ? 0 : 64 * s));
        bulk_load(sL2 + st * QR, L2 + q_row, QR * 4, &fullQ[st]);
        mbar_arrive_expect_tx(&fulldO[st], QT + QR * 4);
#pragma unroll
        for (int s = 0; s < 2; ++s)
          tma_load_2d(sdO + st * QT + s * QSLAB, tmdO, &fulldO[st], HD == 128 ? 64 * s : 0, q_row + (HD == 128 ? 0 : 64 * s));
        bulk_load(sDr + st * QR, Dr + q_row, QR * 4, &fulldO[st]);"""),
    ("""      const int q0 = (q_first + it % per_head) * BM;
      consumer_block<HD, CAUSAL>(it, q0, key0, c, t, sK, sV, sQ + st * QT, sdO + st * QT, sL2 + st * BM,
                                 sDr + st * BM, sdS,""",
     """      const int q0 = (q_first + it % per_head) * QR;
      consumer_block<HD, CAUSAL>(it, q0, key0, c, t, sK, sV, sQ + st * QT, sdO + st * QT, sL2 + st * QR,
                                 sDr + st * QR, sdS,"""),
]
