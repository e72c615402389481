"""The copies of the reference GEMM that bench/gemm_diagnose.py times beside it: each variant is a list of text
edits of the reference render (each must apply exactly once) and the GemmParams changes it builds on.

The main GEMM's k-loop runs at about 90% of the rate m64n256k16 reaches alone (bench/results/wgmma_rates/). Most
variants take one part of the kernel away at a time, so the difference in kernel time is that part's cost; the
"real kernels" compute C (checked against torch before and after their timed launches) and are candidate changes:

  ref          the reference (default_params()), 128 CTAs; since round 14 of gemm_sweep.md with the L2 eviction
               priorities (l2_hints). The variants whose edits rewrite the TMA copies (tma_hot and the hint
               variants below) apply to its point without them: ref_nohints, their control
  no_store     its epilogue taken out (the deferred slabs neither staged nor stored)
  no_tma       the producer arrives on each stage's full barrier without loading it (no TMA writes, no L2 / DRAM
               traffic); the consumers multiply whatever the ring holds
  tma_hot      every tile's loads read from the first 8 tile rows x 4 tile columns (the same bytes written to shared
               memory, but an L2-resident 21 MB instead of the whole 157 MB of A and B)
  bare         no_tma and no_store together: the consumers' loop, barriers and wgmmas only
  feed_only    the consumers issue no wgmma (they wait for each stage and free it): the data feed alone
  bare_long    bare without tile boundaries: each CTA runs one tile of 14 tiles' k-blocks
  bare_nowait  bare without the consumers' waits on the full barriers; bare_long_nowait both
  *_132        the same on 132 CTAs (max_ctas=0): round 3's "+1.2% a tile" split into its parts
  c_first, b_last, c_first_b_last, c_first_a_first, a_last, b_first, a_last_b_first, c_first_a_last_b_first
               real kernels: the reference with L2 eviction priorities on its TMA copies (C's stores evict_first,
               B's loads evict_last or evict_first, A's loads evict_first or evict_last)
  hints, hints_g8, hints_serp, hints_a_half, hints_g32, hints_serp_g32
               real kernels: the template's l2_hints (c_first_a_last_b_first as an option), with group_m 8, with
               K walked backwards on alternate tiles, with half of A's loads evict_last, with group_m 32 (without
               and with the backward walk)
  spread2, spread4, spread8
               real kernels: the reference with its deferred slabs stored under every 2nd / 4th / 8th k-block of
               the next tile instead of its first four
  pf6, pf12, pf24, pf12_b
               real kernels: the producer also prefetches into L2 the A and B boxes 6 / 12 / 24 k-blocks ahead
               (pf12_b: B alone), into the next tile past a tile's end
  serp, g16, serp_g16
               real kernels: the producer walks K backwards on every other tile of its CTA (a CTA's next tile
               shares its A strip, so its first k-blocks are the ones it loaded last); g16: group_m 16
  bk32, bk32_6, bk32_serp
               real kernels: the template's bk = 32 (64-byte rows, 64B swizzle) in 8 stages (bk32_6: 6), the same
               192 KB ring in finer slots, so the producer runs 7 slots (2.0 us) ahead instead of 3 (1.7 us)
  promo128, promo64, promo_none, promo_a128, promo_b128
               real kernels: the reference with its A and B tensor maps' L2 promotion at 128B / 64B / none instead of
               256B (promo_a128, promo_b128: one map at 128B)
  lpf6, lpf10, lpf16, lpf10_b
               real kernels: the producer thread also prefetches (prefetch.L2, the load/store path, not the TMA unit)
               this CTA's share of the lines of the k-block 6 / 10 / 16 ahead (lpf10_b: B's lines only)
  pw6, pw10, pw16, pw10_b
               real kernels: the same prefetches by the producer warpgroup's second warp, one line a lane, paced by a
               shared-memory counter of the k-blocks loaded
  dyn, dyn_132
               real kernels: tiles handed out at run time (a global counter the producer reads a tile ahead; the
               consumers learn each tile from a word beside its first stage), on 128 CTAs and on all 132
  trace        a real kernel: the reference with each CTA's SM and a timestamp after each of its tiles, read back by
               `run` (result "trace": how evenly the SMs run their tiles, and how far the wave drifts)
"""
from __future__ import annotations

from ptxbench.workloads.solutions.gemm_l2_hints import L2_HINT_HELPERS  # the template's own helpers

# Each edit: (old text, new text); old must occur exactly once in the rendered reference.
NO_TMA = [(
    "          mbar_arrive_expect_tx(&full[stage], STAGE_BYTES);\n"
    "#pragma unroll\n"
    "          for (int kc = 0; kc < KCH; ++kc) {\n",
    "          mbar_arrive(&full[stage]);  // diagnose: no_tma\n"
    "#pragma unroll\n"
    "          for (int kc = 0; kc < 0; ++kc) {\n")]
TMA_HOT = [
    ("tma_load_2d(sA + kc * A_CHUNK, &tmA, &full[stage], kx, m0);",
     "tma_load_2d(sA + kc * A_CHUNK, &tmA, &full[stage], kx, m0 & (8 * BM - 1));  // diagnose: tma_hot"),
    ("tma_load_2d(sB + kc * B_CHUNK, &tmB, &full[stage], kx, n0);",
     "tma_load_2d(sB + kc * B_CHUNK, &tmB, &full[stage], kx, n0 & (4 * BN - 1));  // diagnose: tma_hot"),
]
NO_STORE = [(
    "                                                  uint32_t slab_count) {\n"
    "  const int t = threadIdx.x % 128;\n",
    "                                                  uint32_t slab_count) {\n"
    "  if (slab_count != 0xffffffffu) return;  // diagnose: no_store (always taken; the code stays compiled)\n"
    "  const int t = threadIdx.x % 128;\n")]
FEED_ONLY = [(
    "              wgmma_m64k16_bf16<BN>(acc[ms], da + 2 * kk, db + 2 * kk, (k | kc | kk) != 0);",
    "              (void)da; (void)db;  // diagnose: feed_only")]

# bare's loop taken further apart: without its tile boundaries (each CTA one tile of 14 tiles' k-blocks: the same
# wgmmas, no drain, packing or tile walk between them), and without the consumers' waits on the full barriers.
LONG = [("  const int k_iters = (K + BK - 1) / BK;\n",
         "  const int k_iters = 14 * ((K + BK - 1) / BK);  // diagnose: long (one tile of 14 tiles' k-blocks)\n"),
        ("      for (int ct = first; ct < cluster_tiles; ct += step) {\n",
         "      for (int ct = first; ct < cluster_tiles; ct += cluster_tiles) {  // diagnose: long\n"),
        ("    for (int ct = first; ct < cluster_tiles; ct += step) {\n",
         "    for (int ct = first; ct < cluster_tiles; ct += cluster_tiles) {  // diagnose: long\n")]
NO_FULL_WAIT = [("        mbar_wait(&full[stage], phase);\n", "        // diagnose: no full wait\n")]

# Real kernels (checked against torch like the reference): L2 eviction-priority hints on the TMA traffic. The 128
# tiles in flight read about 52 MB of A and B, the L2's size, while 117 MB of C stream through it once: C's stores
# marked evict_first leave A and B their lines; B (each column strip read by 8 tile rows) marked evict_last.
HINT_HELPERS = [("using namespace ptxbench;\n", "using namespace ptxbench;\n\n" + L2_HINT_HELPERS)]
C_FIRST = HINT_HELPERS + [(
    "    tma_store_2d(tmC, stage_buf + buf, col0 + 64 * S, row0);",
    "    tma_store_2d_hint(tmC, stage_buf + buf, col0 + 64 * S, row0, l2_policy<false>());  // diagnose: c_first")]
B_LAST = [(
    "tma_load_2d(sB + kc * B_CHUNK, &tmB, &full[stage], kx, n0);",
    "tma_load_2d_hint(sB + kc * B_CHUNK, &tmB, &full[stage], kx, n0, l2_policy<true>());  // diagnose: b_last")]
A_FIRST = [(
    "tma_load_2d(sA + kc * A_CHUNK, &tmA, &full[stage], kx, m0);",
    "tma_load_2d_hint(sA + kc * A_CHUNK, &tmA, &full[stage], kx, m0, l2_policy<false>());  // diagnose: a_first")]
# A's strips are re-read by the next round of the same group (about 50 MB of traffic later, the L2's size), B's are
# dead once the round's 16 CTAs on a column strip have read them; A evict_first cost 1.1% (above). So the opposite:
A_LAST = [(
    "tma_load_2d(sA + kc * A_CHUNK, &tmA, &full[stage], kx, m0);",
    "tma_load_2d_hint(sA + kc * A_CHUNK, &tmA, &full[stage], kx, m0, l2_policy<true>());  // diagnose: a_last")]
B_FIRST = [(
    "tma_load_2d(sB + kc * B_CHUNK, &tmB, &full[stage], kx, n0);",
    "tma_load_2d_hint(sB + kc * B_CHUNK, &tmB, &full[stage], kx, n0, l2_policy<false>());  // diagnose: b_first")]
# l2_hints with half of A's accesses evict_last (the other half keep the default priority)
A_HALF = [('asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(p));',
           'asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 0.5;" : "=l"(p));  // diagnose: a_half')]

# Real kernels: the producer also prefetches into L2 (cp.async.bulk.prefetch.tensor) the A and B boxes `pf` k-blocks
# ahead of the load it issues, past the tile's end into its next tile's first k-blocks. tma_hot ran 2-3% faster than
# the reference (round above): the loads that miss L2 wait on DRAM longer than the ring's 3 k-blocks of lead.
PF_HELPER = ("using namespace ptxbench;\n", """using namespace ptxbench;

__device__ __forceinline__ void tma_prefetch_2d(const void* tmap, int32_t c0, int32_t c1) {  // diagnose: prefetch
  asm volatile("cp.async.bulk.prefetch.tensor.2d.L2.global.tile [%0, {%1, %2}];"
               :: "l"(reinterpret_cast<uint64_t>(tmap)), "r"(c0), "r"(c1) : "memory");
}
""")


def prefetch(pf: int, a: bool = True) -> list:
    """The edits of a prefetch `pf` k-blocks ahead (of B alone when not `a`)."""
    load_a = "tma_prefetch_2d(&tmA, {k} * BK, {m}); " if a else ""
    here = (load_a + "tma_prefetch_2d(&tmB, {k} * BK, {n});").format(k="pk", m="m0", n="n0")
    there = (load_a + "tma_prefetch_2d(&tmB, {k} * BK, {n});").format(k="(pk - k_iters)", m="ntm * BM", n="ntn * BN")
    return [PF_HELPER, (
        "        const int n0 = tn * BN;\n"
        "        for (int k = 0; k < k_iters; ++k) {\n"
        "          mbar_wait(&empty[stage], phase ^ 1);\n",
        "        const int n0 = tn * BN;\n"
        "        int ntm = -1, ntn = 0;  // diagnose: prefetch into the next tile\n"
        "        if (ct + step < cluster_tiles) tile_coords(ct + step, cluster_rows, tiles_n, ntm, ntn);\n"
        "        for (int k = 0; k < k_iters; ++k) {\n"
        "          mbar_wait(&empty[stage], phase ^ 1);\n"), (
        "          if (++stage == STAGES) { stage = 0; phase ^= 1; }\n",
        f"          if (const int pk = k + {pf}; pk < k_iters) {{ {here} }}  // diagnose: prefetch\n"
        f"          else if (ntm >= 0) {{ {there} }}\n"
        "          if (++stage == STAGES) { stage = 0; phase ^= 1; }\n")]


# Real kernels: K walked backwards on every other tile of a persistent CTA. In the grouped order a CTA's next tile
# (ct + 128, 128 a multiple of group_m) has the same A strip, so the reversed tile starts with the A k-blocks this CTA
# (and the other 15 CTAs on that strip) loaded last, still in L2; only the consumers' accumulation order changes.
SERP = [(
    "        const int n0 = tn * BN;\n"
    "        for (int k = 0; k < k_iters; ++k) {\n"
    "          mbar_wait(&empty[stage], phase ^ 1);\n",
    "        const int n0 = tn * BN;\n"
    "        const bool rev = ((ct - first) / step) & 1;  // diagnose: serp (every other tile of this CTA backwards)\n"
    "        for (int k = 0; k < k_iters; ++k) {\n"
    "          mbar_wait(&empty[stage], phase ^ 1);\n"),
    ("            const int kx = k * BK + kc * 64;",
     "            const int kx = (rev ? k_iters - 1 - k : k) * BK + kc * 64;  // diagnose: serp")]


def spread(every: int) -> list:
    """The deferred slabs under every `every`-th k-block of the next tile (k = 0, every, 2 every, ...) instead of its
    first BN / 64: the staging writes and the TMA stores' reads of shared memory spread over more of the loads."""
    return [("        if (pm0 >= 0 && k < BN / 64)  // defer: the previous tile's slab k, under this k-block's wgmmas\n"
             "          store_slab_deferred(pk, k, ",
             f"        if (pm0 >= 0 && k % {every} == 0 && k < {every} * (BN / 64))  // diagnose: spread\n"
             f"          store_slab_deferred(pk, k / {every}, "),
            ("      for (int s = k_iters; pm0 >= 0 && s < BN / 64; ++s)",
             f"      for (int s = (k_iters + {every - 1}) / {every}; pm0 >= 0 && s < BN / 64; ++s)  // diagnose: spread")]


G32 = [("constexpr int GROUP_M = 16;", "constexpr int GROUP_M = 32;  // diagnose: g32")]


def pass_a_b(tag: str) -> list:
    """A and B passed to the kernel as plain pointers too (Ag, Bg), for the variants that prefetch their lines."""
    return [
        ('args = ["tmap:A_map", "tmap:B_map", "tmap:C_map", "C", "i32:M", "i32:N", "i32:K"]',
         f'args = ["tmap:A_map", "tmap:B_map", "tmap:C_map", "C", "A", "B", "i32:M", "i32:N", "i32:K"]  # diagnose: {tag}'),
        ("const __grid_constant__ CUtensorMap tmC, __nv_bfloat16* C, int M, int N, int K) {",
         "const __grid_constant__ CUtensorMap tmC, __nv_bfloat16* C,\n"
         f"             const __nv_bfloat16* __restrict__ Ag, const __nv_bfloat16* __restrict__ Bg,  // diagnose: {tag}\n"
         "             int M, int N, int K) {")]


def words_after_barriers(decl: str, why: str) -> list:
    """`decl` (a pointer declared from `empty + STAGES`) after the barriers, and the plan's shared memory grown to
    hold it."""
    return [("smem = 230464\n", f"smem = 230480  # diagnose: {why}\n"),
            ("  uint64_t* empty = full + STAGES;\n", "  uint64_t* empty = full + STAGES;\n" + decl)]


def lsu_prefetch(pf: int, a: bool = True) -> list:
    """Real kernels: the producer thread also prefetches into L2, with the SM's load/store path (prefetch.L2) rather
    than the TMA unit (round 8's cp.async.bulk.prefetch queued in front of the loads), the k-block `pf` ahead of the
    one it loads, past a tile's end into its next tile. Only this CTA's share of the lines: in the grouped order the
    CTAs in flight that read one A strip have distinct tile columns mod 8, and those that read one B strip distinct
    tile rows mod 16, so each prefetches 16 of the strip's 128 A rows (by its tile column) and 16 of the 256 B rows
    (by its tile row): 32 lines a k-block, each line of the wave once (a share that overhangs M or N is skipped
    whole, so the loop has no per-line branch). `a` False: B's lines only."""
    def lines(op: str, rows: str, lim: str) -> str:  # 16 lines, K elements apart, from row `rows` of op
        return (f"              if (const int r = {rows}; r + 16 <= {lim}) {{\n"
                f"                const __nv_bfloat16* p = {op} + static_cast<size_t>(r) * K + kof;\n"
                "#pragma unroll\n"
                "                for (int i = 0; i < 16; ++i, p += K) asm volatile(\"prefetch.L2 [%0];\" :: \"l\"(p));\n"
                "              }\n")
    share = ((lines("Ag", "pm * BM + (pn % (BM / 16)) * 16", "M") if a else "")
             + lines("Bg", "pn * BN + (pm % (BN / 16)) * 16", "N"))
    return pass_a_b("lsu") + [
        ("        const int n0 = tn * BN;\n"
         "        for (int k = 0; k < k_iters; ++k) {\n"
         "          mbar_wait(&empty[stage], phase ^ 1);\n",
         "        const int n0 = tn * BN;\n"
         "        int ntm = -1, ntn = 0;  // diagnose: lsu prefetch into the next tile\n"
         "        if (ct + step < cluster_tiles) tile_coords(ct + step, cluster_rows, tiles_n, ntm, ntn);\n"
         "        for (int k = 0; k < k_iters; ++k) {\n"
         "          mbar_wait(&empty[stage], phase ^ 1);\n"),
        ("          if (++stage == STAGES) { stage = 0; phase ^= 1; }\n",
         f"          if (int pk = k + {pf}, pm = tm, pn = tn; true) {{  // diagnose: lsu prefetch, k-block k + {pf}\n"
         "            if (pk >= k_iters) { pk -= k_iters; pm = ntm; pn = ntn; }\n"
         "            if (pm >= 0 && pk < k_iters) {\n"
         "              const size_t kof = static_cast<size_t>(pk) * BK;\n"
         + share +
         "            }\n"
         "          }\n"
         "          if (++stage == STAGES) { stage = 0; phase ^= 1; }\n")]


def promotion(a: str, b: str) -> list:
    """Real kernels: the L2 promotion of A's and B's tensor maps (the size of the L2 request a TMA miss makes: none,
    64B, 128B or the reference's 256B), a setting of the launch plan, not of the kernel's code."""
    def one(tensor: str, rows: int, value: str) -> tuple:
        head = f'tensor = "{tensor}"\nbox = [64, {rows}]\nswizzle = "128B"\nl2_promotion = '
        return (head + '"256B"\n', head + f'"{value}"  # diagnose: promotion\n')
    return [one(t, rows, v) for t, rows, v in (("A", 128, a), ("B", 256, b)) if v != "256B"]


def prefetch_warp(pf: int, a: bool = True) -> list:
    """Real kernels: lsu_prefetch's share of lines, prefetched by the producer warpgroup's second warp instead of the
    thread that issues the TMA loads (round 18: that thread's prefetches cost +2.0 to +2.7%, about as much for B's 16
    lines as for all 32, so the time they keep it from its next load is the suspect). Each lane prefetches one line
    (lanes 0-15 A's rows, 16-31 B's), paced by a shared-memory counter of the k-blocks the producer has loaded, which
    only grows, so the warp never waits on a barrier phase and cannot hang the kernel."""
    rows = ("        const bool is_a = lane < 16;  // diagnose: prefetch warp\n"
            "        const int r = is_a ? pm * BM + (pn % (BM / 16)) * 16 + lane : pn * BN + (pm % (BN / 16)) * 16 + lane - 16;\n"
            + ("        if (r < (is_a ? M : N))\n" if a else "        if (!is_a && r < N)\n")
            + "          asm volatile(\"prefetch.L2 [%0];\" :: \"l\"((is_a ? Ag : Bg) + static_cast<size_t>(r) * K + static_cast<size_t>(pk) * BK));\n")
    warp = ("    } else if (t >= 32 && t < 64) {  // diagnose: prefetch warp\n"
            "      const int lane = t - 32;\n"
            "      int g = 0;\n"
            "      for (int ct = first; ct < cluster_tiles; ct += step) {\n"
            "        int tm, tn, ntm = -1, ntn = 0;\n"
            "        tile_coords(ct, cluster_rows, tiles_n, tm, tn);\n"
            "        if (ct + step < cluster_tiles) tile_coords(ct + step, cluster_rows, tiles_n, ntm, ntn);\n"
            "        for (int k = 0; k < k_iters; ++k, ++g) {\n"
            "          while (*loaded < g) __nanosleep(64);  // the producer has issued k-block g's loads\n"
            f"          int pk = k + {pf}, pm = tm, pn = tn;\n"
            "          if (pk >= k_iters) { pk -= k_iters; pm = ntm; pn = ntn; }\n"
            "          if (pm < 0 || pk >= k_iters) continue;\n"
            + rows.replace("\n        ", "\n          ").replace("        const bool", "          const bool", 1) +
            "        }\n"
            "      }\n"
            "    }\n"
            "  } else {\n"
            "    setmaxnreg_inc<CONSUMER_REGS>();")
    return pass_a_b("pw") + words_after_barriers(
        "  volatile int* loaded = reinterpret_cast<volatile int*>(empty + STAGES);  // diagnose: k-blocks loaded - 1\n",
        "the prefetch warp's counter") + [
        ("    mbar_fence_init();\n", "    mbar_fence_init();\n    *loaded = -1;  // diagnose: prefetch warp\n"),
        ("      int stage = 0;\n", "      int stage = 0, g = 0;  // diagnose: g, the k-blocks loaded\n"),
        ("          if (++stage == STAGES) { stage = 0; phase ^= 1; }\n",
         "          *loaded = g++;  // diagnose: prefetch warp\n"
         "          if (++stage == STAGES) { stage = 0; phase ^= 1; }\n"),
        ("    }\n  } else {\n    setmaxnreg_inc<CONSUMER_REGS>();", warp)]


# A's share of the shared-memory traffic taken out (round 24 of gemm_sweep.md): per k16 step a CTA's TMA writes A
# (4 KB) and B (8 KB) and its two consumers' wgmmas read A (2 x 2 KB) and B (2 x 8 KB), 32 KB in all. no_a_tma skips
# A's TMA loads (the wgmmas read whatever the ring's A slots hold): A's writes and its L2 traffic out. rs_a_tma keeps
# them, but the wgmmas take A from four constant registers (the RS form, as the forward's P): A's reads out. rs_no_a
# both: a quarter of the shared-memory bytes. A ceiling for any design that feeds A around shared memory.
def _rs_wgmma(n: int = 256) -> str:
    acc = ", ".join(f"%{i}" for i in range(n // 2))
    outs = ", ".join(f'"+f"(d[{i}])' for i in range(n // 2))
    k = n // 2
    return (f"__device__ __forceinline__ void wgmma_rs_m64n{n}k16(float (&d)[{k}], const uint32_t (&a)[4], uint64_t desc_b,"
            f" int scale_d) {{  // diagnose: rs\n"
            f'  asm volatile("{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{k + 5}, 0;\\n"\n'
            f'      "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.bf16.bf16 {{{acc}}}, {{%{k}, %{k + 1}, %{k + 2}, %{k + 3}}}, '
            f'%{k + 4}, p, 1, 1, 0;\\n}}\\n"\n'
            f'      : {outs}\n      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d));\n}}\n')


NO_A_TMA = [("            tma_load_2d_hint(sA + kc * A_CHUNK, &tmA, &full[stage], kx, m0, keep);\n",
             "            (void)keep;  // diagnose: no_a_tma (A not loaded)\n"),
            ("          mbar_arrive_expect_tx(&full[stage], STAGE_BYTES);\n",
             "          mbar_arrive_expect_tx(&full[stage], STAGE_BYTES - A_STAGE);  // diagnose: no_a_tma\n")]
RS_A = [("using namespace ptxbench;\n", "using namespace ptxbench;\n\n" + _rs_wgmma()),
        ("    const int consumer = __shfl_sync(0xffffffffu, wg - 1, 0);",
         "    const int consumer = __shfl_sync(0xffffffffu, wg - 1, 0);\n"
         "    const uint32_t ra[4] = {0x3c003c00u ^ t, 0x3c003c00u + t, 0x3c00bc00u ^ t, 0xbc003c00u + t};  // diagnose: rs"),
        ("              wgmma_m64k16_bf16<BN>(acc[ms], da + 2 * kk, db + 2 * kk, (k | kc | kk) != 0);",
         "              (void)da; wgmma_rs_m64n256k16(acc[ms], ra, db + 2 * kk, (k | kc | kk) != 0);  // diagnose: rs")]


# Real kernels (round 25 of gemm_sweep.md): A shared by a 2-CTA cluster along N. Round 24 measured A's loads at 7.6%
# of the time and B's at about 3%, with A the L2-resident third of the bytes, read by the 8 CTAs of a wave's tile row
# at about the same time. The template's cluster_m = 2 pairs two M tiles and multicasts B (c2, its control here);
# a_mc pairs two N tiles of one tile row instead: each CTA loads half of A's box and multicasts it to both, and loads
# its own B. A's L2 reads halve; every SM still receives the whole A into its shared memory.
# The cluster turned around (shared with bench/decode_diagnose.py's a_mc points): A's slice per CTA, and the walk over
# clusters of CLUSTER_M N tiles of one tile row, in the producer and in the consumers.
A_MC_WALK = [
    ("constexpr int B_SLICE = B_CHUNK / CLUSTER_M;",
     "constexpr int A_SLICE = A_CHUNK / CLUSTER_M;  // diagnose: a_mc (the part of A each CTA loads and multicasts)\n"
     "constexpr int B_SLICE = B_CHUNK / CLUSTER_M;"),
    ("  const int cluster_rows = (tiles_m + CLUSTER_M - 1) / CLUSTER_M;\n  const int cluster_tiles = cluster_rows * tiles_n;\n",
     "  const int cluster_rows = tiles_m;  // diagnose: a_mc (a cluster is CLUSTER_M N tiles of one tile row)\n"
     "  const int cluster_tiles = cluster_rows * (tiles_n / CLUSTER_M);\n"),
    ("        tile_coords(ct, cluster_rows, tiles_n, tm, tn);\n        const int m0 = (tm * CLUSTER_M + cta_rank) * BM;\n"
     "        const int n0 = tn * BN;\n",
     "        tile_coords(ct, cluster_rows, tiles_n / CLUSTER_M, tm, tn);  // diagnose: a_mc\n"
     "        const int m0 = tm * BM;\n        const int n0 = (tn * CLUSTER_M + cta_rank) * BN;\n"),
    ("      tile_coords(ct, cluster_rows, tiles_n, tm, tn);\n      const int m0 = (tm * CLUSTER_M + cta_rank) * BM;\n"
     "      const int n0 = tn * BN;\n",
     "      tile_coords(ct, cluster_rows, tiles_n / CLUSTER_M, tm, tn);  // diagnose: a_mc\n"
     "      const int m0 = tm * BM;\n      const int n0 = (tn * CLUSTER_M + cta_rank) * BN;\n")]
A_MC = [
    ('[tmap.A_map]\ntensor = "A"\nbox = [64, 128]', '[tmap.A_map]\ntensor = "A"\nbox = [64, 64]'),
    ('[tmap.B_map]\ntensor = "B"\nbox = [64, 128]', '[tmap.B_map]\ntensor = "B"\nbox = [64, 256]'),
    *A_MC_WALK,
    ("            tma_load_2d_hint(sA + kc * A_CHUNK, &tmA, &full[stage], kx, m0, keep);\n"
     "            if constexpr (CLUSTER_M > 1) {\n"
     "              tma_load_2d_multicast(sB + kc * B_CHUNK + cta_rank * B_SLICE, &tmB, &full[stage], kx,\n"
     "                                    n0 + cta_rank * (BN / CLUSTER_M), (1 << CLUSTER_M) - 1);\n"
     "            } else {\n",
     "            (void)keep;  // diagnose: a_mc (A's half multicast to both CTAs, B loaded alone)\n"
     "            tma_load_2d_multicast(sA + kc * A_CHUNK + cta_rank * A_SLICE, &tmA, &full[stage], kx,\n"
     "                                  m0 + cta_rank * (BM / CLUSTER_M), (1 << CLUSTER_M) - 1);\n"
     "            {\n")]


EDITS: dict[str, list] = {
    "ref": [], "no_store": NO_STORE, "no_tma": NO_TMA, "tma_hot": TMA_HOT, "bare": NO_TMA + NO_STORE,
    "feed_only": FEED_ONLY, "c_first": C_FIRST, "b_last": HINT_HELPERS + B_LAST, "c_first_b_last": C_FIRST + B_LAST,
    "c_first_a_first": C_FIRST + A_FIRST, "a_last": HINT_HELPERS + A_LAST, "b_first": HINT_HELPERS + B_FIRST,
    "c_first_a_last": C_FIRST + A_LAST, "c_first_b_first": C_FIRST + B_FIRST,
    "a_last_b_first": HINT_HELPERS + A_LAST + B_FIRST, "c_first_a_last_b_first": C_FIRST + A_LAST + B_FIRST,
    "bare_long": NO_TMA + NO_STORE + LONG, "bare_nowait": NO_TMA + NO_STORE + NO_FULL_WAIT,
    "bare_long_nowait": NO_TMA + NO_STORE + LONG + NO_FULL_WAIT,
    "pf6": prefetch(6), "pf12": prefetch(12), "pf24": prefetch(24), "pf12_b": prefetch(12, a=False),
    "serp": SERP,
    "promo128": promotion("128B", "128B"), "promo64": promotion("64B", "64B"), "promo_none": promotion("none", "none"),
    "promo_a128": promotion("128B", "256B"), "promo_b128": promotion("256B", "128B"),
    "lpf6": lsu_prefetch(6), "lpf10": lsu_prefetch(10), "lpf16": lsu_prefetch(16), "lpf10_b": lsu_prefetch(10, a=False),
    "pw6": prefetch_warp(6), "pw10": prefetch_warp(10), "pw16": prefetch_warp(16), "pw10_b": prefetch_warp(10, a=False),
    "no_a_tma": NO_A_TMA, "rs_a_tma": RS_A, "rs_no_a": NO_A_TMA + RS_A,
}


# Real kernels: tiles handed out at run time. Each CTA starts on tile blockIdx.x as before; its producer then takes the
# next tile from a counter in the module's globals (atomicAdd, a tile ahead, so its latency hides under 80 k-blocks)
# and tells the consumers through a word beside each ring stage, written before the stage's first arrival (release)
# and read after their wait (acquire); a tile of -1 ends them. The tiles still go out in the grouped order, so the
# CTAs in flight cover about one wave of neighbouring tiles, but an SM that runs faster (a less crowded GPC, a nearer
# L2 partition) takes more of them. The last CTA to finish sets the counters back to 0 for the next launch.
DYN = [
    ("using namespace ptxbench;\n",
     "using namespace ptxbench;\n\n__device__ int dyn_next = 0, dyn_done = 0;  // diagnose: dyn (tiles handed out, CTAs done)\n"),
    *words_after_barriers(
        "  volatile int* tile_at = reinterpret_cast<volatile int*>(empty + STAGES);  // diagnose: dyn (each stage's tile)\n",
        "dyn's tile words"),
    ("      for (int ct = first; ct < cluster_tiles; ct += step) {\n        int tm, tn;\n",
     "      for (int ct = first, nxt; ct < cluster_tiles; ct = nxt) {\n"
     "        nxt = atomicAdd(&dyn_next, 1) + step;  // diagnose: dyn (the tile after this one)\n"
     "        int tm, tn;\n"),
    ("          mbar_arrive_expect_tx(&full[stage], STAGE_BYTES);\n",
     "          if (k == 0) tile_at[stage] = ct;  // diagnose: dyn\n"
     "          mbar_arrive_expect_tx(&full[stage], STAGE_BYTES);\n"),
    ("          if (++stage == STAGES) { stage = 0; phase ^= 1; }\n        }\n      }\n    }\n  } else {\n",
     "          if (++stage == STAGES) { stage = 0; phase ^= 1; }\n        }\n      }\n"
     "      mbar_wait(&empty[stage], phase ^ 1);  // diagnose: dyn (no tile left: a stage that says so)\n"
     "      tile_at[stage] = -1;\n"
     "      mbar_arrive(&full[stage]);\n"
     "      if (atomicAdd(&dyn_done, 1) == gridDim.x - 1) { atomicExch(&dyn_next, 0); atomicExch(&dyn_done, 0); }\n"
     "    }\n  } else {\n"),
    ("    for (int ct = first; ct < cluster_tiles; ct += step) {\n      int tm, tn;\n",
     "    for (;;) {\n"
     "      mbar_wait(&full[stage], phase);  // diagnose: dyn (k-block 0's stage names the tile)\n"
     "      const int ct = tile_at[stage];\n"
     "      if (ct < 0) break;\n"
     "      int tm, tn;\n")]


# A real kernel that also records when each CTA's tiles end: per CTA, its SM (%smid), the time it started and, after
# each tile's last wgmma, the time (%globaltimer, ns), in a scratch buffer of TRACE_SLOTS int64 a CTA. Whether some SMs
# run their 14 tiles slower than others (a crowded GPC, a far L2 partition), and how far the wave drifts out of step.
TRACE_SLOTS = 32
TRACE = [
    ('args = ["tmap:A_map", "tmap:B_map", "tmap:C_map", "C", "i32:M", "i32:N", "i32:K"]',
     'args = ["tmap:A_map", "tmap:B_map", "tmap:C_map", "C", "i32:M", "i32:N", "i32:K", "scratch:trace"]  # diagnose: trace\n\n'
     f'[scratch.trace]\ndtype = "int64"\nshape = ["min(min(num_sms, 128), cdiv(M, 128) * cdiv(N, 256))", {TRACE_SLOTS}]\nzero = false'),
    ("__nv_bfloat16* C, int M, int N, int K) {",
     "__nv_bfloat16* C, int M, int N, int K,\n             long long* __restrict__ trace) {  // diagnose: trace"),
    ("  const int wg = threadIdx.x / 128;\n",
     "  const int wg = threadIdx.x / 128;\n"
     "  long long* my_trace = trace + static_cast<size_t>(blockIdx.x) * " + str(TRACE_SLOTS) + ";  // diagnose: trace\n"
     "  int traced = 0;\n"
     "  if (threadIdx.x == 0) {\n"
     "    unsigned sm; long long now;\n"
     "    asm volatile(\"mov.u32 %0, %%smid;\" : \"=r\"(sm));\n"
     "    asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(now));\n"
     "    my_trace[0] = sm; my_trace[1] = now;\n"
     "  }\n"),
    ("      wgmma_wait<0>();\n",
     "      wgmma_wait<0>();\n"
     "      if (threadIdx.x == 128 && 2 + traced < " + str(TRACE_SLOTS) + ") {  // diagnose: trace (consumer 0's first thread)\n"
     "        long long now;\n"
     "        asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(now));\n"
     "        my_trace[2 + traced++] = now;\n"
     "      }\n")]


# The traced kernel with the SM's cycle counter beside the time (round 26 of gemm_sweep.md): per CTA its SM, the start
# (%globaltimer ns, %clock64), then after each tile's last wgmma the pair again, so the clock a CTA ran at between two
# tile ends is the cycles over the nanoseconds, whatever nvidia-smi's 20-ms samples say.
TRACE_CLK = [
    (TRACE[0][0], TRACE[0][1].replace('shape = ["min(min(num_sms, 128), cdiv(M, 128) * cdiv(N, 256))", ',
                                      'shape = ["num_sms", ')),  # a row for every SM: any grid of these variants fits
    TRACE[1],
    ("  const int wg = threadIdx.x / 128;\n",
     "  const int wg = threadIdx.x / 128;\n"
     "  long long* my_trace = trace + static_cast<size_t>(blockIdx.x) * " + str(TRACE_SLOTS) + ";  // diagnose: trace_clk\n"
     "  int traced = 0;\n"
     "  if (threadIdx.x == 0) {\n"
     "    unsigned sm; long long now, clk;\n"
     "    asm volatile(\"mov.u32 %0, %%smid;\" : \"=r\"(sm));\n"
     "    asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(now));\n"
     "    asm volatile(\"mov.u64 %0, %%clock64;\" : \"=l\"(clk));\n"
     "    my_trace[0] = sm; my_trace[1] = now; my_trace[2] = clk;\n"
     "  }\n"),
    ("      wgmma_wait<0>();\n",
     "      wgmma_wait<0>();\n"
     "      if (threadIdx.x == 128 && 4 + 2 * traced < " + str(TRACE_SLOTS) + ") {  // diagnose: trace_clk\n"
     "        long long now, clk;\n"
     "        asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(now));\n"
     "        asm volatile(\"mov.u64 %0, %%clock64;\" : \"=l\"(clk));\n"
     "        my_trace[3 + 2 * traced] = now; my_trace[4 + 2 * traced] = clk; ++traced;\n"
     "      }\n")]


UNHINTED = {"l2_hints": False}  # the reference's point before round 14 of gemm_sweep.md (ref_nohints)


def _base(edits: list) -> dict:
    """The point an edit list applies to: the reference (default_params()), or, for edits that rewrite its TMA
    copies as they were before round 14 (tma_hot, the eviction-hint variants), its point without the L2 priorities."""
    return UNHINTED if any("tma_load_2d(" in old or "tma_store_2d(tmC" in old for old, _ in edits) else {}


VARIANTS = {**{n: (e, _base(e)) for n, e in EDITS.items()}, "ref_nohints": ([], UNHINTED),
            **{f"{n}_132": (EDITS[n], {**_base(EDITS[n]), "max_ctas": 0})
               for n in ("ref", "no_tma", "tma_hot", "feed_only")},
            "g16": ([], {"group_m": 16}), "serp_g16": (SERP, {"group_m": 16}),
            # the template's bk = 32 (gemm_chunk32.py: 32-element k-chunks under the 64B swizzle), 8 or 6 stages
            "bk32": ([], {"bk": 32, "stages": 8}), "bk32_6": ([], {"bk": 32, "stages": 6}),
            "bk32_serp": (SERP, {"bk": 32, "stages": 8}),
            # the template's l2_hints (A evict_last, B and C evict_first: c_first_a_last_b_first as an option), and
            # its neighbours
            "hints": ([], {"l2_hints": True}), "hints_g8": ([], {"l2_hints": True, "group_m": 8}),
            "hints_serp": (SERP, {"l2_hints": True}), "hints_a_half": (A_HALF, {"l2_hints": True}),
            # group_m 32 on the (hinted) reference, outside the template's space, so an edit: B's strips read twice
            # instead of 4 times, A's 42 MB of strips a wave held evict_last
            "hints_g32": (G32, {}), "hints_serp_g32": (SERP + G32, {}),
            # the reference's deferred slabs under every 2nd / 4th / 8th k-block
            "spread2": (spread(2), {}), "spread4": (spread(4), {}), "spread8": (spread(8), {}),
            # tiles handed out at run time, on 128 CTAs and on every SM
            "dyn": (DYN, {}), "dyn_132": (DYN, {"max_ctas": 0}),
            # the reference with a timestamp after each tile
            "trace": (TRACE, {}),
            # 2-CTA clusters: the template's (two M tiles, B multicast), and two N tiles with A multicast
            "c2": ([], {"cluster_m": 2}), "a_mc": (A_MC, {"cluster_m": 2}),
            # the reference with the time and the SM's cycle count after each tile, and so its neighbours
            "trace_clk": (TRACE_CLK, {}), "trace_clk_132": (TRACE_CLK, {"max_ctas": 0}),
            "trace_clk_c2": (TRACE_CLK, {"cluster_m": 2}), "trace_clk_g8": (TRACE_CLK, {"group_m": 8}),
            "trace_clk_nohints": (TRACE_CLK, {"l2_hints": False}), "trace_clk_nodefer": (TRACE_CLK, {"defer": False})}
# The variants with a part of the kernel taken out compute garbage; every other one computes C and is checked.
TAKEN_OUT = ("no_store", "no_tma", "tma_hot", "bare", "feed_only", "bare_long", "bare_nowait", "bare_long_nowait",
             "no_a_tma", "rs_a_tma", "rs_no_a")
CHECKED = tuple(n for n in VARIANTS if n.removesuffix("_132") not in TAKEN_OUT)


def edited(source: str, edits: list) -> str:
    for old, new in edits:
        if source.count(old) != 1:
            raise ValueError(f"edit applies {source.count(old)} times, not once: {old[:60]!r}")
        source = source.replace(old, new)
    return source
