"""The Hopper wgmma + TMA attention backward (attention_bwd_wgmma.cu) for each backward workload it covers.

The checked-in file's plan is the D = 128, non-causal, non-GQA one; a variant is that file with a few plan
lines changed (the entry point, shared memory for D = 64, and for GQA the grid over KV heads, the group
argument and the K / V tensor maps over B * HKV * S rows); the device code is the file's, byte for byte.
Head dims: 64 (its own entry points) and 96 or 128 (the D = 128 kernels; TMA zero-fills the columns past D; a file
with attn_bwd_wgmma_d96 entry points runs D = 96 through them).

The reference (what builtin/reference submits, `reference_backward`) is the fastest built version measured on the
H200 whose dQ holds the harness's rule on every input set, `REFERENCE_VARIANT` of attention_bwd_variants/ (dQ by
each consumer's own bulk reduce-add from a swizzled shared-memory tile whose stores the compiler sees straight, a
3-deep Q / dO ring for the 128-wide kernels, 128 query rows a block at D = 64, D = 96's S^T and dP^T over its own 96
columns in entry points of its own, dK / dV in 16-byte stores, each 128-wide block's S^T issued by the block before
it behind its dQ product, a warp-uniform consumer index in the 128-wide kernels, the dS^T tile by stmatrix, a
preprocess in 16-byte accesses, the key blocks of 4 heads launched side by side, at D = 96 only the dQ tile
published by the next block's barrier and the causal block no query row sees skipped, and in the 128-wide kernels the
dQ tiles reduced by a writer warp of the producer warpgroup (FlashAttention-3's), at D = 96 too, and in the D = 64
kernels by a writer warp per consumer, their warpgroup at 40 registers: 1.069x cuDNN at D = 128, 1.064x causal,
1.163x / 1.159x at D = 96, 1.127x GQA, 1.090x / 1.137x at D = 64, against the checked-in file's 0.503x and 0.483x,
bench/results/attention_bwd.md "v22", "v23 measured", "v26-v27 measured", "v28 measured", "v32 measured"); the checked-in file is the plainest fast version, the
one every variant is an edit of, and the tuner's weak start.
"""
from __future__ import annotations

import re

from ..schema import Workload
from .attention import HERE, plan_edits

FAST_BACKWARD = "attention_bwd_wgmma.cu"
HEAD_DIMS = (64, 96, 128)
REFERENCE_VARIANT = "pair_d64_r40+head_groups"
SMEM_D64 = 'smem = "1024 + 16384 * 2 + 2 * (8192 * 2 + 512) + 16384 * 2 + 256"'


def backward_entry_point(head_dim: int, causal: bool, gqa: bool, text: str = "") -> str:
    """The main kernel's entry point for a problem. D = 96 runs the 128-wide kernels, through entry points of its
    own (attn_bwd_wgmma_d96...) where the file `text` has them."""
    d96 = head_dim == 96 and "attn_bwd_wgmma_d96(" in text
    return ("attn_bwd_wgmma" + {64: "_d64", 96: "_d96" if d96 else ""}.get(head_dim, "") + ("_causal" if causal else "")
            + ("_gqa" if gqa else ""))


def covers(workload: Workload) -> str | None:
    """None when the fast backward covers the workload, else the rule it breaks."""
    sym = workload.symbols
    s, d, gqa = int(sym.get("S", 0)), int(sym.get("D", 0)), "HKV" in sym
    if workload.op != "mha_bwd":
        return "not an attention backward"
    if d not in HEAD_DIMS:
        return f"head dim {d} is not one of {HEAD_DIMS}"
    if s <= 0 or s % 128:
        return f"S = {s} is not a multiple of 128"
    if gqa and (workload.causal or int(sym["HKV"]) < 1 or int(sym["H"]) % int(sym["HKV"])):
        return "GQA is covered non-causal with H a multiple of HKV"
    return None


def backward_text(head_dim: int, causal: bool, gqa: bool, base: str | None = None) -> str:
    """The kernel file (`base`, else the checked-in one) with its plan lines for this problem: the entry point, D = 64's
    shared memory, and for GQA the grid over KV heads, the group argument and the K / V maps over B * HKV * S rows."""
    text = base if base is not None else (HERE / FAST_BACKWARD).read_text(encoding="utf-8")
    entry = backward_entry_point(head_dim, causal, gqa, text)
    edits = [('kernel = "attn_bwd_wgmma"', f'kernel = "{entry}"')]
    smem = re.search(r'smem = "[^"]*"', text)
    if head_dim == 64 and not (smem and "D" in smem.group(0)):  # the D = 128 layout's bytes, unless a formula in D
        edits.append((smem.group(0) if smem else "smem = ", SMEM_D64))
    if gqa:  # one CTA per (key block, batch * KV head), the group argument, K / V over B * HKV * S rows
        # the main launch's lines (after its kernel line): every head count there, B * H (the grid in either order),
        # counts KV heads; B * H * S rows stay query rows
        kernel = 'kernel = "attn_bwd_wgmma"\n'
        start = text.index(kernel) + len(kernel)
        main = text[start:text.index("[[launch]]", start)].splitlines()
        heads = [(line, re.sub(r"\bB \* H\b(?! \* S)", "B * HKV", line)) for line in main]
        if not any(line.startswith("grid = ") and new != line for line, new in heads):
            raise ValueError(f"{FAST_BACKWARD}: the plan has no grid over \"B * H\" to change")
        edits += [(line, new) for line, new in heads if new != line]
        edits.append(('"i32:D", "f32:scale"]', '"i32:D", "f32:scale", "i32:H // HKV"]'))
        edits += [(f'tensor = "{t}"\ndims = ["D", "B * H * S"]', f'tensor = "{t}"\ndims = ["D", "B * HKV * S"]')
                  for t in ("K", "V")]
    return plan_edits(text, edits, FAST_BACKWARD)


def fast_backward(workload: Workload, base: str | None = None) -> str | None:
    """The solution text for `workload`, or None where `covers` names a rule it breaks. `base`: another text with
    the same plan lines to edit (a variant of the kernel: attention_bwd_variants/)."""
    if covers(workload) is not None:
        return None
    return backward_text(int(workload.symbols["D"]), bool(workload.causal), "HKV" in workload.symbols, base)


def reference_backward(workload: Workload) -> str | None:
    """What builtin/reference submits for `workload`: REFERENCE_VARIANT with its plan lines (None where not covered)."""
    from .attention_bwd_variants import variant_text

    return fast_backward(workload, variant_text(REFERENCE_VARIANT))
