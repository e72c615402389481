"""The attention forward template's softmax options, as edits of attention_template.cu.in: rescale="lazy"
(FlashAttention-4's conditional rescale), early_pack (P packed ahead of the lazy rescale's branch), split_rows
(each row's max and sum as four independent chains) and split_max (the max alone)."""
from __future__ import annotations

from .template_text import replace_counted


# rescale="lazy": the softmax keeps its running max unless a tile's row max exceeds it by more than LAZY_THRESHOLD
# (log2 units), so P = 2^(S sl2 - m) stays under 2^8 (exact in bf16's range; O, l and the final O / l all use the
# same m, so the result is the same softmax), and a warp whose rows all kept their max skips the O rescale.
LAZY_EDITS = [
    ("  const float n0 = fmaxf(m0, x0 * sl2), n1 = fmaxf(m1, x1 * sl2);  // scale > 0: max commutes with it\n",
     "  constexpr float LAZY_THRESHOLD = 8.f;  // rescale=lazy: P < 2^8, and most tiles leave the max alone\n"
     "  float n0 = fmaxf(m0, x0 * sl2), n1 = fmaxf(m1, x1 * sl2);  // scale > 0: max commutes with it\n"
     "  if (n0 - m0 <= LAZY_THRESHOLD) n0 = m0;  // m = -inf (the first tile): inf > threshold, the max is taken\n"
     "  if (n1 - m1 <= LAZY_THRESHOLD) n1 = m1;\n"),
    ("#pragma unroll\n  for (int i = 0; i < ON / 2; i += 4) {\n    o[i] *= a0;\n",
     "  if (__any_sync(0xffffffffu, a0 != 1.f || a1 != 1.f))  // rescale=lazy: no row of the warp moved its max\n"
     "#pragma unroll\n  for (int i = 0; i < ON / 2; i += 4) {\n    o[i] *= a0;\n"),
]


# early_pack: with the lazy rescale's branch after the wait for the previous P V product, ptxas 13.5 sinks the
# exponentials below that wait (their only use, P's packing, comes after the branch): 11 of 66 run under the product,
# 46 with "always". Packing P right after the wait, ahead of the branch, gives them a use there: 44 of 66
# (tests/workloads/test_attention_lazy_rescale.py counts them), the same instructions otherwise.
EARLY_PACK = [
    ("  if (w.lane == 0) mbar_arrive(&w.emptyV[sp]);\n",
     "  if (w.lane == 0) mbar_arrive(&w.emptyV[sp]);\n  pack_p(s, p);  // early_pack: before the rescale's branch\n"),
    ("    o[i + 3] *= a1;\n  }\n  pack_p(s, p);\n}", "    o[i + 3] *= a1;\n  }\n}"),
]


# With the vote's branch ptxas 13.5 places the wait for the previous P V product ahead of all 64 exponentials
# (cooperative, D = 96 / 128: none run under that product; with "always" 54 of 66 do). The threshold without the
# vote ("lazy_max", O rescaled every tile) kept that overlap and ran 1.3-1.7% slower than "always" on the H200
# (attention_template.md round 6): the skipped O rescale is what makes lazy faster, so lazy_max was deleted.
def lazy_rescale(body: str) -> str:
    for old, new in LAZY_EDITS:
        body = replace_counted(body, old, new, "attention_template.cu.in (rescale=lazy)")
    return body


# split_rows: the profile of the reference (attention_template.md, 2026-12-01) has "wait" (a fixed-latency dependency)
# as the top stall at the row max (5.6% of samples) and the row sum (4.1%) besides the exponentials (14%): each row's
# max and sum is one chain of SN / 4 dependent instructions, and a consumer warp shares its SMSP with one other
# consumer warp only, so little hides that latency. Four partial maxima and four partial sums per row, combined by a
# two-level tree, cut each chain to SN / 16 + 2. The sum's rounding order changes (fp32, well inside the checks).
SPLIT_ROWS = [
    ("  float x0 = s[0], x1 = s[2];\n#pragma unroll\n  for (int j = 0; j < SN; j += 4) {\n"
     "    x0 = fmaxf(x0, fmaxf(s[j], s[j + 1]));\n    x1 = fmaxf(x1, fmaxf(s[j + 2], s[j + 3]));\n  }\n",
     "  // split_rows: each row's max as four independent chains (4-column group j / 4 goes to chain (j / 4) % 4)\n"
     "  float mx0[4], mx1[4];\n#pragma unroll\n  for (int q = 0; q < 4; ++q) {\n"
     "    mx0[q] = fmaxf(s[4 * q], s[4 * q + 1]);\n    mx1[q] = fmaxf(s[4 * q + 2], s[4 * q + 3]);\n  }\n"
     "#pragma unroll\n  for (int j = 16; j < SN; j += 4) {\n"
     "    mx0[(j / 4) % 4] = fmaxf(mx0[(j / 4) % 4], fmaxf(s[j], s[j + 1]));\n"
     "    mx1[(j / 4) % 4] = fmaxf(mx1[(j / 4) % 4], fmaxf(s[j + 2], s[j + 3]));\n  }\n"
     "  float x0 = fmaxf(fmaxf(mx0[0], mx0[1]), fmaxf(mx0[2], mx0[3]));\n"
     "  float x1 = fmaxf(fmaxf(mx1[0], mx1[1]), fmaxf(mx1[2], mx1[3]));\n"),
    ("  float sum0 = 0.f, sum1 = 0.f;\n", "  float sm0[4] = {0.f, 0.f, 0.f, 0.f}, sm1[4] = {0.f, 0.f, 0.f, 0.f};  // split_rows\n"),
    ("    sum0 += s[j] + s[j + 1];\n    sum1 += s[j + 2] + s[j + 3];\n  }\n",
     "    sm0[(j / 4) % 4] += s[j] + s[j + 1];\n    sm1[(j / 4) % 4] += s[j + 2] + s[j + 3];\n  }\n"
     "  const float sum0 = (sm0[0] + sm0[1]) + (sm0[2] + sm0[3]), sum1 = (sm1[0] + sm1[1]) + (sm1[2] + sm1[3]);\n"),
]


# split_max: split_rows' max chains without its sum chains. With split_rows ptxas 13.5 keeps only 16-20 of the 66
# exponentials under the previous P V product (44 without it: early_pack's overlap), and the split sums are what
# costs it (max alone: 44; sums alone: 23-26). The max chain is the one on the exponentials' critical path (every
# exponential waits for the row max); the sum chain is needed only at the next tile.
SPLIT_MAX = [(old, new.replace("// split_rows: each row's max", "// split_max: each row's max"))
             for old, new in SPLIT_ROWS[:1]]

