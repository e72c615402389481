"""tail_kernel: tail_split's pieces in a launch of their own, so the whole key blocks run the reference's main loop.

tail_split cut the last wave's key blocks into pieces inside the one main kernel; its whole blocks ran the same
opcodes as pre_plain's in another schedule, 7-8% slower at D = 64 (attention_bwd.md, "v24 controls"): ptxas
scheduled the block loop anew once its bounds were a piece's or the merge sat in the epilogue. Here the template
takes `TAIL`: the main launch (TAIL = false) takes the first `full` key blocks of head_groups' order on a 1-D grid
(grid_1d: level with pre_plain) and its loop bounds and epilogue fold to pre_plain's; a second launch of twin entry
points (`..._tail`, TAIL = true) takes the last `rem` (items % num_sms: what the last wave would hold) in `pieces` CTAs
each, with tail_split's partials, count-in and merge. Where the problem has fewer key blocks than SMs (the smoke
workloads) every block is cut and the main launch's one CTA returns at once; where items % num_sms is 0 the tail
launch's one CTA does.
"""
from __future__ import annotations

import re

from ..tail_pieces import PIECES
from .edits import apply_edits
from .tail_split import DECODE as SPLIT_DECODE, on_late_d96, tail_split

ITEMS = "cdiv(S, 128) * (B * H)"

TEMPLATE = ("template <int HD, bool CAUSAL, bool GQA, int KD = HD>  // KD: S^T / dP^T's d extent (96 in D = 96's entries)",
            "template <int HD, bool CAUSAL, bool GQA, int KD = HD, bool TAIL = false>  // KD: S^T / dP^T's d extent (96 "
            "in D = 96's entries);\n// TAIL: the tail launch's pieces (tail_kernel), else the main launch's whole blocks")

DECODE = (SPLIT_DECODE[1], """  // tail_kernel: a 1-D grid per launch. The main launch (TAIL = false) takes the first `full` items of head_groups'
  // order whole; the tail launch cuts the last `rem` (items % nsm: the last wave's) into `pieces` CTAs each.
  const int n_kb = S / BN, items = n_kb * kv_heads, rem = items % nsm, full = items - rem;
  const int bx = static_cast<int>(blockIdx.x);
  if (TAIL ? bx >= rem * pieces : bx >= full) return;  // the one CTA of a launch with nothing to do
  const int lin = TAIL ? full + bx / pieces : bx;
  const int piece = TAIL ? bx % pieces : -1;  // -1: a whole key block
  const int grp = lin / (HEAD_GROUP * n_kb), in_grp = lin % (HEAD_GROUP * n_kb);
  const int g_heads = min(HEAD_GROUP, kv_heads - grp * HEAD_GROUP);
""")

# the main launch issues its first S^T as its base does (only a causal piece can be empty): st_ahead's loop, or
# late_d96's, which keeps its dead causal block's guard
FIRST_ST = ("      if (it_lo < it_hi) {  // tail_split: a piece of a short causal key block may have no query block",
            "      if (!TAIL || it_lo < it_hi) {  // tail_split: a piece of a short causal key block may have no query "
            "block")
FIRST_ST_LATE = ("      if ((!(LATE && CAUSAL) || c == 0 || it_lo > 0) && it_lo < it_hi) {",
                 "      if ((!(LATE && CAUSAL) || c == 0 || it_lo > 0) && (!TAIL || it_lo < it_hi)) {")

_ENTRY = re.compile(r'extern "C" __global__ void __launch_bounds__\(384, 1\) (attn_bwd_wgmma\w*)\(.*?\n}\n', re.S)
_CALL = re.compile(r"attn_bwd<(\d+), (true|false), (true|false)(?:, (\d+))?>\(")


def _tail_twin(entry: str) -> str:
    """The entry point `entry` (its whole definition) as its tail twin: name + _tail, attn_bwd<..., TAIL = true>."""
    name = _ENTRY.match(entry).group(1)
    call = _CALL.search(entry)
    hd, causal, gqa, kd = call.group(1), call.group(2), call.group(3), call.group(4) or call.group(1)
    twin = entry.replace(f" {name}(", f" {name}_tail(", 1)
    return twin.replace(call.group(0), f"attn_bwd<{hd}, {causal}, {gqa}, {kd}, true>(", 1)


def _plan(text: str, pieces: int) -> str:
    """The main launch over the whole key blocks, then the tail launch (the same lines, its own grid and kernel)."""
    start = text.index('[[launch]]\nkernel = "attn_bwd_wgmma"\n')
    end = text.index("[[launch]]", start + 1)
    main = text[start:end]
    grid = re.search(r"grid = \[.*\n", main).group(0)
    whole = main.replace(grid, f'grid = ["max({ITEMS} - {ITEMS} % num_sms, 1)"]  # tail_kernel: the whole key blocks '
                               "(one CTA at least)\n")
    tail = main.replace('kernel = "attn_bwd_wgmma"', 'kernel = "attn_bwd_wgmma_tail"').replace(
        grid, f'grid = ["max({ITEMS} % num_sms * {pieces}, 1)"]  # tail_kernel: the last wave\'s key blocks in '
              f"{pieces} pieces each (one CTA at least)\n")
    return text[:start] + whole + tail + text[end:]


def tail_kernel(text: str, pieces: int = PIECES) -> str:
    """`text` (late_d96+head_groups', the reference's, or pre_plain+head_groups') with the last wave's key blocks cut
    into `pieces` CTAs each, in a launch of their own."""
    text = tail_split(text, pieces)
    text = apply_edits(text, [TEMPLATE, DECODE, FIRST_ST_LATE if on_late_d96(text) else FIRST_ST], "tail_kernel")
    entries = [m.group(0) for m in _ENTRY.finditer(text)]
    if not entries:
        raise ValueError("tail_kernel: no attn_bwd_wgmma entry point")
    last = entries[-1]
    at = text.index(last) + len(last)
    text = text[:at] + "\n".join(_tail_twin(e) for e in entries) + text[at:]
    return _plan(text, pieces)
