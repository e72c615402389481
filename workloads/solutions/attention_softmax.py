"""The attention forward template's softmax options, as edits of attention_template.cu.in: rescale="lazy"
(FlashAttention-4's conditional rescale) and early_pack (P packed ahead of the lazy rescale's branch)."""
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
