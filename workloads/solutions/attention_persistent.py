"""persistent=True for the attention forward template: one CTA per SM walking the query tiles, so an SM never idles
between CTAs.

Without it every (query tile, head) is a CTA of its own and an SM holds one (shared memory and registers): between two
CTAs it tears one down, starts the next, waits for that CTA's Q and first K tile (TMA latency), computes its first S
alone, and at the end waits for its O store to complete. At D = 128 a CTA's 32 key tiles take about 48 us, so a few
microseconds of that per CTA is several percent of the kernel (FlashAttention-3 runs its forward persistent for this).

Here the grid is the SMs and CTA k takes tiles k, k + grid, ... in the non-persistent launch order (longest first
across head groups when causal with lpt_group). Q is double-buffered (tile i in buffer i % 2, which also stages its
O), with a full and an empty mbarrier each, so the producer loads the next tile's Q and first K / V stages while the
consumers finish the current one; the K / V ring runs on across tiles (its position `g` counts the key tiles of the
CTA's earlier tiles: Consumer::g0). A consumer frees its Q buffer once its O store has read the staging (or, with the
direct epilogue, once its last wgmma is done), and frees the last V stage of a tile for the next (the non-persistent
kernel never needs to). Cooperative schedule only: ping-pong's turn barriers are counted per CTA.
"""
from __future__ import annotations

from .template_text import replace_counted

# consumer_step reads the ring at position g0 + j (the mask still at tile-relative j)
STEP_EDITS = [
    ("  const int st = j % STAGES, sp = (j - 1) % STAGES;\n  float a0, a1;\n  mbar_wait(&w.fullK[st], (j / STAGES) & 1);\n"
     "  mbar_wait(&w.fullV[sp], ((j - 1) / STAGES) & 1);\n",
     "  const int g = w.g0 + j;  // persistent: the ring position of key tile j of this query tile\n"
     "  const int st = g % STAGES, sp = (g - 1) % STAGES;\n  float a0, a1;\n  mbar_wait(&w.fullK[st], (g / STAGES) & 1);\n"
     "  mbar_wait(&w.fullV[sp], ((g - 1) / STAGES) & 1);\n"),
    ("  float m0, m1, l0, l1;\n};", "  float m0, m1, l0, l1;\n  int g0;              // persistent: the ring position of this query tile's first key tile\n};"),
    ('static_assert(1 + 4 * STAGES <= 32, "the mbarriers fit their 256 bytes");',
     'static_assert(4 + 4 * STAGES <= 32, "the mbarriers fit their 256 bytes");'),
]

PERSISTENT_KERNEL = r"""// The query tile and (batch, head) of launch-order tile `lin` (the non-persistent grid's order: longest first across
// groups of LPT_GROUP heads when causal with a group, else the query tiles of a head side by side).
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

// The whole kernel, persistent: CTA blockIdx.x takes launch-order tiles blockIdx.x, + gridDim.x, ... of the n_q x BH.
// GQA: query row bh = b * H + h reads KV head bh / group (H = HKV * group).
__device__ __forceinline__ void attn_fwd(const CUtensorMap* tmQ, const CUtensorMap* tmK, const CUtensorMap* tmV,
                                         const CUtensorMap* tmO, __nv_bfloat16* __restrict__ O,
                                         float* __restrict__ LSE, int S, int D, float scale, int group, int BH) {
  // this build's tiling only; fail loudly
  if (D != HD || S % 64 != 0 || (!KEY_TAIL && S % BN != 0) || group < 1) asm volatile("trap;");
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  // dynamic shared memory is only 16-byte aligned; the swizzled tiles need 1024
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  uint8_t* sQ = smem;  // 2 x Q_BYTES: tile i's Q (and then its O staging) in buffer i % 2
  uint8_t* sK = sQ + 2 * Q_BYTES;
  uint8_t* sV = sK + STAGES * KV_BYTES;
  uint64_t* fullQ = reinterpret_cast<uint64_t*>(sV + STAGES * KV_BYTES);  // 4 + 4 * STAGES barriers <= 256 bytes
  uint64_t* emptyQ = fullQ + 2;
  uint64_t* fullK = emptyQ + 2;
  uint64_t* fullV = fullK + STAGES;
  uint64_t* emptyK = fullV + STAGES;
  uint64_t* emptyV = emptyK + STAGES;

  const int wg = threadIdx.x / 128;
  const int t = threadIdx.x % 128;
  const int n_q = (S + BM - 1) / BM;
  const int n_all = n_q * BH;

  if (threadIdx.x == 0) {
    for (int i = 0; i < 2; ++i) {
      mbar_init(&fullQ[i], 1);
      mbar_init(&emptyQ[i], CONSUMERS);  // one arrival per consumer warpgroup (its thread 0)
    }
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
      int g = 0;  // ring position: key tiles loaded for this CTA's earlier query tiles
      for (int lin = blockIdx.x, i = 0; lin < n_all; lin += gridDim.x, ++i) {
        int q_tile, bh;
        tile_of(lin, n_q, BH, q_tile, bh);
        const int q0 = q_tile * BM, head_row = bh * S;
        const int n_tiles = CAUSAL ? (min(q0 + BM, S) + BN - 1) / BN : (S + BN - 1) / BN;
        // first row of this head's keys / values in the [B*HKV*S, D] view of K and V (HKV = H without GQA)
        const int kv_row = GQA ? (bh / group) * S : head_row;
        mbar_wait(&emptyQ[i % 2], ((i / 2) & 1) ^ 1);  // both consumers are done with tile i - 2 (a fresh barrier passes)
        mbar_arrive_expect_tx(&fullQ[i % 2], Q_BYTES);
        tma_load_tile<Q_SLAB>(sQ + (i % 2) * Q_BYTES, tmQ, &fullQ[i % 2], head_row + q0);
        for (int j = 0; j < n_tiles; ++j, ++g) {
          const int st = g % STAGES;
          const uint32_t ph = (g / STAGES) & 1;
          const int row = kv_row + j * BN;
          mbar_wait(&emptyK[st], ph ^ 1);  // a fresh barrier passes parity 1 at once
          mbar_arrive_expect_tx(&fullK[st], KV_BYTES);  // out-of-bounds boxes count in full
          tma_load_tile<KV_SLAB>(sK + st * KV_BYTES, tmK, &fullK[st], row);
          mbar_wait(&emptyV[st], ph ^ 1);
          mbar_arrive_expect_tx(&fullV[st], KV_BYTES);
          tma_load_tile<KV_SLAB>(sV + st * KV_BYTES, tmV, &fullV[st], row);
        }
      }
    }
  } else {
    setmaxnreg_inc<CONSUMER_REGS>();
    const int c = wg - 1;
    const int lane = t % 32;
    const int r0 = 16 * (t / 32) + lane / 4;  // this thread's rows: r0 and r0 + 8 of the warpgroup's 64
    int g = 0;  // the ring position of the current query tile's first key tile
    for (int lin = blockIdx.x, i = 0; lin < n_all; lin += gridDim.x, ++i) {
      int q_tile, bh;
      tile_of(lin, n_q, BH, q_tile, bh);
      const int q0 = q_tile * BM, head_row = bh * S;
      // key tiles: causal up to the one holding key min(q0 + BM, S) - 1; tiles from n_plain on need the mask
      const int n_tiles = CAUSAL ? (min(q0 + BM, S) + BN - 1) / BN : (S + BN - 1) / BN;
      const int n_plain = CAUSAL ? (q0 + 1) / BN : S / BN;
      uint8_t* sQi = sQ + (i % 2) * Q_BYTES;
      Consumer w{sQi + c * 64 * 128, sK, sV, fullK, fullV, emptyK, emptyV, c, lane, q0 + 64 * c + r0, S,
                 scale * 1.4426950408889634f, -INFINITY, -INFINITY, 0.f, 0.f, g};

      float s[SN], o[ON / 2];  // S: 64 x BN keys; O: 64 x ON (m64nN accumulators: N / 2 per thread)
      uint32_t p[PN];
      float a0, a1;
#pragma unroll
      for (int k = 0; k < ON / 2; ++k) o[k] = 0.f;

      mbar_wait(&fullQ[i % 2], (i / 2) & 1);
      // key tile 0: S only
      mbar_wait(&fullK[g % STAGES], (g / STAGES) & 1);
      wgmma_fence();
      issue_qk(s, w.sQc, sK + (g % STAGES) * KV_BYTES);
      wgmma_commit();
      wgmma_wait<0>();
      wgmma_fence_regs(s);
      if (lane == 0) mbar_arrive(&emptyK[g % STAGES]);
      if (MASKED && n_plain == 0) {
        mask_tile(s, tile_limit(w, 0), lane);
      }
      softmax_tile(s, w.sl2, w.m0, w.m1, w.l0, w.l1, a0, a1);
      pack_p(s, p);

      // key tiles 1 .. n-1: unmasked up to n_plain, then the masked ones (causal diagonal, the key tail)
      const int n_main = MASKED ? min(n_plain, n_tiles) : n_tiles;
      for (int j = 1; j < n_main; ++j) consumer_step<false>(j, w, s, o, p);
      if constexpr (MASKED) {
        for (int j = max(n_main, 1); j < n_tiles; ++j) consumer_step<true>(j, w, s, o, p);
      }
      {
        const int sp = (g + n_tiles - 1) % STAGES;
        mbar_wait(&fullV[sp], ((g + n_tiles - 1) / STAGES) & 1);
        wgmma_fence();
        issue_pv(o, p, sV + sp * KV_BYTES);
        wgmma_commit();
        wgmma_wait<0>();
        wgmma_fence_regs(o);
        if (lane == 0) mbar_arrive(&emptyV[sp]);  // the next query tile's ring reuses it
      }
      g += n_tiles;

      // the row sums were kept per thread: reduce over the quad now
      float l0 = w.l0, l1 = w.l1;
      l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
      l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
      l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
      l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
      const float inv0 = 1.f / l0, inv1 = 1.f / l1;
      const bool live = q0 + 64 * c < S;  // S % 64 == 0: a warpgroup's rows are all inside S or all past it
      if constexpr (EPILOGUE_TMA) {
        if (live) store_tma(o, sQi + c * 64 * 128, tmO, head_row + q0 + 64 * c, c, t, inv0, inv1);
      } else if (live) {
        store_direct(o, O, static_cast<size_t>(head_row) + w.qrow, lane, inv0, inv1);
      }
      if (live && lane % 4 == 0) {
        // m is the running max of scale*S in log2 units: ln(sum e^(scale*S)) = m ln 2 + ln(l)
        LSE[head_row + w.qrow] = w.m0 * 0.6931471805599453f + logf(l0);
        LSE[head_row + w.qrow + 8] = w.m1 * 0.6931471805599453f + logf(l1);
      }
      // this consumer's rows of Q buffer i % 2 are free: its wgmmas are done and its O store (thread 0 waited in
      // store_tma) has read the staging; every thread of the warpgroup is past its own reads of the buffer
      epilogue_sync(c);
      if (t == 0) mbar_arrive(&emptyQ[i % 2]);
    }
  }
}
"""


def persistent_body(body: str) -> str:
    """The template body with the persistent kernel in place of attn_fwd and the ring position in consumer_step."""
    for old, new in STEP_EDITS:
        body = replace_counted(body, old, new, "attention_template.cu.in (persistent)")
    start = body.index("// The whole kernel. GQA: query row bh = b * H + h reads KV head bh / group (H = HKV * group).")
    end = body.index("\n}\n", body.index("__device__ __forceinline__ void attn_fwd(", start)) + 3
    return body[:start] + PERSISTENT_KERNEL + body[end:]
