"""persistent=True for the attention forward template: one CTA per SM takes query tiles from an atomic counter, and each
consumer issues a tile's last P V product together with the next tile's first S, so a tile's start and end overlap.

Without it every (query tile, head) is a CTA of its own: between two CTAs an SM tears one down, starts the next, waits
for its Q and first K tile, computes its first S alone and, at the end, its last P V product and the epilogue with
nothing of its own under them. bench/attention_cta_cost.py measured that fixed cost at about 1.9 us of a 47 us D = 128
CTA at full clock (4%; 8% of a causal one). Round 9's persistent walk removed only the launch and Q's latency, kept the
first S and the epilogue alone, and made every tile wait for its O store's writes; it lost 1.9% (and 12% causal, where
a fixed round-robin lost the block scheduler's balance).

Here:
- Tile order: the non-persistent grid's launch order (tile_of), CTA k's first tile is k and every later one comes from
  an int32 counter in zeroed scratch (gridDim.x + atomicAdd), claimed by the producer as it starts a tile's loads, so
  causal keeps longest-first and the dynamic hand-out's balance.
- Q: one buffer. With q_regs (required) each consumer warp reads its Q fragments into registers at the tile's start and
  frees the buffer (emptyQ), so the producer loads the next tile's Q under the current tile. The tile index travels in
  shared memory beside it, published by the same mbarrier (fullQ); -1 ends the walk.
- The K / V ring runs on across tiles (Consumer::g0: the ring position of the tile's first key tile).
- The cross-tile step: the consumer waits for the next tile's Q and first K tile, issues S' = Q' K'_0 and the finished
  tile's last O += P V back to back, runs S''s softmax under that product, then writes the finished tile's epilogue
  while the other consumer (half a tile behind with the stagger) keeps the tensor pipe busy.
- Epilogue: O staged in a buffer of its own (BM rows; Q's buffer already holds the next tile) and TMA-stored; the
  store is not waited for until the next tile's epilogue needs the staging again (only its reads), and its writes only
  at the CTA's end.
Cooperative schedule, TMA epilogue and q_regs only (validate() says so).

q_ahead=True: the producer loads the next tile's Q as soon as the consumers hold the current one in registers, a
whole tile ahead instead of after the tile's last K / V loads. Measured (bench/results/attention_template.md, rounds
21-23): the walk alone level by kernel time (-0.8 to +0.7%), with q_ahead -0.3 to -1.3% over two readings.
producer_fn=True compiles the producer's walk as a function of its own: -0.2 to -1.2% more (round 24). TUNED takes all
three at its five cooperative points.
"""
from __future__ import annotations

from typing import Any

from .template_text import replace_counted

# consumer_step reads the ring at position g0 + j (the mask still at tile-relative j)
STEP_EDITS = [
    ("  const int st = j % STAGES, sp = (j - 1) % STAGES;\n  float a0, a1;\n  mbar_wait(&w.fullK[st], (j / STAGES) & 1);\n"
     "  mbar_wait(&w.fullV[sp], ((j - 1) / STAGES) & 1);\n",
     "  // persistent: the ring position of key tile j of this query tile, unsigned: with signed positions ptxas 13.5\n"
     "  // scheduled the loop's wait for the previous P V product ahead of every exponential\n"
     "  const uint32_t g = w.g0 + j;\n"
     "  const uint32_t st = g % STAGES, sp = (g - 1) % STAGES;\n  float a0, a1;\n  mbar_wait(&w.fullK[st], (g / STAGES) & 1);\n"
     "  mbar_wait(&w.fullV[sp], ((g - 1) / STAGES) & 1);\n"),
    ("  float sl2;\n", "  float sl2;\n  uint32_t g0;         // persistent: the ring position of this query tile's first key tile\n"),
    ('static_assert(1 + 4 * STAGES <= 32, "the mbarriers fit their 256 bytes");',
     'static_assert(2 + 4 * STAGES < 32, "the mbarriers and the tile index fit their 256 bytes");'),
]

HELPERS = r"""// persistent: the query tile and (batch, head) of launch-order tile `lin` (the non-persistent grid's order: longest
// first across groups of LPT_GROUP heads when causal with a group, else the query tiles of a head side by side).
__device__ __forceinline__ void tile_of(int lin, int n_q, int BH, int& q_tile, int& bh) {
  if (CAUSAL && LPT_GROUP > 0) {
    const int grp = lin / (LPT_GROUP * n_q), in_grp = lin % (LPT_GROUP * n_q);
    const int g_heads = min(LPT_GROUP, BH - grp * LPT_GROUP);
    q_tile = n_q - 1 - in_grp / g_heads;
    bh = grp * LPT_GROUP + in_grp % g_heads;
  } else {
    q_tile = CAUSAL ? n_q - 1 - lin % n_q : lin % n_q;  // causal: each head's longest rows first
    bh = lin / n_q;
  }
}

// persistent: key tiles of a query tile starting at row q0 (causal: up to the one holding key min(q0 + BM, S) - 1),
// and how many of them need no mask.
__device__ __forceinline__ int tiles_of(int q0, int S) {
  return CAUSAL ? (min(q0 + BM, S) + BN - 1) / BN : (S + BN - 1) / BN;
}
__device__ __forceinline__ int plain_tiles_of(int q0, int S) {
  return CAUSAL ? (q0 + 1) / BN : S / BN;
}

// persistent: store_tma with the staging shared across tiles. Thread 0 first waits until the previous tile's store
// has read the staging, and does not wait for this one: its writes complete under the next tile.
__device__ __forceinline__ void store_tma_async(const float (&o)[ON / 2], uint8_t* stage, const CUtensorMap* tmO,
                                                int row0, int c, int t, float inv0, float inv1) {
  const int lane = t % 32, r0 = 16 * (t / 32) + lane / 4;
  if (t == 0) tma_store_wait_read<0>();
  epilogue_sync(c);
#pragma unroll
  for (int q = 0; q < HD / 8; ++q) {
    uint8_t* dst = stage + (q / 8) * Q_SLAB + r0 * 128 + (((q % 8) ^ (r0 % 8)) << 4) + 4 * (lane % 4);
    *reinterpret_cast<uint32_t*>(dst) = pack_bf16(o[4 * q] * inv0, o[4 * q + 1] * inv0);
    *reinterpret_cast<uint32_t*>(dst + 8 * 128) = pack_bf16(o[4 * q + 2] * inv1, o[4 * q + 3] * inv1);
  }
  fence_proxy_async();  // the generic-proxy stores above, before the TMA (async proxy) reads them
  epilogue_sync(c);
  if (t == 0) {
#pragma unroll
    for (int s = 0; s < SLABS; ++s) tma_store_2d(tmO, stage + s * Q_SLAB, 64 * s, row0);
    tma_store_commit();
  }
}

// persistent: a finished tile's O / l and LSE (rows of consumer c at q0; the row sums reduced over the quad here).
__device__ __forceinline__ void tile_epilogue(const float (&o)[ON / 2], const Consumer& w, uint8_t* stage,
                                              const CUtensorMap* tmO, float* __restrict__ LSE, int head_row, int q0,
                                              int c, int t) {
  float l0 = w.l0, l1 = w.l1;
  l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
  l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
  const float inv0 = 1.f / l0, inv1 = 1.f / l1;
  if (q0 + 64 * c < w.S) {  // S % 64 == 0: a warpgroup's rows are all inside S or all past it
    store_tma_async(o, stage, tmO, head_row + q0 + 64 * c, c, t, inv0, inv1);
    if (w.lane % 4 == 0) {
      // m is the running max of scale*S in log2 units: ln(sum e^(scale*S)) = m ln 2 + ln(l)
      LSE[head_row + w.qrow] = w.m0 * 0.6931471805599453f + logf(l0);
      LSE[head_row + w.qrow + 8] = w.m1 * 0.6931471805599453f + logf(l1);
    }
  }
}

"""


# Key tile j of the current query tile into ring position g (the producer's walk, either schedule)
KV_LOADS = r"""          const uint32_t st = g % STAGES;
          const uint32_t ph = (g / STAGES) & 1;
          const int row = kv_row + j * BN;
          mbar_wait(&emptyK[st], ph ^ 1);  // a fresh barrier passes parity 1 at once
          mbar_arrive_expect_tx(&fullK[st], KV_BYTES);  // out-of-bounds boxes count in full
          tma_load_tile<KV_SLAB>(sK + st * KV_BYTES, tmK, &fullK[st], row);
          mbar_wait(&emptyV[st], ph ^ 1);
          mbar_arrive_expect_tx(&fullV[st], KV_BYTES);
          tma_load_tile<KV_SLAB>(sV + st * KV_BYTES, tmV, &fullV[st], row);
"""

# The producer's walk: each tile's Q loaded after the previous tile's last K / V loads, about two key tiles before the
# consumers need it (a Q tile is read once, so from DRAM)
PRODUCER = r"""      uint32_t g = 0;  // ring position: key tiles loaded for this CTA's earlier query tiles
      int lin = blockIdx.x;
      for (int i = 0;; ++i) {
        mbar_wait(emptyQ, (i & 1) ^ 1);  // the last tile's Q is in the consumers' registers (a fresh barrier passes)
        if (lin >= n_all) {
          *tile_slot = -1;
          mbar_arrive(fullQ);  // release: the consumers read -1 after their wait
          break;
        }
        *tile_slot = lin;
        int q_tile, bh;
        tile_of(lin, n_q, BH, q_tile, bh);
        const int q0 = q_tile * BM, head_row = bh * S;
        const int n_tiles = tiles_of(q0, S);
        // first row of this head's keys / values in the [B*HKV*S, D] view of K and V (HKV = H without GQA)
        const int kv_row = GQA ? (bh / group) * S : head_row;
        // the next tile, claimed now and kept in shared memory: the atomic's latency passes under Q's load and,
        // after a CTA's first tile, under the ring's waits
        const int next = gridDim.x + atomicAdd(tile_counter, 1);
        mbar_arrive_expect_tx(fullQ, Q_BYTES);
        tma_load_tile<Q_SLAB>(sQ, tmQ, fullQ, head_row + q0);
        tile_slot[1] = next;
        for (int j = 0; j < n_tiles; ++j, ++g) {
""" + KV_LOADS + r"""        }
        lin = tile_slot[1];
      }
"""

# q_ahead: the next tile's Q loaded once the consumers hold this tile's in registers. The wait for that (emptyQ) sits
# after the tile's second key tile's loads: their V slot is freed only by the consumers' cross-tile step, which loads
# the fragments first, so the wait costs the ring nothing. The Q buffer and tile index are published as before.
PRODUCER_Q_AHEAD = r"""      uint32_t g = 0;  // ring position: key tiles loaded for this CTA's earlier query tiles
      int lin = blockIdx.x;  // the grid is at most the tiles: every CTA has a first one
      *tile_slot = lin;
      {
        int q_tile, bh;
        tile_of(lin, n_q, BH, q_tile, bh);
        mbar_arrive_expect_tx(fullQ, Q_BYTES);
        tma_load_tile<Q_SLAB>(sQ, tmQ, fullQ, bh * S + q_tile * BM);
      }
      for (uint32_t i = 0;; ++i) {
        int q_tile, bh;
        tile_of(lin, n_q, BH, q_tile, bh);
        const int q0 = q_tile * BM, head_row = bh * S;
        const int n_tiles = tiles_of(q0, S);
        // first row of this head's keys / values in the [B*HKV*S, D] view of K and V (HKV = H without GQA)
        const int kv_row = GQA ? (bh / group) * S : head_row;
        const int next = gridDim.x + atomicAdd(tile_counter, 1);  // its latency passes under the ring's waits
        const int j_q = min(1, n_tiles - 1);
        for (int j = 0; j < n_tiles; ++j, ++g) {
""" + KV_LOADS + r"""          if (j == j_q) {
            mbar_wait(emptyQ, i & 1);  // every consumer warp holds this tile's Q in registers
            if (next < n_all) {
              int nq_tile, nbh;
              tile_of(next, n_q, BH, nq_tile, nbh);
              *tile_slot = next;
              mbar_arrive_expect_tx(fullQ, Q_BYTES);
              tma_load_tile<Q_SLAB>(sQ, tmQ, fullQ, nbh * S + nq_tile * BM);
            } else {
              *tile_slot = -1;
              mbar_arrive(fullQ);  // release: the consumers read -1 after their wait
            }
          }
        }
        if (next >= n_all) break;
        lin = next;
      }
"""


# producer_fn: the walk compiled as a function of its own. Inline, any change to the producer's code moved ptxas 13.5's
# schedule of the consumers' key-tile loop (q_ahead's Q load inside the ring's loop: 46 of 66 exponentials under the
# P V product at D = 128 down to 17); called, the loop is scheduled alone (46 with either walk). The call comes after
# the producer's setmaxnreg.dec, so the function must fit its registers (tests/workloads/test_attention_persistent.py
# reads its SASS: 30 of 40, no local memory).
PRODUCER_FN_HEAD = r"""// persistent, producer_fn: the producer's walk (one thread), not inlined into the kernel
__device__ __noinline__ void producer_walk(const CUtensorMap* tmQ, const CUtensorMap* tmK, const CUtensorMap* tmV,
                                           uint8_t* sQ, uint8_t* sK, uint8_t* sV, uint64_t* fullQ, uint64_t* emptyQ,
                                           uint64_t* fullK, uint64_t* fullV, uint64_t* emptyK, uint64_t* emptyV,
                                           int* tile_slot, int* __restrict__ tile_counter, int S, int group, int BH,
                                           int n_q, int n_all) {
"""
PRODUCER_CALL = ("      producer_walk(tmQ, tmK, tmV, sQ, sK, sV, fullQ, emptyQ, fullK, fullV, emptyK, emptyV, tile_slot,\n"
                 "                    tile_counter, S, group, BH, n_q, n_all);\n")


def _producer_fn(walk: str) -> str:
    """The walk's text as the body of producer_walk (four spaces less indentation)."""
    return PRODUCER_FN_HEAD + "".join(line[4:] + "\n" for line in walk.splitlines()) + "}\n\n"


def _kernel(uniform: bool, stagger: bool, q_ahead: bool = False, producer_fn: bool = False) -> str:
    c_decl = ("    const int c = __shfl_sync(0xffffffffu, wg - 1, 0);  // warp-uniform to ptxas: descriptors in uniform "
              "registers\n" if uniform else "    const int c = wg - 1;\n")
    wait_turn = "    if (c == 1) bar_sync_imm<7, 256>();  // stagger: consumer 1 issues once consumer 0's S_0 is done\n"
    pass_turn = "    if (c == 0) bar_arrive_imm<7, 256>();  // stagger: consumer 0's S_0 is done\n"
    walk = PRODUCER_Q_AHEAD if q_ahead else PRODUCER
    return (_producer_fn(walk) if producer_fn else "") + r"""// The whole kernel, persistent: CTA k takes launch-order tile k, then whichever the counter hands it.
// GQA: query row bh = b * H + h reads KV head bh / group (H = HKV * group).
__device__ __forceinline__ void attn_fwd(const CUtensorMap* tmQ, const CUtensorMap* tmK, const CUtensorMap* tmV,
                                         const CUtensorMap* tmO, __nv_bfloat16* __restrict__ O,
                                         float* __restrict__ LSE, int S, int D, float scale, int group, int BH,
                                         int* __restrict__ tile_counter) {
  // this build's tiling only; fail loudly
  if (D != HD || S % 64 != 0 || (!KEY_TAIL && S % BN != 0) || group < 1) asm volatile("trap;");
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  // dynamic shared memory is only 16-byte aligned; the swizzled tiles need 1024
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  uint8_t* sQ = smem;           // the current tile's Q until every consumer warp holds it in registers
  uint8_t* sO = sQ + Q_BYTES;   // O staging for the TMA store, shared by the CTA's tiles
  uint8_t* sK = sO + Q_BYTES;
  uint8_t* sV = sK + STAGES * KV_BYTES;
  uint64_t* fullQ = reinterpret_cast<uint64_t*>(sV + STAGES * KV_BYTES);  // 2 + 4 * STAGES barriers, then 2 ints
  uint64_t* emptyQ = fullQ + 1;
  uint64_t* fullK = emptyQ + 1;
  uint64_t* fullV = fullK + STAGES;
  uint64_t* emptyK = fullV + STAGES;
  uint64_t* emptyV = emptyK + STAGES;
  // [0]: the tile whose Q fullQ announces (-1: none left); [1]: the producer's claim of its next tile
  int* tile_slot = reinterpret_cast<int*>(emptyV + STAGES);

  const int wg = threadIdx.x / 128;
  const int t = threadIdx.x % 128;
  const int n_q = (S + BM - 1) / BM;
  const int n_all = n_q * BH;

  if (threadIdx.x == 0) {
    mbar_init(fullQ, 1);
    mbar_init(emptyQ, 4 * CONSUMERS);  // one arrival per consumer warp, once its Q fragments are in registers
    for (int i = 0; i < STAGES; ++i) {
      mbar_init(&fullK[i], 1);
      mbar_init(&fullV[i], 1);
      mbar_init(&emptyK[i], 4 * CONSUMERS);  // one arrival per consumer warp
      mbar_init(&emptyV[i], 4 * CONSUMERS);
    }
    mbar_fence_init();
  }
  __syncthreads();

  if (wg == 0) {
    setmaxnreg_dec<PRODUCER_REGS>();
    if (t == 0) {
""" + (PRODUCER_CALL if producer_fn else walk) + r"""    }
  } else {
    setmaxnreg_inc<CONSUMER_REGS>();
""" + c_decl + r"""    const int lane = t % 32;
    const int r0 = 16 * (t / 32) + lane / 4;  // this thread's rows: r0 and r0 + 8 of the warpgroup's 64
    const float sl2 = scale * 1.4426950408889634f;
    mbar_wait(fullQ, 0);
    int lin = __shfl_sync(0xffffffffu, *tile_slot, 0);  // warp-uniform to ptxas: the ring's indices too
    if (lin < 0) return;  // more CTAs than tiles (the grid is at most the tiles: not reached)
    Consumer w{sQ + c * 64 * 128, sK, sV, fullK, fullV, emptyK, emptyV, c, lane, 0, S, sl2, 0,
               -INFINITY, -INFINITY, 0.f, 0.f};
    {
      int q_tile, bh;
      tile_of(lin, n_q, BH, q_tile, bh);
      w.qrow = q_tile * BM + 64 * c + r0;
    }
    load_q_frag(w.qf, w.sQc, t);  // q_regs
    __syncwarp();
    if (lane == 0) mbar_arrive(emptyQ);  // this warp's Q is in registers: the next tile's may land

    float s[SN], o[ON / 2];  // S: 64 x BN keys; O: 64 x ON (m64nN accumulators: N / 2 per thread)
    uint32_t p[PN];
    float a0, a1;
#pragma unroll
    for (int i = 0; i < ON / 2; ++i) o[i] = 0.f;

    // the CTA's first tile: S_0 alone
    mbar_wait(&fullK[0], 0);
""" + (wait_turn if stagger else "") + r"""    wgmma_fence();
    issue_qk_rs(s, w.qf, sK);
    wgmma_commit();
    wgmma_wait<0>();
""" + (pass_turn if stagger else "") + r"""    wgmma_fence_regs(s);
    if (lane == 0) mbar_arrive(&emptyK[0]);
    if (MASKED && plain_tiles_of(w.qrow - 64 * c - r0, S) == 0) {
      mask_tile(s, tile_limit(w, 0), lane);
    }
    softmax_tile(s, w.sl2, w.m0, w.m1, w.l0, w.l1, a0, a1);
    pack_p(s, p);

    // only the tile index, the ring position and the softmax state are carried from tile to tile; the rest is
    // derived from the index again (more values live across the key-tile loop changed ptxas 13.5's schedule of it)
    for (uint32_t i = 1;; ++i) {
      int q_tile, bh;
      tile_of(lin, n_q, BH, q_tile, bh);
      const int q0 = q_tile * BM, head_row = bh * S;
      const int n_tiles = tiles_of(q0, S), n_plain = plain_tiles_of(q0, S);
      // key tiles 1 .. n-1: unmasked up to n_plain, then the masked ones (causal diagonal, the key tail)
      const int n_main = MASKED ? min(n_plain, n_tiles) : n_tiles;
      for (int j = 1; j < n_main; ++j) consumer_step<false>(j, w, s, o, p);
      if constexpr (MASKED) {
        for (int j = max(n_main, 1); j < n_tiles; ++j) consumer_step<true>(j, w, s, o, p);
      }
      // the cross-tile step: the tile's last P V product issued with the next tile's first S
      const uint32_t gl = w.g0 + n_tiles - 1, sp = gl % STAGES;
      mbar_wait(fullQ, i & 1);
      const int nlin = __shfl_sync(0xffffffffu, *tile_slot, 0);
      float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;  // the next tile's softmax state
      int nq0 = 0;
      mbar_wait(&fullV[sp], (gl / STAGES) & 1);
      const uint32_t st = (gl + 1) % STAGES;
      if (nlin >= 0) {
        int nq_tile, nbh;
        tile_of(nlin, n_q, BH, nq_tile, nbh);
        nq0 = nq_tile * BM;
        load_q_frag(w.qf, w.sQc, t);  // this tile's Q fragments are no longer read: its last S is done
        __syncwarp();
        if (lane == 0) mbar_arrive(emptyQ);
        mbar_wait(&fullK[st], ((gl + 1) / STAGES) & 1);
      }
      // both products issued on every path, as in a key-tile step (a branch around them had ptxas 13.5 schedule the
      // key-tile loop worse): past the CTA's last tile S' reads a stale K slot and is discarded
      wgmma_fence();
      issue_qk_rs(s, w.qf, sK + st * KV_BYTES);  // S'_0 = Q' K'_0^T
      wgmma_commit();
      issue_pv(o, p, sV + sp * KV_BYTES);        // O += P_{n-1} V_{n-1}
      wgmma_commit();
      wgmma_wait<1>();  // S'_0 is done
      wgmma_fence_regs(s);
      if (nlin >= 0 && lane == 0) mbar_arrive(&emptyK[st]);
      if (MASKED && plain_tiles_of(nq0, S) == 0) {
        mask_tile(s, (CAUSAL ? nq0 + 64 * c + r0 : S - 1), lane);
      }
      softmax_tile(s, sl2, m0, m1, l0, l1, a0, a1);
      wgmma_wait<0>();  // the tile's O is complete
      wgmma_fence_regs(o);
      wgmma_fence_regs(p);
      if (lane == 0) mbar_arrive(&emptyV[sp]);  // the ring runs on: the next tile's loads reuse it
      tile_epilogue(o, w, sO + c * 64 * 128, tmO, LSE, head_row, q0, c, t);
      if (nlin < 0) break;
      pack_p(s, p);
#pragma unroll
      for (int k = 0; k < ON / 2; ++k) o[k] = 0.f;
      lin = nlin;
      w.qrow = nq0 + 64 * c + r0;
      w.g0 = gl + 1;
      w.m0 = m0;
      w.m1 = m1;
      w.l0 = l0;
      w.l1 = l1;
    }
    if (t == 0) tma_store_wait<0>();  // the last O store is complete before the CTA's shared memory goes
  }
}
"""


def persistent_body(body: str, p: Any) -> str:
    """The rendered body (every other option already applied) with the persistent kernel in place of attn_fwd, the
    ring position in consumer_step and the helpers the walk needs before it."""
    for old, new in STEP_EDITS:
        body = replace_counted(body, old, new, "attention_template.cu.in (persistent)")
    anchor = "// The whole kernel. GQA: query row bh = b * H + h reads KV head bh / group (H = HKV * group).\n"
    start = body.index(anchor)
    end = body.index("\n}\n", body.index("__device__ __forceinline__ void attn_fwd(", start)) + 3
    return body[:start] + HELPERS + _kernel(p.uniform, p.stagger, p.q_ahead, p.producer_fn) + body[end:]
