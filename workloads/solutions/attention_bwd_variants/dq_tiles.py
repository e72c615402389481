"""dq_tiles: each consumer's dQ reduced on its own from a swizzled tile in dQacc's layout (the base of the later
builds), and its dQ product, which own_keys and q128_d64 each rewrite."""
from __future__ import annotations

from .dq_bulk import DQ_STORE_128, DQ_TILE_64

# dq_tiles' dQ store: the rows of a consumer's swizzled tile (st_ahead's block stores its tile the same way) and the
# whole store, which own_keys rewrites.
DQ_TILE_ROWS = """  float* tile = sdQ + c * BM * 64;
#pragma unroll
  for (int j = 0; j < 32; j += 2) {
    const int g = j / 4, row = r + 8 * ((j / 2) % 2);
    if (8 * g < W) sts64(tile + row * W + 8 * (g ^ (row & sw)) + col0, dq[j], dq[j + 1]);
  }
  fence_proxy_async();
  named_barrier_sync(3 + c, 128);  // this consumer's rows are in its tile
"""
DQ_TILE_STORE = """  // This consumer's partial into its own tile, reduced by its thread 0 without waiting for the other consumer.
  // The tile has dQacc's layout (attn_bwd_post reads it back): HD = 128: consumer c's columns 64c.. (W = min(64,
  // D - 64c) wide), 64 x 64c floats into the block's rows; HD = 64: all 64 columns over its own keys (both
  // consumers add into the block's one tile). Rows W floats long, 32-byte group g of row `row` at g ^ (row % (W / 8)):
  // a warp's 8 rows of one group land on 8 different groups of banks.
  const int W = HD == 128 ? min(64, D - 64 * c) : 64, sw = W / 8 - 1;
""" + DQ_TILE_ROWS + (
    "  if (t == 0) bulk_reduce_add(dq_rows + static_cast<size_t>(q0) * D + (HD == 128 ? 64 * 64 * c : 0), tile, "
    "BM * W * 4);")


# dq_tiles: each consumer reduces its own dQ tile, whatever D, and dQacc takes the tiles' layout (the postprocess
# reads it back), so no consumer waits on the other for dQ and the tile stores hit no bank twice.
DQ_TILES = [
    ('args = ["scratch:dQacc", "dQ", "i32:B * H * S * D", "f32:scale"]',
     'args = ["scratch:dQacc", "dQ", "i32:B * H * S * D", "f32:scale", "i32:D"]'),
    ("""// attn_bwd_post: dQ = bf16(scale * acc), four elements per thread.
extern "C" __global__ void __launch_bounds__(256) attn_bwd_post(const float* __restrict__ dQacc,
                                                                 __nv_bfloat16* __restrict__ dQ, int n, float scale) {
  const int i = 4 * (blockIdx.x * 256 + threadIdx.x);
  if (i >= n) return;
  const float4 v = *reinterpret_cast<const float4*>(dQacc + i);""",
     """// attn_bwd_post: dQ = bf16(scale * acc), four elements per thread. acc is in the main kernel's tile layout: per
// 64-row block, the columns in halves of 64 (the second W = D - 64 wide at D = 96), one after the other, each half's
// rows W floats long with their 32-byte groups swizzled by the row (group g of row rr at g ^ (rr % (W / 8))).
extern "C" __global__ void __launch_bounds__(256) attn_bwd_post(const float* __restrict__ dQacc,
                                                                 __nv_bfloat16* __restrict__ dQ, int n, float scale,
                                                                 int D) {
  const int i = 4 * (blockIdx.x * 256 + threadIdx.x);
  if (i >= n) return;
  const int row = i / D, d = i % D, rr = row % 64, c = d / 64, dd = d % 64, W = min(64, D - 64 * c);
  const size_t src = static_cast<size_t>(row - rr) * D + 64 * 64 * c + rr * W + 8 * ((dd / 8) ^ (rr & (W / 8 - 1))) +
                     dd % 8;
  const float4 v = *reinterpret_cast<const float4*>(dQacc + src);"""),
    ("  if (t == 0 && (HD == 64 || issuer)) bulk_wait_read();  // this thread's previous dQ reduction has read its tile",
     "  if (t == 0) bulk_wait_read();  // this consumer's previous dQ reduction has read its tile"),
    ("  const int dcol0 = HD == 128 ? 64 * c : 0;\n" + DQ_STORE_128 + DQ_TILE_64,
     DQ_TILE_STORE),
    ("    if (threadIdx.x == 128 || (HD == 64 && threadIdx.x == 256)) bulk_wait_all();  // the last reductions are done",
     "    if (threadIdx.x == 128 || threadIdx.x == 256) bulk_wait_all();  // each consumer's last reductions are done"),
]


# dq_tiles' dQ product, which own_keys and q128_d64 each rewrite.
DQ_PRODUCT = """  // dQ_partial = dS K: HD = 128: columns 64c.. over all 128 keys; HD = 64: all columns over own keys.
  float dq[32];
  constexpr int KSTEPS = HD == 128 ? 8 : 4;
  const int key_row0 = HD == 128 ? 0 : 64 * c;
  const uint8_t* kbase = sK + (HD == 128 ? c * KSLAB : 0) + key_row0 * 128;
  const uint64_t da = desc_mn(buf + key_row0 * 128, 0), dbk = desc_mn(kbase, 0);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < KSTEPS; ++kk)"""
