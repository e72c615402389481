"""The attention forward template's diag_half option, as edits of attention_template.cu.in: on the causal diagonal tile
consumer 0 computes only the keys its rows can see.

With 128 query rows (two consumers of 64) and 128-key tiles, a causal query tile's last key tile is its diagonal,
keys q0 .. q0 + 127. Consumer 0's rows (q0 .. q0 + 63) see none of keys q0 + 64 ..: the reference still computes
its S for all 128 keys (m64n128), masks the second half to -inf and multiplies the zeros of P by V. With diag_half
consumer 0 issues that tile's S as m64n64 (32 accumulator registers, the same fragment layout as the first half of
m64n128's; the mask sets s's other 32 to -inf whatever they held) and its P V product over the first 4 of the 8
k16 steps. Consumer 1 is unchanged. Per query tile that is half of one consumer's tensor work on one tile: about 1.5%
of a causal S = 4096 head's. (The first query tile, whose only tile is the diagonal, keeps its full S: one in 32.)

The half S goes into an accumulator of its own (`sh`, copied into s's first 32 registers after the wait): written
straight into part of s, ptxas 13.5 serialised every wgmma of the kernel (C7511). The branch on the consumer sits
between steps, with no wgmma in flight across it. validate() allows the option only where the diagonal tile is the
only masked one and consumer 0's keys end halfway (causal, cooperative, 2 consumers, bn = 128).
"""
from __future__ import annotations

from .template_text import replace_counted

DIAG_HALF = [
    # S = Q K^T over the first 64 keys, into a 32-register accumulator of its own
    ("__device__ __forceinline__ void issue_qk(float (&s)[SN], const uint8_t* q, const uint8_t* k) {\n",
     "// diag_half: S over the first 64 keys (m64n64) into an accumulator of its own\n"
     "__device__ __forceinline__ void issue_qk_half(float (&s)[32], const uint8_t* q, const uint8_t* k) {\n"
     "  const uint64_t dq = make_desc_sw128(q), dk = make_desc_sw128(k);\n#pragma unroll\n"
     "  for (int kk = 0; kk < HD / 16; ++kk) {\n"
     "    const uint64_t qo = (kk / 4) * (Q_SLAB >> 4) + 2 * (kk % 4), ko = (kk / 4) * (KV_SLAB >> 4) + 2 * (kk % 4);\n"
     "    wgmma_m64k16_bf16<64>(s, dq + qo, dk + ko, kk != 0);\n  }\n}\n\n"
     "__device__ __forceinline__ void issue_qk(float (&s)[SN], const uint8_t* q, const uint8_t* k) {\n"),
    # O += P V over the first 64 keys only
    ("__device__ __forceinline__ void issue_pv(float (&o)[ON / 2], const uint32_t (&p)[PN], const uint8_t* v) {\n",
     "template <bool HALF = false>  // diag_half: keys 0 .. 63 (P is zero past them)\n"
     "__device__ __forceinline__ void issue_pv(float (&o)[ON / 2], const uint32_t (&p)[PN], const uint8_t* v) {\n"),
    ("  for (int kk = 0; kk < BN / 16; ++kk) {\n    wgmma_rs(o,",
     "  for (int kk = 0; kk < (HALF ? BN / 32 : BN / 16); ++kk) {\n    wgmma_rs(o,"),
    # a step whose S is the diagonal tile's first half; the mask sets the other half of s to -inf
    ("template <bool MASK>\n__device__ __forceinline__ void consumer_step(",
     "template <bool MASK, bool HALF = false>\n__device__ __forceinline__ void consumer_step("),
    ("  issue_qk(s, w.sQc, w.sK + st * KV_BYTES);  // S_j = Q K_j^T\n",
     "  float sh[32];  // diag_half: the diagonal's S over keys 0 .. 63\n"
     "  if constexpr (HALF) issue_qk_half(sh, w.sQc, w.sK + st * KV_BYTES);\n"
     "  else issue_qk(s, w.sQc, w.sK + st * KV_BYTES);  // S_j = Q K_j^T\n"),
    ("  wgmma_wait<1>();  // S_j is done (groups complete in order)\n  wgmma_fence_regs(s);\n",
     "  wgmma_wait<1>();  // S_j is done (groups complete in order)\n"
     "  if constexpr (HALF) {  // diag_half: into s's first half (the same fragment layout as m64n128's first 64 keys)\n"
     "    wgmma_fence_regs(sh);\n#pragma unroll\n    for (int i = 0; i < 32; ++i) s[i] = sh[i];\n  }\n"
     "  wgmma_fence_regs(s);\n"),
    # the masked steps (the diagonal) and the last P V product (the diagonal's)
    ("      for (int j = max(n_main, 1); j < n_tiles; ++j) consumer_step<true>(j, w, s, o, p);\n",
     "      for (int j = max(n_main, 1); j < n_tiles; ++j) {  // diag_half: the diagonal, consumer 0 over its 64 keys\n"
     "        if (c == 0) consumer_step<true, true>(j, w, s, o, p);\n"
     "        else consumer_step<true>(j, w, s, o, p);\n"
     "      }\n"),
    ("      issue_pv(o, p, sV + sp * KV_BYTES);\n",
     "      if (c == 0) issue_pv<true>(o, p, sV + sp * KV_BYTES);  // diag_half: the diagonal's P V over keys 0 .. 63\n"
     "      else issue_pv(o, p, sV + sp * KV_BYTES);\n"),
]


def diag_half(body: str) -> str:
    for old, new in DIAG_HALF:
        body = replace_counted(body, old, new, "attention_template.cu.in (diag_half)")
    return body


# dead_tile: with 3 consumers (192 query rows) and 96-key tiles under ping-pong (D = 64 causal's TUNED point), a causal
# query tile's last key tile (keys q0 + 96 .. q0 + 191) lies wholly past consumer 0's rows (q0 .. q0 + 63): its S is all
# masked, its P zero. That step becomes consumer_step_dead: no S, softmax or rescale; it keeps what the others rely on,
# the waits for the stage's K and V (so its releases pair with the producer's loads: an arrival before the load could
# count toward the stage's previous phase), its turn in the ping-pong order and the previous tile's P V product; the
# final P V (of the dead tile) is skipped, the turn kept. One of about 22 steps of consumer 0 at S = 4096, and
# consumer 0's share of the tensor pipe goes to the other two.
DEAD_STEP = r"""
// dead_tile: key tile j lies past every row of this consumer (causal): no S, softmax or rescale (P_j = 0). The step keeps
// the waits for K_j and V_{j-1} (its releases pair with the producer's loads), its turn, and O += P_{j-1} V_{j-1}.
__device__ __forceinline__ void consumer_step_dead(int j, Consumer& w, float (&o)[ON / 2], uint32_t (&p)[PN]) {
  const int st = j % STAGES, sp = (j - 1) % STAGES;
  mbar_wait(&w.fullK[st], (j / STAGES) & 1);
  mbar_wait(&w.fullV[sp], ((j - 1) / STAGES) & 1);
  turn_wait(w.c);
  wgmma_fence();
  issue_pv(o, p, w.sV + sp * KV_BYTES);  // O += P_{j-1} V_{j-1}
  wgmma_commit();
  turn_pass(w.c);
  if (w.lane == 0) mbar_arrive(&w.emptyK[st]);  // K_j is not read
  wgmma_wait<0>();
  wgmma_fence_regs(o);
  wgmma_fence_regs(p);
  if (w.lane == 0) mbar_arrive(&w.emptyV[sp]);
}

"""

DEAD_TILE = [
    ("// O / l as bf16 straight from registers (the first HD columns).\n",
     DEAD_STEP.lstrip("\n") + "// O / l as bf16 straight from registers (the first HD columns).\n"),
    ("      for (int j = max(n_main, 1); j < n_tiles; ++j) consumer_step<true>(j, w, s, o, p);\n",
     "      for (int j = max(n_main, 1); j < n_tiles; ++j) {\n"
     "        if (j * BN > q0 + 64 * c + 63) consumer_step_dead(j, w, o, p);  // dead_tile: past this consumer's rows\n"
     "        else consumer_step<true>(j, w, s, o, p);\n"
     "      }\n"),
    ("""      mbar_wait(&fullV[sp], ((n_tiles - 1) / STAGES) & 1);
      turn_wait(c);
      wgmma_fence();
      issue_pv(o, p, sV + sp * KV_BYTES);
      wgmma_commit();
""", """      const bool last_dead = (n_tiles - 1) * BN > q0 + 64 * c + 63;  // dead_tile: P of the last tile is zero
      if (!last_dead) mbar_wait(&fullV[sp], ((n_tiles - 1) / STAGES) & 1);
      turn_wait(c);
      if (!last_dead) {
        wgmma_fence();
        issue_pv(o, p, sV + sp * KV_BYTES);
        wgmma_commit();
      }
"""),
]


def dead_tile(body: str) -> str:
    for old, new in DEAD_TILE:
        body = replace_counted(body, old, new, "attention_template.cu.in (dead_tile)")
    return body
