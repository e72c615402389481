"""own_keys and own_keys_s3: every consumer's dQ over its own 64 keys and all D columns, so the consumers never meet
(measured candidates: slower than dq_tiles)."""
from __future__ import annotations

from .dq_tiles import DQ_PRODUCT, DQ_TILE_STORE

# The dQ product of own_keys at D = 96 / 128: m64n128k16, both operands MN-major (64 accumulator registers).
WGMMA_SS_TT128 = (
    "// D[64 x 128] (+)= A B, both operands MN-major in shared memory (dS^T rows; K rows, two 64-column slabs).\n"
    "__device__ __forceinline__ void wgmma_ss_tt128(float (&d)[64], uint64_t da, uint64_t db, int scale_d) {\n"
    "  asm volatile(\n"
    '      "{\\n\\t.reg .pred p;\\n\\tsetp.ne.b32 p, %66, 0;\\n\\t"\n'
    '      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {' + ", ".join(f"%{i}" for i in range(64))
    + '}, %64, %65, p, 1, 1, 1, 1;\\n\\t}"\n'
    "      : " + ", ".join(f'"+f"(d[{i}])' for i in range(64)) + "\n"
    '      : "l"(da), "l"(db), "r"(scale_d));\n'
    "}\n\n")


# own_keys' dQ store: a consumer's 64 x D tile over its own keys, which own_keys_s3 rewrites.
OWN_KEYS_TILE_STORE = """  float* tile = sdQ + c * BM * HD;
#pragma unroll
  for (int j = 0; j < HD / 2; j += 2) {
    const int h = j / 32, g = (j / 4) % 8, row = r + 8 * ((j / 2) % 2);
    const int W = min(64, D - 64 * h), sw = W / 8 - 1;
    if (8 * g < W) sts64(tile + 64 * 64 * h + row * W + 8 * (g ^ (row & sw)) + col0, dq[j], dq[j + 1]);
  }
  fence_proxy_async();
  named_barrier_sync(3 + c, 128);  // this consumer's rows are in its tile
  if (t == 0) bulk_reduce_add(dq_rows + static_cast<size_t>(q0) * D, tile, BM * D * 4);"""


# own_keys: dq_tiles with every consumer's dQ over its own 64 keys and all D columns (as D = 64 always did), so at
# D = 96 / 128 too a consumer reads only its own rows of dS^T and the two consumers never meet: the dS^T barrier
# becomes the consumer's own; a 2-deep ring pays for the two 64 x D tiles (the 3-deep one measured within the spread).
OWN_KEYS = [
    ('smem = "1024 + 512 * (cdiv(D, 64) * 64) + (1 + cdiv(D, 64)) * (256 * (cdiv(D, 64) * 64) + 512) + 16384 * 2 + '
     '32768 + 256"  # slack, K, V, STAGES x (Q, dO, L2, Dr), 2 x dS, dQ, mbarriers (64 or 128 wide; 2 or 3 stages)',
     'smem = "1024 + 512 * (cdiv(D, 64) * 64) + 2 * (256 * (cdiv(D, 64) * 64) + 512) + 16384 * 2 + 32768 * cdiv(D, 64) '
     '+ 256"  # slack, K, V, 2 x (Q, dO, L2, Dr), 2 x dS, 2 dQ tiles of 64 x (64 or 128) fp32, mbarriers'),
    ("""// Q / dO ring depth: 3 for the 128-wide kernels (the shared memory allows it with the dQ buffer), 2 for D = 64.
template <int HD>
struct Stages {
  static constexpr int N = HD == 128 ? 3 : 2;
};""", """// Q / dO ring depth: 2 (the two consumers' 64 x HD fp32 dQ tiles take the third stage's shared memory).
template <int HD>
struct Stages {
  static constexpr int N = 2;
};"""),
    ("// X^T = A_c B^T for this consumer's 64 keys", WGMMA_SS_TT128 + "// X^T = A_c B^T for this consumer's 64 keys"),
    ("  named_barrier_sync(1, 256);  // both consumers' dS^T rows are in `buf` (and sdQ is free again)",
     "  named_barrier_sync(3 + c, 128);  // this consumer's dS^T rows are in `buf` (and its tile is free again)"),
    ("""//       dQ_partial = dS K      SS, dS MN-major (imm-trans-a), K N-major   m64n64k16
//     HD = 128: both consumers meet on a named barrier and consumer c computes d columns 64c..64c+63
//     over all 128 keys; HD = 64: each consumer computes all 64 columns over its own 64 keys.
//     The dS buffer is double-buffered: a consumer rewrites buffer b only after the barrier of the next
//     iteration, which the other consumer reaches only once its dQ product of buffer b has completed.""",
     """//       dQ_partial = dS K      SS, dS MN-major (imm-trans-a), K N-major   m64nHDk16 x 4
//     (own_keys) each consumer computes all HD columns over its own 64 keys, reading only its own rows of
//     dS^T, and reduces its 64 x D tile into dQacc itself: the consumers never meet. The dS buffer is
//     double-buffered; a consumer rewrites its rows of buffer b two blocks later, after its own dQ product."""),
    (DQ_PRODUCT + " wgmma_ss_tt(dq, da + kk * (2048 >> 4), dbk + kk * (2048 >> 4), kk != 0);",
     """  // dQ_partial = dS K over this consumer's own 64 keys, all HD columns (K's two 64-column slabs one LBO apart).
  if constexpr (HD == 128) {  // dV / dK first: their 128 accumulators, P^T / dS^T and 64 for dQ at once would not fit
    wgmma_wait<0>();          // beside the wgmma pipeline (ptxas would serialise every wgmma of the kernel: C7512)
    fence_u32(pp);
    fence_u32(ds);
  }
  float dq[HD / 2];
  const uint64_t da = desc_mn(buf + 64 * c * 128, 0), dbk = desc_mn(sK + 64 * c * 128, HD == 128 ? KSLAB : 0);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    if constexpr (HD == 128) {
      wgmma_ss_tt128(dq, da + kk * (2048 >> 4), dbk + kk * (2048 >> 4), kk != 0);
    } else {
      wgmma_ss_tt(dq, da + kk * (2048 >> 4), dbk + kk * (2048 >> 4), kk != 0);
    }
  }"""),
    ("  // dq element j: query row r + 8 ((j / 2) % 2), column 8 (j / 4) + col0 + j % 2 (+ 64c for HD = 128)\n"
     + DQ_TILE_STORE,
     """  // dq element j: query row r + 8 ((j / 2) % 2), column 8 (j / 4) + col0 + j % 2: 32-byte group j / 4 of the row.
  // This consumer's partial (its own keys, every column) into its own tile in dQacc's layout (attn_bwd_post reads
  // it back): the block's columns in halves of 64 (the second W = D - 64 wide at D = 96), one after the other,
  // rows W floats long, 32-byte group g of row `row` at g ^ (row % (W / 8)); both consumers reduce into the
  // block's same 64 x D floats.
""" + OWN_KEYS_TILE_STORE),
    ("  float* sdQ = reinterpret_cast<float*>(sdS + 2 * DS_BYTES);  // HD = 128: 64 x D fp32\n"
     "  float* sL2 = sdQ + BM * 128;  // dQ: HD = 128 one [64][D] tile, HD = 64 one [64][64] tile per consumer",
     "  float* sdQ = reinterpret_cast<float*>(sdS + 2 * DS_BYTES);  // one 64 x HD fp32 dQ tile per consumer\n"
     "  float* sL2 = sdQ + 2 * BM * HD;"),
]


# own_keys_s3: own_keys with the 3-deep ring back for the 128-wide kernels: each consumer's dQ goes out through one
# 16 KB tile in column halves (write a half, reduce it, wait for that reduction's reads, write the next).
OWN_KEYS_S3 = [
    ('smem = "1024 + 512 * (cdiv(D, 64) * 64) + 2 * (256 * (cdiv(D, 64) * 64) + 512) + 16384 * 2 + 32768 * cdiv(D, 64) '
     '+ 256"  # slack, K, V, 2 x (Q, dO, L2, Dr), 2 x dS, 2 dQ tiles of 64 x (64 or 128) fp32, mbarriers',
     'smem = "1024 + 512 * (cdiv(D, 64) * 64) + (1 + cdiv(D, 64)) * (256 * (cdiv(D, 64) * 64) + 512) + 16384 * 2 + '
     '32768 + 256"  # slack, K, V, STAGES x (Q, dO, L2, Dr), 2 x dS, 2 dQ tiles of 64 x 64 fp32, mbarriers'),
    ("""// Q / dO ring depth: 2 (the two consumers' 64 x HD fp32 dQ tiles take the third stage's shared memory).
template <int HD>
struct Stages {
  static constexpr int N = 2;
};""", """// Q / dO ring depth: 3 for the 128-wide kernels (each consumer's dQ leaves through one 64 x 64 tile, a column
// half at a time), 2 for D = 64.
template <int HD>
struct Stages {
  static constexpr int N = HD == 128 ? 3 : 2;
};"""),
    (OWN_KEYS_TILE_STORE,
     """  // One 64 x 64 tile per consumer: the column halves go out one after the other.
  float* tile = sdQ + c * BM * 64;
#pragma unroll
  for (int h = 0; h < HD / 64; ++h) {
    const int W = min(64, D - 64 * h), sw = W / 8 - 1;
    if (h > 0) {  // the tile again: the first half's reduction must have read it
      if (t == 0) bulk_wait_read();
      named_barrier_sync(3 + c, 128);
    }
#pragma unroll
    for (int j = 32 * h; j < 32 * h + 32; j += 2) {
      const int g = (j / 4) % 8, row = r + 8 * ((j / 2) % 2);
      if (8 * g < W) sts64(tile + row * W + 8 * (g ^ (row & sw)) + col0, dq[j], dq[j + 1]);
    }
    fence_proxy_async();
    named_barrier_sync(3 + c, 128);  // this consumer's rows of the half are in its tile
    if (t == 0) bulk_reduce_add(dq_rows + static_cast<size_t>(q0) * D + 64 * 64 * h, tile, BM * W * 4);
  }"""),
    ("  float* sdQ = reinterpret_cast<float*>(sdS + 2 * DS_BYTES);  // one 64 x HD fp32 dQ tile per consumer\n"
     "  float* sL2 = sdQ + 2 * BM * HD;",
     "  float* sdQ = reinterpret_cast<float*>(sdS + 2 * DS_BYTES);  // one 64 x 64 fp32 dQ tile per consumer\n"
     "  float* sL2 = sdQ + 2 * BM * 64;"),
]
