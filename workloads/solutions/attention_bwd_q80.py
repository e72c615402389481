"""`q80`: the attention backward with FlashAttention-3's 80 x 128 tile at D = 128, non-causal (GQA too), as an edit of
`tiles_d96+head_groups` (attention_bwd_variants.py): kernels of its own (attn_bwd_wgmma_q80, _q80_gqa,
attn_bwd_post_q80) added to the file, and the plan lines that select them (attention_backward.backward_text) for the
problems they serve. Every other problem keeps tiles_d96's kernels, byte for byte.

Why 80 query rows: at 64, every block pays its stage waits, the dS barrier and the dQ epilogue for 64 rows; at 80
there are 20% fewer blocks, and S^T / dP^T (m64n80) read 10% fewer shared-memory bytes per MAC (the m64n64 products
sit at the shared-memory roof). M = 80 is not a multiple of 64, so dQ is computed transposed:

    dQ^T (64 d x 80 queries) = K_c^T dS^T    SS, A = K's rows MN-major (imm-trans-a), B = dS K-major  m64n80k16 x 8

with dS written by `stmatrix .trans` from the dS^T fragments (rows = queries, keys contiguous, 128B-swizzled), and
each consumer's dQ^T leaving through its own fp32 tile and bulk reduce-add. S = 4096 is 51 blocks of 80 and one of 16:
the last block's rows past S are masked (P = dS = 0), its L2 / Dr copies stop at S, and its dQ tile is 16 rows
(dQacc's q80 layout keeps each block's rows inside the head's S x D floats; attn_bwd_post_q80 reads it back).
Shared memory allows a 2-deep Q / dO ring (231,936 of 232,448 bytes).
"""
from __future__ import annotations

ACC = ", ".join(f"%{i}" for i in range(40))
OUTS = ", ".join(f'"+f"(d[{i}])' for i in range(40))

KERNELS = r"""// ---------------------------------------------------------------------------------------------------------
// q80 (attention_bwd_q80.py): FlashAttention-3's 80 x 128 tile at D = 128, non-causal. 80 query rows a block: S^T and
// dP^T are m64n80 products, P^T dO and dS^T Q take 5 k16 steps, and dQ is computed transposed (dQ^T = K_c^T dS^T,
// consumer c's 64 columns over all 128 keys), dS written by stmatrix .trans. The last block of a head holds
// S % 80 rows (16 at S = 4096): rows past S are masked, their L2 / Dr copies skipped, their dQ never stored.
constexpr int Q80 = 80;            // query rows of a block
constexpr int SLAB80 = Q80 * 128;  // bytes of an 80-row x 64-column bf16 slab (Q, dO: one TMA box; dS: one key half)
constexpr int T80 = 2 * SLAB80;    // a Q / dO tile (two d slabs), a block's dS (two key halves)
constexpr int STAGES80 = 2;        // the Q / dO ring: a third stage does not fit beside dS and the dQ tiles

// attn_bwd_post_q80: dQ = bf16(scale * acc), four elements per thread, from q80's layout (D = 128): per head, block b
// (qv = min(80, S - 80 b) rows) at 80 b D floats, consumer c's 64 columns as qv rows of 64 floats at 64 qv c, the
// 8-float group g of row q at g ^ ((q / 2) % 8) (a warp's tile stores hit every bank once).
extern "C" __global__ void __launch_bounds__(256) attn_bwd_post_q80(const float* __restrict__ dQacc,
                                                                     __nv_bfloat16* __restrict__ dQ, int n, float scale,
                                                                     int D, int S) {
  const int i = 4 * (blockIdx.x * 256 + threadIdx.x);
  if (i >= n) return;
  const int row = i / D, d = i % D, head = row / S, rr = row % S, b = rr / Q80, q = rr % Q80;
  const int qv = min(Q80, S - Q80 * b), c = d / 64, dd = d % 64;
  const size_t src = (static_cast<size_t>(head) * S + Q80 * b) * D + 64 * qv * c + 64 * q +
                     8 * ((dd / 8) ^ ((q / 2) % 8)) + dd % 8;
  const float4 v = *reinterpret_cast<const float4*>(dQacc + src);
  __nv_bfloat162* out = reinterpret_cast<__nv_bfloat162*>(dQ + i);
  out[0] = __floats2bfloat162_rn(v.x * scale, v.y * scale);
  out[1] = __floats2bfloat162_rn(v.z * scale, v.w * scale);
}

// Four 8 x 8 bf16 matrices stored transposed: register k of a lane holds row lane / 4, columns 2 (lane % 4), + 1 of
// matrix k (an accumulator fragment); lanes 8k..8k+7 give the addresses of matrix k's stored rows (its columns).
__device__ __forceinline__ void stsm4_trans(const void* p, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};"
               :: "r"(smem_u32(p)), "r"(a0), "r"(a1), "r"(a2), "r"(a3) : "memory");
}

// D[64 x 80] (+)= A B: A MN-major in shared memory (imm-trans-a: K^T read from K's rows), B K-major (dS's rows).
__device__ __forceinline__ void wgmma_tn80(float (&d)[40], uint64_t da, uint64_t db, int scale_d) {
  asm volatile(
      "{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %42, 0;\n\t"
      "wgmma.mma_async.sync.aligned.m64n80k16.f32.bf16.bf16 {@ACC@}, %40, %41, p, 1, 1, 1, 0;\n\t}"
      : @OUTS@
      : "l"(da), "l"(db), "r"(scale_d));
}

// X^T = A_c B^T over the block's 80 query rows (m64n80k16 x 8): A = this consumer's 64 K or V rows, B = the Q or dO
// tile (80-row slabs, the second d slab SLAB80 further).
__device__ __forceinline__ void issue_nt80(float (&x)[40], const uint8_t* a, const uint8_t* b) {
  const uint64_t da = make_desc_sw128(a), db = make_desc_sw128(b);
#pragma unroll
  for (int kk = 0; kk < 8; ++kk)
    wgmma_m64k16_bf16<80>(x, da + (kk / 4) * (KSLAB >> 4) + 2 * (kk % 4), db + (kk / 4) * (SLAB80 >> 4) + 2 * (kk % 4),
                          kk != 0);
}

// acc += X^T B: 5 k16 steps over the 80 queries, B (dO or Q) N-major, its d slabs one SLAB80 apart (LBO).
__device__ __forceinline__ void issue_tn80(float (&acc)[64], const uint32_t (&x)[20], const uint8_t* b) {
  const uint64_t db = desc_mn(b, SLAB80);
#pragma unroll
  for (int kk = 0; kk < 5; ++kk) wgmma_rs(acc, x[4 * kk], x[4 * kk + 1], x[4 * kk + 2], x[4 * kk + 3], db + kk * (2048 >> 4));
}

// One 80-row query block (rows q0.., qv of them inside S) for consumer c. Accumulator element j of S^T / dP^T: key
// r + 8 ((j / 2) % 2) of the consumer's 64, query 8 (j / 4) + 2 (lane % 4) + j % 2.
__device__ __forceinline__ void consumer_block_q80(int it, int q0, int qv, int c, int t, const uint8_t* sK,
                                                   const uint8_t* sV, const uint8_t* sQ, const uint8_t* sdO,
                                                   const float* sL2, const float* sDr, uint8_t* sdS, uint64_t* fullQ,
                                                   uint64_t* fulldO, uint64_t* empty, float (&dv)[64], float (&dk)[64],
                                                   float* __restrict__ dq_rows, float sl2, float* sdQ) {
  const int st = it % STAGES80;
  const uint32_t ph = (it / STAGES80) & 1;
  const int lane = t % 32, w = t / 32;
  const int r = 16 * w + lane / 4;  // this thread's keys r and r + 8 of the consumer's 64
  const int col0 = 2 * (lane % 4);
  float s[40], p[40];
  uint32_t pp[20], ds[20];

  mbar_wait(&fullQ[st], ph);
  wgmma_fence();
  issue_nt80(s, sK + c * 64 * 128, sQ);   // S^T = K_c Q^T
  wgmma_commit();
  mbar_wait(&fulldO[st], ph);
  issue_nt80(p, sV + c * 64 * 128, sdO);  // dP^T = V_c dO^T
  wgmma_commit();
  wgmma_wait<1>();
  wgmma_fence_regs(s);
  const bool tail = qv < Q80;  // queries qv.. are past S: another head's rows or TMA's zeros, and stale L2 / Dr
#pragma unroll
  for (int a = 0; a < 10; ++a) {
    const float2 l2 = lds64(sL2 + 8 * a + col0);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      float x = ex2(fmaf(s[4 * a + e], sl2, -(e % 2 ? l2.y : l2.x)));
      if (tail && 8 * a + col0 + e % 2 >= qv) x = 0.f;
      s[4 * a + e] = x;
    }
  }
  wgmma_wait<0>();
  wgmma_fence_regs(p);
#pragma unroll
  for (int a = 0; a < 10; ++a) {
    const float2 dr = lds64(sDr + 8 * a + col0);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      float x = s[4 * a + e] * (p[4 * a + e] - (e % 2 ? dr.y : dr.x));
      if (tail && 8 * a + col0 + e % 2 >= qv) x = 0.f;
      p[4 * a + e] = x;
    }
  }
#pragma unroll
  for (int i = 0; i < 20; ++i) {
    pp[i] = pack_bf16(s[2 * i], s[2 * i + 1]);
    ds[i] = pack_bf16(p[2 * i], p[2 * i + 1]);
  }
  wgmma_fence();
  issue_tn80(dv, pp, sdO);  // dV += P^T dO
  issue_tn80(dk, ds, sQ);   // dK += dS^T Q
  wgmma_commit();

  // dS to shared memory, rows = queries, this consumer's 64 keys = key half c (128 bytes a row, 16-byte chunks
  // swizzled by the row's place in its 8-row atom): the K-major B of dQ^T. ds[2a' + h] is the 8 x 8 fragment of keys
  // 16w + 8h.., queries 8a'..: stored transposed, its row q holds chunk 2w + h of query row 8a' + q.
  uint8_t* buf = sdS + (it & 1) * T80;
  {
    const int m = lane / 8;
#pragma unroll
    for (int a = 0; a < 10; a += 2) {
      const int q = 8 * (a + m / 2) + lane % 8, g = 2 * w + m % 2;
      stsm4_trans(buf + c * SLAB80 + q * 128 + ((g ^ (q % 8)) << 4), ds[2 * a], ds[2 * a + 1], ds[2 * a + 2],
                  ds[2 * a + 3]);
    }
  }
  fence_proxy_async();
  if (t == 0) bulk_wait_read();  // this consumer's previous dQ reduction has read its tile
  named_barrier_sync(1, 256);    // both consumers' key halves of dS are in `buf` (and the dQ tiles are free again)

  // dQ^T = K_c^T dS^T: consumer c's 64 columns (K's d slab c) over all 128 keys, the block's 80 queries
  float dq[40];
  const uint64_t da = desc_mn(sK + c * KSLAB, 0), db = make_desc_sw128(buf);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 8; ++kk)
    wgmma_tn80(dq, da + kk * (2048 >> 4), db + (kk / 4) * (SLAB80 >> 4) + 2 * (kk % 4), kk != 0);
  wgmma_commit();
  wgmma_wait<0>();
  wgmma_fence_regs(dq);
  fence_u32(pp);
  fence_u32(ds);
  if (lane == 0) mbar_arrive(&empty[st]);  // this warp is done with Q, dO, L2, Dr of the stage

  // dq element j: column 64c + dd, dd = r + 8 ((j / 2) % 2); query 8 (j / 4) + col0 + j % 2. Into this consumer's
  // tile in dQacc's q80 layout (qv rows of 64 floats, group g of row q at g ^ ((q / 2) % 8)), then its reduce-add.
  float* tile = sdQ + c * Q80 * 64;
#pragma unroll
  for (int j = 0; j < 40; ++j) {
    const int q = 8 * (j / 4) + col0 + j % 2, dd = r + 8 * ((j / 2) % 2);
    if (q < qv) sts32(tile + q * 64 + 8 * ((dd / 8) ^ ((q / 2) % 8)) + dd % 8, __float_as_uint(dq[j]));
  }
  fence_proxy_async();
  named_barrier_sync(3 + c, 128);  // this consumer's rows are in its tile
  if (t == 0) bulk_reduce_add(dq_rows + static_cast<size_t>(q0) * 128 + 64 * qv * c, tile, 64 * qv * 4);
}

// The q80 kernel (D = 128, non-causal; GQA: the CTA of KV row bkv serves query heads bkv * group ..), launched as the
// reference is (key blocks of HEAD_GROUP heads side by side, grid [S / 128, B * H(KV)]).
template <bool GQA>
__device__ __forceinline__ void attn_bwd_q80(const CUtensorMap* tmQ, const CUtensorMap* tmK, const CUtensorMap* tmV,
                                             const CUtensorMap* tmdO, const float* __restrict__ L2,
                                             const float* __restrict__ Dr, float* __restrict__ dQacc,
                                             __nv_bfloat16* __restrict__ dK, __nv_bfloat16* __restrict__ dV, int S,
                                             int D, float scale, int group) {
  if (D != 128 || S % BN != 0 || (GQA && group < 1)) asm volatile("trap;");  // this tiling only
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  uint8_t* sK = smem;
  uint8_t* sV = sK + 2 * KSLAB;
  uint8_t* sQ = sV + 2 * KSLAB;             // STAGES80 x T80
  uint8_t* sdO = sQ + STAGES80 * T80;       // STAGES80 x T80
  uint8_t* sdS = sdO + STAGES80 * T80;      // 2 x T80
  float* sdQ = reinterpret_cast<float*>(sdS + 2 * T80);  // one 80 x 64 fp32 tile per consumer
  float* sL2 = sdQ + 2 * Q80 * 64;          // STAGES80 x 80
  float* sDr = sL2 + STAGES80 * Q80;        // STAGES80 x 80
  uint64_t* fullKV = reinterpret_cast<uint64_t*>(sDr + STAGES80 * Q80);
  uint64_t* fullQ = fullKV + 1;
  uint64_t* fulldO = fullQ + STAGES80;
  uint64_t* empty = fulldO + STAGES80;

  const int wg = threadIdx.x / 128;
  const int t = threadIdx.x % 128;
  const int n_kb = gridDim.x, lin = blockIdx.x + n_kb * blockIdx.y;  // head_groups' order
  const int grp = lin / (HEAD_GROUP * n_kb), in_grp = lin % (HEAD_GROUP * n_kb);
  const int g_heads = min(HEAD_GROUP, static_cast<int>(gridDim.y) - grp * HEAD_GROUP);
  const int kb = in_grp / g_heads;                      // key block
  const int bkv = grp * HEAD_GROUP + in_grp % g_heads;  // batch * KV head
  const int key0 = kb * BN;
  const int per_head = (S + Q80 - 1) / Q80;             // query blocks per query head, the last one short
  const int n_iter = (GQA ? group : 1) * per_head;
  const size_t kv_row = static_cast<size_t>(bkv) * S;

  if (threadIdx.x == 0) {
    mbar_init(fullKV, 1);
    for (int i = 0; i < STAGES80; ++i) {
      mbar_init(&fullQ[i], 1);
      mbar_init(&fulldO[i], 1);
      mbar_init(&empty[i], 8);  // one arrival per consumer warp
    }
    mbar_fence_init();
  }
  __syncthreads();

  if (wg == 0) {
    setmaxnreg_dec<PRODUCER_REGS>();
    if (t == 0) {
      mbar_arrive_expect_tx(fullKV, 4 * KSLAB);
#pragma unroll
      for (int s = 0; s < 2; ++s) {
        tma_load_2d(sK + s * KSLAB, tmK, fullKV, 64 * s, static_cast<int>(kv_row) + key0);
        tma_load_2d(sV + s * KSLAB, tmV, fullKV, 64 * s, static_cast<int>(kv_row) + key0);
      }
      for (int it = 0; it < n_iter; ++it) {
        const int st = it % STAGES80;
        const uint32_t ph = (it / STAGES80) & 1;
        const int head = (GQA ? bkv * group : bkv) + it / per_head;
        const int q0 = (it % per_head) * Q80, qv = min(Q80, S - q0);
        const int q_row = head * S + q0;  // first row in the [B*H*S, D] view
        mbar_wait(&empty[st], ph ^ 1);    // a fresh barrier passes parity 1 at once
        // the boxes always count 80 rows (past the tensor's end TMA zero-fills them); L2 / Dr stop at S
        mbar_arrive_expect_tx(&fullQ[st], T80 + qv * 4);
#pragma unroll
        for (int s = 0; s < 2; ++s) tma_load_2d(sQ + st * T80 + s * SLAB80, tmQ, &fullQ[st], 64 * s, q_row);
        bulk_load(sL2 + st * Q80, L2 + q_row, qv * 4, &fullQ[st]);
        mbar_arrive_expect_tx(&fulldO[st], T80 + qv * 4);
#pragma unroll
        for (int s = 0; s < 2; ++s) tma_load_2d(sdO + st * T80 + s * SLAB80, tmdO, &fulldO[st], 64 * s, q_row);
        bulk_load(sDr + st * Q80, Dr + q_row, qv * 4, &fulldO[st]);
      }
    }
  } else {
    setmaxnreg_inc<CONSUMER_REGS>();
    const int c = wg - 1;
    const float sl2 = scale * LOG2E;
    float dv[64], dk[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) {
      dv[i] = 0.f;
      dk[i] = 0.f;
    }
    mbar_wait(fullKV, 0);
    for (int it = 0; it < n_iter; ++it) {
      const int st = it % STAGES80;
      const int head = (GQA ? bkv * group : bkv) + it / per_head;
      const int q0 = (it % per_head) * Q80;
      consumer_block_q80(it, q0, min(Q80, S - q0), c, t, sK, sV, sQ + st * T80, sdO + st * T80, sL2 + st * Q80,
                         sDr + st * Q80, sdS, fullQ, fulldO, empty, dv, dk, dQacc + static_cast<size_t>(head) * S * D,
                         sl2, sdQ);
    }
    if (t == 0) bulk_wait_all();  // this consumer's last reductions are done
    wgmma_fence_regs(dv);
    wgmma_fence_regs(dk);
    const int lane = t % 32;
    const size_t row0 = kv_row + key0 + 64 * c + 16 * (t / 32) + lane / 4;
    store_rows16(dV, dv, 1.f, row0, D, lane);
    store_rows16(dK, dk, scale, row0, D, lane);
  }
}

extern "C" __global__ void __launch_bounds__(384, 1) attn_bwd_wgmma_q80(
    const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmK,
    const __grid_constant__ CUtensorMap tmV, const __grid_constant__ CUtensorMap tmdO, const float* __restrict__ L2,
    const float* __restrict__ Dr, float* __restrict__ dQacc, __nv_bfloat16* __restrict__ dK,
    __nv_bfloat16* __restrict__ dV, int S, int D, float scale) {
  attn_bwd_q80<false>(&tmQ, &tmK, &tmV, &tmdO, L2, Dr, dQacc, dK, dV, S, D, scale, 1);
}

extern "C" __global__ void __launch_bounds__(384, 1) attn_bwd_wgmma_q80_gqa(
    const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmK,
    const __grid_constant__ CUtensorMap tmV, const __grid_constant__ CUtensorMap tmdO, const float* __restrict__ L2,
    const float* __restrict__ Dr, float* __restrict__ dQacc, __nv_bfloat16* __restrict__ dK,
    __nv_bfloat16* __restrict__ dV, int S, int D, float scale, int group) {
  attn_bwd_q80<true>(&tmQ, &tmK, &tmV, &tmdO, L2, Dr, dQacc, dK, dV, S, D, scale, group);
}

""".replace("@ACC@", ACC).replace("@OUTS@", OUTS)

ENTRY_MARK = "// The entry points; each plan names one (attention.py fast_backward)."
EDITS = [(ENTRY_MARK, KERNELS + ENTRY_MARK)]

# The plan lines of a q80 problem (attention_backward.backward_text applies them where the file has the kernels).
SMEM = 'smem = "1024 + 65536 + 2 * 2 * 20480 + 2 * 20480 + 2 * 20480 + 4 * 320 + 256"'  # slack, K + V, ring, dS, dQ, L2 / Dr, mbarriers
POST = ('kernel = "attn_bwd_post"', 'args = ["scratch:dQacc", "dQ", "i32:B * H * S * D", "f32:scale", "i32:D"]')
POST_Q80 = ('kernel = "attn_bwd_post_q80"',
            'args = ["scratch:dQacc", "dQ", "i32:B * H * S * D", "f32:scale", "i32:D", "i32:S"]')


def serves(head_dim: int, causal: bool, text: str) -> bool:
    """Whether the file `text` runs this problem through the q80 kernels (D = 128, non-causal, where it has them)."""
    return head_dim == 128 and not causal and "attn_bwd_wgmma_q80(" in text


def plan_edits(text: str) -> list[tuple[str, str]]:
    """The plan edits that route a q80 problem: D = 128's ring and tiles in shared memory, the q80 postprocess,
    80-row Q and dO boxes (the main kernel's name is backward_entry_point's)."""
    import re

    smem = re.search(r'smem = "[^"]*"', text)
    if smem is None:
        raise ValueError("the plan has no smem line for q80 to change")
    edits = [(smem.group(0), SMEM)] + list(zip(POST, POST_Q80))
    edits += [(f'tensor = "{t}"\ndims = ["D", "B * H * S"]\nbox = [64, 64]',
               f'tensor = "{t}"\ndims = ["D", "B * H * S"]\nbox = [64, 80]') for t in ("Q", "dO")]
    return edits
