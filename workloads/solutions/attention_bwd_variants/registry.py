"""The registry: every variant by name (VARIANTS: name -> its build from the checked-in text; most are built on
another variant, `_on`) and variant_text, which renders a variant, alone or in a launch order of ORDERS."""
from __future__ import annotations

from .block_d96 import D96_ENTRIES, D96_KSTEPS, STACK_D96
from .block_causal_skip import CAUSAL_SKIP, CAUSAL_SKIP_PLAIN
from .block_ds_stmatrix import DS_STMATRIX
from .block_stats_wide import STATS_WIDE
from .block_on_st_ahead import DQ_STATIC, DV_EARLY, UNIFORM_C
from .block_q128_d64 import Q128_D64
from .block_st_ahead import ST_AHEAD
from .block_wide_epilogue import WIDE_EPILOGUE
from .dq_bulk import BULK_DQ_D64, bulk_dq, bulk_dq_s3
from .dq_decoupled import decoupled
from .dq_late import DQ_LATE
from .late_d96 import late_d96
from .dq_writer import dq_writer
from .writer_d96 import WRITER_D96
from .pair_d64 import PAIR_D64
from .regs_d64 import PAIR_D64_R40
from .dq_own_keys import OWN_KEYS, OWN_KEYS_S3
from .pre_wide import PRE_GRID, pre_wide
from .dq_tiles import DQ_TILES
from .edits import REFERENCE, apply_edits
from .launch_orders import ORDERS


def _on(base: str, name: str, what: str, edits: list[tuple[str, str]]):
    """A variant built on variant `base`: its edits, and its header naming it, what it adds and its base."""
    header = (f"// VARIANT {base} (attention_bwd_variants.py)",
              f"// VARIANT {name} (attention_bwd_variants.py): {base} with {what};\n// {base}")
    return lambda text: apply_edits(VARIANTS[base](text), edits + [header], name)


VARIANTS = {
    "bulk_dq": bulk_dq,
    "bulk_dq_s3": bulk_dq_s3,
    "decoupled": decoupled,
    "bulk_dq_d64": _on("bulk_dq_s3", "bulk_dq_d64", "D = 64's dQ by bulk reductions too", BULK_DQ_D64),
    "own_keys": _on("dq_tiles", "own_keys", "every consumer's dQ over its own keys and all columns: the consumers "
                    "never meet", OWN_KEYS),
    "q128_d64": _on("dq_tiles", "q128_d64", "128 query rows per iteration at D = 64, each consumer's dQ over all keys for "
                    "its own 64 rows", Q128_D64),
    "tiles_stack": _on("q128_d64", "tiles_stack", "D = 96's S^T / dP^T over its own columns and the 16-byte dK / dV "
                       "epilogue (q128_d64 + d96_ksteps + dq_tiles_wide)", STACK_D96 + WIDE_EPILOGUE),
    "tiles_d96": _on("q128_d64", "tiles_d96", "D = 96's S^T / dP^T over its own columns in entry points of its own and "
                     "the 16-byte dK / dV epilogue (tiles_stack without the per-block branch)", D96_ENTRIES + WIDE_EPILOGUE),
    "st_ahead": _on("tiles_d96", "st_ahead", "each 128-wide block's S^T issued by the block before it, behind its dQ "
                    "product", ST_AHEAD),
    "dv_early": _on("st_ahead", "dv_early", "dV issued right after the exponentials, before dP^T is waited for",
                    DV_EARLY),
    # st_static (the reference): dq_static's stores and the uniform index on st_ahead's order (dV after dS, fp32 P^T)
    "st_uniform": _on("st_ahead", "st_uniform", "the consumer index made warp-uniform for ptxas", UNIFORM_C),
    "st_static": _on("st_uniform", "st_static", "the dQ tile's width known to ptxas in the 128-wide block", DQ_STATIC),
    "ds_stmatrix": _on("st_static", "ds_stmatrix", "the 128-wide block's dS^T tile written by stmatrix.x4 (a quarter of "
                       "the shared-memory store instructions)", DS_STMATRIX),
    # on ds_stmatrix without stats_wide's layout or dq_late (each slower at D = 128 on the H200, attention_bwd.md v21)
    "pre_plain": lambda text: pre_wide(_on(
        "ds_stmatrix", "pre_plain", "pre_wide's preprocess (16-byte accesses, 16 lanes a row, four rows a warp) writing "
        "L2 / Dr row by row", [PRE_GRID])(text), stats_layout=False),
    "skip_plain": _on("pre_plain", "skip_plain", "causal_skip's dead block without dq_late (consumer 1's first block of "
                      "each causal key block: only its dQ products over consumer 0's keys, its tile sent by itself)",
                      CAUSAL_SKIP_PLAIN),
    "late_d96": lambda text: late_d96(_on(
        "pre_plain", "late_d96", "dq_late's block and causal_skip's dead block in the D = 96 entry points only", [])(text)),
    # late_d96 with the 128-wide block's dQ tiles reduced by a warp of the producer warpgroup
    "dq_writer": lambda text: dq_writer(_on(
        "late_d96", "dq_writer", "the 128-wide block's dQ tiles reduced by a writer warp of the producer warpgroup "
        "(the consumers arrive and go on)", [])(text)),
    # dq_writer with the writer warp in the D = 96 kernels too (the reference)
    "writer_d96": _on("dq_writer", "writer_d96", "the writer warp reducing the D = 96 kernels' dQ tiles too (their "
                      "blocks publish as the 128-wide one does)", WRITER_D96),
    # writer_d96 with two writer warps in the D = 64 kernels, one per consumer
    "pair_d64": _on("writer_d96", "pair_d64", "two writer warps in the D = 64 kernels, warp 1 + c reducing consumer "
                    "c's dQ tiles (the 128-wide kernels keep one for both)", PAIR_D64),
    # pair_d64 with the D = 64 kernels' registers split 40 / 232, the writers' warpgroup at 40 (the reference);
    # pair_causal (the writers in the causal D = 64 kernel only) and pair_causal_r40 (that kernel at 40 / 232) measured
    # slower or level against it and were deleted (attention_bwd.md "v32 measured")
    "pair_d64_r40": _on("pair_d64", "pair_d64_r40", "the D = 64 kernels' registers split 40 / 232 (the writers' "
                        "warpgroup at 40)", PAIR_D64_R40),
    # the rotated non-causal walk (rotate_d64 on writer_d96, pair_rotate on pair_d64: each CTA from its own key block's
    # query block) measured +4.0% / level at D = 64 and was deleted, with rotate_all, its 128-wide extension
    # (attention_bwd.md "v31 measured")
    # writer_all (the writer warp in the D = 64 kernels too) and writer_exit (its last wait for reads only) measured
    # +1.3% / level and were deleted (attention_bwd.md "v28 measured"); writer_pair (two writer warps, one per consumer,
    # in the 128-wide kernels) level, -0.4 to +0.5%, and deleted ("v29 measured")
    # the stack on ds_stmatrix: stats_wide -> pre_wide -> dq_late -> causal_skip
    "stats_wide": _on("ds_stmatrix", "stats_wide", "L2 and Dr in 16-byte loads from a layout the preprocess writes for "
                      "them (four ld.shared.v4 per array and block instead of eight ld.shared.v2)", STATS_WIDE),
    "pre_wide": lambda text: pre_wide(_on(
        "stats_wide", "pre_wide", "the preprocess in 16-byte accesses, 16 lanes a row and four rows a warp (64 bytes in "
        "flight per thread)", [PRE_GRID])(text)),
    "dq_late": _on("pre_wide", "dq_late", "the dQ tile published by the next block's dS^T fence and barrier, its "
                   "reduce-add issued after them (one fence and its wait fewer per block)", DQ_LATE),
    "causal_skip": _on("dq_late", "causal_skip", "the causal block no query row sees skipped (consumer 1's first block "
                       "of each key block: no S^T, dP^T, exponentials, dV / dK or dS^T rows; that block's dQ products "
                       "over consumer 0's keys)", CAUSAL_SKIP),
    "dq_static": _on("dv_uniform", "dq_static", "the dQ tile's width known to ptxas in the 128-wide block (no branch "
                     "and no address recomputed per store)", DQ_STATIC),
    "dv_uniform": _on("dv_early", "dv_uniform", "the consumer index made warp-uniform for ptxas (descriptors in "
                      "uniform registers)", UNIFORM_C),
    "d96_ksteps": _on("dq_tiles", "d96_ksteps", "S^T and dP^T over D = 96's own columns (6 k16 steps, not 8)",
                      D96_KSTEPS),
    "dq_tiles_wide": _on("dq_tiles", "dq_tiles_wide", "the dK / dV epilogue in 16-byte stores (a quad's 4 x 4 "
                         "transpose by shuffles)", WIDE_EPILOGUE),
    "own_keys_wide": _on("own_keys", "own_keys_wide", "the dK / dV epilogue in 16-byte stores (a quad's 4 x 4 "
                         "transpose by shuffles)", WIDE_EPILOGUE),
    "own_keys_s3": _on("own_keys", "own_keys_s3", "the 3-deep ring, dQ leaving through one tile a column half at a "
                       "time", OWN_KEYS_S3),
    "dq_tiles": _on("bulk_dq_d64", "dq_tiles", "each consumer's dQ tile reduced on its own, swizzled, in dQacc's "
                    "layout", DQ_TILES),
}


def variant_text(name: str) -> str:
    """The solution text of variant `name` (the reference's plan lines, so fast_backward applies to it).
    `X+order`: variant X (or `checked-in`, the file itself) launched in one of ORDERS."""
    base, _, order = name.partition("+")
    if order:
        if order not in ORDERS:
            raise KeyError(f"no launch order {order!r}; there are {', '.join(ORDERS)}")
        text = REFERENCE.read_text(encoding="utf-8") if base == "checked-in" else variant_text(base)
        edits, what = ORDERS[order]
        return f"// + {order} (attention_bwd_variants.py): {what}.\n" + apply_edits(text, edits, name)
    if name not in VARIANTS:
        raise KeyError(f"no variant {name!r}; there are {', '.join(VARIANTS)}")
    return VARIANTS[name](REFERENCE.read_text(encoding="utf-8"))
