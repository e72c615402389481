"""The attention forward template's q_regs option, as edits of attention_template.cu.in: Q's A fragments held in
registers, S = Q K^T issued as register-A wgmma.

The reference issues S = Q K^T with both operands in shared memory, so every key tile each consumer reads its 64 Q
rows (HD x 128 bytes) from shared memory again beside the K tile: at D = 128, 16 KB of the 80 KB a consumer reads per
tile, while the TMA ring writes 64 KB a tile into the same memory. The consumer's Q rows never change. With q_regs
each consumer loads its Q fragments once, after the Q tile lands (HD / 16 ldmatrix.x4 from the 128B-swizzled tile:
lane l addresses row 16 w + l % 8 + 8 ((l / 8) % 2), 16-byte chunk 2 (kk % 4) + l / 16 of slab kk / 4, which is
the A fragment of wgmma m64nNk16 in registers a0..a3), and issues S from them (imm-trans-b 0: K stays K-major). That
is 4 x HD / 16 registers (32 at D = 128; the reference uses 184 of its 240) and no Q bytes read per tile. The
epilogue's TMA staging still reuses the Q tile's shared memory.
"""
from __future__ import annotations


def _rs_kmajor(bn: int) -> str:
    """wgmma m64n{bn}k16 with A from registers and B K-major in shared memory (imm-trans-b = 0), SN = bn / 2 fp32
    accumulators; scale_d = 0 overwrites."""
    sn = bn // 2
    acc = ", ".join(f"%{i}" for i in range(sn))
    outs = ", ".join(f'"+f"(d[{i}])' for i in range(sn))
    return (
        f"// q_regs: D[64 x {bn}] (+)= A[64 x 16] (registers: bf16 pairs a0..a3) * B[{bn} x 16]^T (K-major, imm-trans-b 0)\n"
        f"__device__ __forceinline__ void wgmma_rs_kmajor(float (&d)[SN], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,\n"
        f"                                                uint64_t db, int scale_d) {{\n"
        f"  asm volatile(\n"
        f'      "{{\\n\\t.reg .pred p;\\n\\tsetp.ne.b32 p, %{sn + 5}, 0;\\n\\t"\n'
        f'      "wgmma.mma_async.sync.aligned.m64n{bn}k16.f32.bf16.bf16 {{{acc}}}, {{%{sn}, %{sn + 1}, %{sn + 2}, '
        f'%{sn + 3}}}, %{sn + 4}, p, 1, 1, 0;\\n\\t}}"\n'
        f"      : {outs}\n"
        f'      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(db), "r"(scale_d));\n'
        f"}}\n\n")


HELPERS = r"""constexpr int QF = 4 * (HD / 16);  // q_regs: Q's A-fragment registers (4 per k16 step)

// q_regs: this consumer's 64 Q rows as wgmma A fragments, once. ldmatrix.x4 matrix m = lane / 8 is rows + 8 (m % 2),
// 16-byte chunk m / 2 of the k16 step: registers a0..a3 of the m64k16 A fragment (rows r / r + 8, k 0-7 / 8-15).
__device__ __forceinline__ void load_q_frag(uint32_t (&qf)[QF], const uint8_t* q, int t) {
  const int lane = t % 32, row = 16 * (t / 32) + lane % 8 + 8 * ((lane / 8) % 2);
#pragma unroll
  for (int kk = 0; kk < HD / 16; ++kk) {
    const uint8_t* a = q + (kk / 4) * Q_SLAB + row * 128 + (((2 * (kk % 4) + lane / 16) ^ (row % 8)) << 4);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(qf[4 * kk]), "=r"(qf[4 * kk + 1]), "=r"(qf[4 * kk + 2]), "=r"(qf[4 * kk + 3])
                 : "r"(smem_u32(a)));
  }
}

// q_regs: S = Q K^T with Q from registers: HD / 16 k16 steps, K's descriptor as issue_qk's.
__device__ __forceinline__ void issue_qk_rs(float (&s)[SN], const uint32_t (&qf)[QF], const uint8_t* k) {
  const uint64_t dk = make_desc_sw128(k);
#pragma unroll
  for (int kk = 0; kk < HD / 16; ++kk) {
    const uint64_t ko = (kk / 4) * (KV_SLAB >> 4) + 2 * (kk % 4);
    wgmma_rs_kmajor(s, qf[4 * kk], qf[4 * kk + 1], qf[4 * kk + 2], qf[4 * kk + 3], dk + ko, kk != 0);
  }
}

"""

STRUCT = "// A consumer warpgroup's view of the CTA: its Q rows, the ring, its softmax state.\nstruct Consumer {\n"
MEMBERS = ("  float m0, m1, l0, l1;\n};\n", "  float m0, m1, l0, l1;\n  uint32_t qf[QF];  // q_regs: Q's A fragments\n};\n")
LOAD = ("    mbar_wait(fullQ, 0);\n", "    mbar_wait(fullQ, 0);\n    load_q_frag(w.qf, w.sQc, t);  // q_regs\n")
ISSUES = [("issue_qk(s, w.sQc, w.sK + st * KV_BYTES);", "issue_qk_rs(s, w.qf, w.sK + st * KV_BYTES);"),
          ("issue_qk(s, w.sQc, sK);", "issue_qk_rs(s, w.qf, sK);")]


def q_regs_edits(bn: int) -> list[tuple[str, str]]:
    """The edits for key tiles of `bn` keys (the register-A wgmma is generated for that N)."""
    return [(STRUCT, _rs_kmajor(bn) + HELPERS + STRUCT), MEMBERS, LOAD, *ISSUES]
