"""tail="launch" of the GEMM template: the full waves' tiles in the kernel as it is, the last partial wave's tiles
split by k-blocks over every SM in a second launch of their own (gemm_bf16_tn_tail).

Why a launch of its own: tail="streamk" did the same split inside the one persistent kernel and lost 0.7% on the H200
(gemm_sweep.md) where the count promised about 2-3%; its unit walk and k-range bounds gave the consumers' main loop
another shape (195 SASS lines from the first to the last HGMMA against 93, none in place), the way tail_split's
loop bounds rescheduled the attention backward's loop (attention_bwd.md, "v24 controls"). Here the main kernel keeps
the reference's loop and deferred epilogue (only its tile loop stops at the full waves: dp_end), and the tail kernel
is the stream-K kernel with its walk started past the full waves, so it runs only the tail's k-ranges.
"""
from __future__ import annotations

from .gemm_body import swap

TAIL_KERNEL = "gemm_bf16_tn_tail"

STEP_LINE = "  const int step = PERSISTENT ? gridDim.x / CLUSTER_M : cluster_tiles;  // grid: a multiple of CLUSTER_M\n"
TILE_LOOP = "for (int ct = first; ct < cluster_tiles; ct += step) {"


def main_body(body: str) -> str:
    """The kernel body (every other option applied) with its tile loops ending at the full waves: the tiles
    dp_end = tiles - tiles % CTAs, what StreamK in the tail kernel counts as its data-parallel part."""
    body = swap(body, STEP_LINE, STEP_LINE + "  const int dp_end = cluster_tiles - cluster_tiles % step;  // tail='launch': "
                "the full waves' tiles (the rest: " + TAIL_KERNEL + ")\n")
    return swap(body, TILE_LOOP, "for (int ct = first; ct < dp_end; ct += step) {", count=2)


def tail_kernel_text(streamk_body_text: str) -> str:
    """The stream-K body's helpers and kernel (from STREAMK_HELPERS on; the helpers before them are the main body's),
    the kernel renamed and its walk started past the full waves' tiles, so each CTA runs only its tail k-range."""
    text = streamk_body_text[streamk_body_text.index("// ---- Stream-K tail"):]
    text = swap(text, 'extern "C" __global__ void __launch_bounds__(NTHREADS, 1)\ngemm_bf16_tn(',
                'extern "C" __global__ void __launch_bounds__(NTHREADS, 1)\n' + TAIL_KERNEL + "(")
    return swap(text, "for (int ct = first, it = sk.begin(blockIdx.x),",
                "for (int ct = sk.dp_tiles, it = sk.begin(blockIdx.x),", count=2)
