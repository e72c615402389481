"""exp_poly (on late_d96): one exponential in 8 of the consumers' P^T computed on the FMA pipe by the forward's
ex2_fma (2^n times a cubic in the fraction: workloads/solutions/attention_softmax.py), in every block that has them:
the 128-wide one, late_d96's D = 96 copy of it, and D = 64's. The backward's profile has its exponentials at 7% of the
stall samples (attention_bwd.md, "The reference again, with its profile"), half the forward's share."""
from __future__ import annotations

from ..attention_softmax import EXP_FMA_EDIT
from .edits import apply_edits

WIDE = "      float x = ex2(fmaf(s[j], sl2, -(k % 2 ? l2.y : l2.x)));\n"  # the 128-wide block and late_d96's copy
NARROW = "    float e = ex2(fmaf(s[j], sl2, -(j % 2 ? l2[j / 4].y : l2[j / 4].x)));\n"  # D = 64's block


def _one_in_8(line: str, var: str) -> str:
    arg = line[line.index("ex2(") + 4:line.rindex(");")]
    indent = line[:len(line) - len(line.lstrip())]
    return f"{indent}float {var} = j % 8 == 0 ? ex2_fma({arg}) : ex2({arg});  // exp_poly\n"


def exp_poly(text: str) -> str:
    text = apply_edits(text, [EXP_FMA_EDIT], "exp_poly")
    text = apply_edits(text, [(WIDE, _one_in_8(WIDE, "x"))], "exp_poly", count=2)
    return apply_edits(text, [(NARROW, _one_in_8(NARROW, "e"))], "exp_poly")
