"""tail_split: the main kernel's last wave cut into pieces (on pre_plain, in head_groups' launch order).

The profile of the reference (attention_bwd.md, "The main kernel's last wave at D = 128") has one CTA per (key block,
batch x KV head) on 132 SMs: 6,144 CTAs at D = 128 are 46.55 waves, so in the last one 60 SMs idle for a CTA's time
(0.97% of the kernel's SM-time), and GQA's 1,024 CTAs (each 4 query heads long) leave 32 SMs idle for 7.76 waves
(about 3%). Here the grid is 1-D: the first `full` CTAs take a whole key block each, in head_groups' order; the last
`rem` key blocks of that order (items % num_sms, what the last wave would hold) are cut into PIECES CTAs each, over
equal parts of their query loop, so the tail runs as 5 x rem shorter CTAs. A piece stores its fp32 dV / dK
partials (each consumer thread its own 128 floats), fences, and counts itself in; the key block's last piece adds the
others' partials to its registers and stores dV / dK as a whole CTA does. The counters are zeroed scratch. Every
kernel takes the same grid and pieces (a causal tail block, among the shortest, may give a piece no query block: it
then issues nothing and adds zeros).
"""
from __future__ import annotations

from ..tail_pieces import PIECES, count_in, tail_args, tail_grid, tail_scratch  # noqa: F401  (PIECES: read by tests)
from .block_st_ahead import ST_AHEAD_LOOP_NEW
from .edits import apply_edits

# head_groups' 2-D grid line, which tail_split and grid_1d make 1-D
GRID_2D = 'grid = ["cdiv(S, 128)", "B * H"]  # the key blocks of one head side by side: they share its Q, dO, dQ in L2'


def plan_edits(pieces: int = PIECES) -> list[tuple[str, str]]:
    """The plan's grid, arguments and scratch for `pieces` per cut key block (1: none is cut)."""
    return [
        (GRID_2D, tail_grid("cdiv(S, 128) * (B * H)", "key blocks", pieces)),
        ('"dK", "dV", "i32:S", "i32:D", "f32:scale"',
         ", ".join(f'"{a}"' for a in ["dK", "dV", *tail_args("(B * H)", pieces), "i32:S", "i32:D", "f32:scale"])),
        ('[scratch.dQacc]\ndtype = "float32"\nshape = ["B", "H", "S", "D"]\n',
         '[scratch.dQacc]\ndtype = "float32"\nshape = ["B", "H", "S", "D"]\n\n'
         + tail_scratch(256, 128, "dV / dK partials (dV in floats 0-63, dK in 64-127)")),
    ]


# every entry point takes the pieces' arguments after dV and hands them to attn_bwd
ENTRY_PARAMS = ("__nv_bfloat16* __restrict__ dV, int S, int D, float scale",
                "__nv_bfloat16* __restrict__ dV, int kv_heads, int nsm, int pieces,\n    float* __restrict__ tail_part, "
                "int* __restrict__ tail_count, int S, int D, float scale")
ENTRY_CALLS = ("dK, dV, S, D, scale", "dK, dV, kv_heads, nsm, pieces, tail_part, tail_count, S, D, scale")
TEMPLATE_PARAMS = ("__nv_bfloat16* __restrict__ dK, __nv_bfloat16* __restrict__ dV, int S, int D,",
                   "__nv_bfloat16* __restrict__ dK, __nv_bfloat16* __restrict__ dV, int kv_heads,\n"
                   "                                         int nsm, int pieces, float* __restrict__ tail_part,\n"
                   "                                         int* __restrict__ tail_count, int S, int D,")

DECODE = ("""  const int n_kb = gridDim.x, lin = blockIdx.x + n_kb * blockIdx.y;
  const int grp = lin / (HEAD_GROUP * n_kb), in_grp = lin % (HEAD_GROUP * n_kb);
  const int g_heads = min(HEAD_GROUP, static_cast<int>(gridDim.y) - grp * HEAD_GROUP);
""", """  // tail_split: a 1-D grid. The first `full` CTAs take a whole key block each (item lin of head_groups' order); the
  // last `rem` items (items % nsm: the last wave's) are cut into `pieces` CTAs each, over parts of their query loop.
  const int n_kb = S / BN, items = n_kb * kv_heads, rem = pieces > 1 ? items % nsm : 0, full = items - rem;
  const int bx = static_cast<int>(blockIdx.x);
  const int lin = bx < full ? bx : full + (bx - full) / pieces;
  const int piece = bx < full ? -1 : (bx - full) % pieces;  // -1: a whole key block
  const int grp = lin / (HEAD_GROUP * n_kb), in_grp = lin % (HEAD_GROUP * n_kb);
  const int g_heads = min(HEAD_GROUP, kv_heads - grp * HEAD_GROUP);
""")

RANGE = ("""  const int n_iter = heads * per_head;
""", """  const int n_iter = heads * per_head;
  // tail_split: this CTA's part of the key block's query loop (iterations it_lo .. it_hi - 1)
  const int it_lo = piece < 0 ? 0 : piece * n_iter / pieces, it_hi = piece < 0 ? n_iter : (piece + 1) * n_iter / pieces;
""")

PRODUCER = ("""      for (int it = 0; it < n_iter; ++it) {
        const int st = it % Stages<HD>::N;
        const uint32_t ph = (it / Stages<HD>::N) & 1;
""", """      for (int it = it_lo; it < it_hi; ++it) {  // tail_split: the ring counts from the CTA's first iteration
        const int st = (it - it_lo) % Stages<HD>::N;
        const uint32_t ph = ((it - it_lo) / Stages<HD>::N) & 1;
""")

# st_ahead's first S^T and block loop of the 128-wide kernels, quoted from the variant that wrote it
_LOOP_AT = ST_AHEAD_LOOP_NEW.index("      mbar_wait(&fullQ[0], 0);")
_LOOP_TO = ST_AHEAD_LOOP_NEW.index("(it, it + 1 < n_iter, q0,") + len("(it, it + 1 < n_iter, q0,")
CONSUMER_128 = (ST_AHEAD_LOOP_NEW[_LOOP_AT:_LOOP_TO], """      if (it_lo < it_hi) {  // tail_split: a piece of a short causal key block may have no query block
        mbar_wait(&fullQ[0], 0);
        wgmma_fence();
        issue_nt<HD, 64, KD>(s, sK + c * 64 * 128, sQ);  // S^T of the first block
        wgmma_commit();
      }
      for (int it = it_lo; it < it_hi; ++it) {
        const int head = (GQA ? bkv * group : bkv) + it / per_head;
        const int q0 = (q_first + it % per_head) * QR;
        consumer_block_pf<HD, CAUSAL, KD>(it - it_lo, it + 1 < it_hi, q0,""")

# the same on late_d96's 128-wide loop (the D = 96 entry points' dq_late block and dead causal block): the dead block
# is consumer 1's first block of the key block, so only a piece that starts the block (it_lo = 0) has it
CONSUMER_128_LATE = [
    ("      if (!(LATE && CAUSAL) || c == 0) {  // D = 96 causal: consumer 1's first block is dead",
     "      // D = 96 causal: consumer 1's first block is dead (tail_split: only in the piece that starts the key block;\n"
     "      // a piece of a short causal key block may have no query block)\n"
     "      if ((!(LATE && CAUSAL) || c == 0 || it_lo > 0) && it_lo < it_hi) {"),
    ("      int it = 0;\n", "      int it = it_lo;\n"),
    ("        if (c == 1 && n_iter > 0) {  // the first block (q0 = key0) sees none of consumer 1's keys",
     "        if (c == 1 && it_lo == 0 && it_hi > 0) {  // the first block (q0 = key0) sees none of consumer 1's keys"),
    ("consumer_block_dead<HD, CAUSAL, KD>(n_iter > 1, q_first * QR,", "consumer_block_dead<HD, CAUSAL, KD>(it_hi > 1, q_first * QR,"),
    ("      for (; it < n_iter; ++it) {", "      for (; it < it_hi; ++it) {"),
    ("consumer_block_late<HD, CAUSAL, KD>(it, it + 1 < n_iter, q0,", "consumer_block_late<HD, CAUSAL, KD>(it - it_lo, it + 1 < it_hi, q0,"),
    ("consumer_block_pf<HD, CAUSAL, KD>(it, it + 1 < n_iter, q0,", "consumer_block_pf<HD, CAUSAL, KD>(it - it_lo, it + 1 < it_hi, q0,"),
]

CONSUMER_64 = ("""    for (int it = 0; it < n_iter; ++it) {
      const int st = it % Stages<HD>::N;
      const int head = (GQA ? bkv * group : bkv) + it / per_head;
      const int q0 = (q_first + it % per_head) * QR;
      consumer_block<HD, CAUSAL, KD>(it, q0,""", """    for (int it = it_lo; it < it_hi; ++it) {
      const int st = (it - it_lo) % Stages<HD>::N;
      const int head = (GQA ? bkv * group : bkv) + it / per_head;
      const int q0 = (q_first + it % per_head) * QR;
      consumer_block<HD, CAUSAL, KD>(it - it_lo, q0,""")

EPILOGUE = ("""    const size_t row0 = kv_row + key0 + 64 * c + r;
    store_rows16(dV, dv, 1.f, row0, D, lane);""", """    const size_t row0 = kv_row + key0 + 64 * c + r;
    if (piece >= 0) {  // tail_split: this piece's partials out; the key block's last piece adds the others'
      // the last-piece flag in the mbarriers' spare bytes of the dynamic area: a static __shared__ int would add 1 KB
      // (the dynamic area is 1024-aligned) that the 128-wide kernels' 226.75 KB leave no room for
      volatile int& last_piece = *reinterpret_cast<volatile int*>(empty + Stages<HD>::N);
      constexpr size_t PIECE = 256 * 128;  // one piece's partials: 128 floats per consumer thread
      float* parts = tail_part + static_cast<size_t>(lin - full) * pieces * PIECE + (threadIdx.x - 128) * 128;
      float* mine = parts + piece * PIECE;
#pragma unroll
      for (int i = 0; i < HD / 2; i += 4) {
        *reinterpret_cast<float4*>(mine + i) = make_float4(dv[i], dv[i + 1], dv[i + 2], dv[i + 3]);
        *reinterpret_cast<float4*>(mine + 64 + i) = make_float4(dk[i], dk[i + 1], dk[i + 2], dk[i + 3]);
      }
""" + count_in("named_barrier_sync(6, 256)", "lin - full") + """      for (int p = 0; p < pieces; ++p) {
        if (p == piece) continue;
        const float* other = parts + p * PIECE;
#pragma unroll
        for (int i = 0; i < HD / 2; i += 4) {
          const float4 v = __ldcg(reinterpret_cast<const float4*>(other + i));  // past L1: another SM wrote it
          const float4 k = __ldcg(reinterpret_cast<const float4*>(other + 64 + i));
          dv[i] += v.x, dv[i + 1] += v.y, dv[i + 2] += v.z, dv[i + 3] += v.w;
          dk[i] += k.x, dk[i + 1] += k.y, dk[i + 2] += k.z, dk[i + 3] += k.w;
        }
      }
    }
    store_rows16(dV, dv, 1.f, row0, D, lane);""")


def on_late_d96(text: str) -> bool:
    """Whether `text`'s 128-wide consumer loop is late_d96's (else st_ahead's, as pre_plain has it)."""
    return "consumer_block_late<" in text


def tail_split(text: str, pieces: int = PIECES) -> str:
    """`text` (pre_plain+head_groups' or late_d96+head_groups') with the last wave's key blocks cut into `pieces` CTAs
    each."""
    n_entries = text.count('extern "C" __global__ void __launch_bounds__(384, 1) attn_bwd_wgmma')
    text = apply_edits(text, [ENTRY_PARAMS, ENTRY_CALLS], "tail_split", count=n_entries)
    consumer = CONSUMER_128_LATE if on_late_d96(text) else [CONSUMER_128]
    return apply_edits(text, plan_edits(pieces) + [TEMPLATE_PARAMS, DECODE, RANGE, PRODUCER, *consumer, CONSUMER_64,
                                                   EPILOGUE], "tail_split")


def tail_whole(text: str) -> str:
    """tail_split's device code launched with one piece per key block: its 1-D grid and code paths, no block cut (the
    control that tells the split's worth from what its code costs)."""
    return tail_split(text, pieces=1)


# grid_1d: pre_plain+head_groups with only its grid made 1-D (the same CTA -> key block map, the head count read from
# the grid's size): the second control, which tells what the 1-D grid costs from what tail_split's code costs
GRID_1D = [
    (GRID_2D, 'grid = ["cdiv(S, 128) * (B * H)"]  # grid_1d: the key blocks of one head side by side, in one dimension'),
    (DECODE[0], """  // grid_1d: a 1-D grid of every key block (n_kb per head), in head_groups' order
  const int n_kb = S / BN, lin = static_cast<int>(blockIdx.x);
  const int grp = lin / (HEAD_GROUP * n_kb), in_grp = lin % (HEAD_GROUP * n_kb);
  const int g_heads = min(HEAD_GROUP, static_cast<int>(gridDim.x) / n_kb - grp * HEAD_GROUP);
"""),
]


def grid_1d(text: str) -> str:
    """`text` (pre_plain+head_groups') launched on a 1-D grid, nothing else changed."""
    return apply_edits(text, GRID_1D, "grid_1d")
