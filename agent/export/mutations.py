"""Bug injection: named classes of broken Hopper kernels, made from correct ones by small text edits.

Each mutation is a bug a Hopper kernel engineer would recognise, with the failure classes it is
expected to produce. Patterns cover both the wrapper-header idioms (prompts/include/ptxbench/*.cuh)
and raw PTX spellings; a mutation that finds nothing to change in a kernel does not apply to it.
Whether a variant is really broken is decided by evaluating it (synth.py), never assumed.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Mutation:
    name: str
    description: str
    expected: tuple[str, ...]
    pattern: str
    replacement: str | Callable[[re.Match], str]
    count: int = 0  # 0: every match; n: the first n
    requires: str = ""  # a pattern the kernel must also hold (e.g. a causal entry point in its plan)

    def apply(self, source: str) -> str | None:
        if self.requires and not re.search(self.requires, source, flags=re.M):
            return None
        out, n = re.subn(self.pattern, self.replacement, source, count=self.count, flags=re.M)
        return out if n and out != source else None


WRONG = ("INCORRECT_NUMERICAL", "INCORRECT_NAN")
HANG_OR_WRONG = ("TIMEOUT", "INCORRECT_NUMERICAL", "INCORRECT_NAN", "RUNTIME_ERROR")

MUTATIONS: list[Mutation] = [
    Mutation("missing_wgmma_fence",
             "wgmma.fence removed before the first wgmma of a k-step: accumulator and shared-memory writes are not ordered "
             "with the asynchronous MMA",
             WRONG, r"^[ \t]*(?:wgmma_fence\(\);|wgmma\.fence\.sync\.aligned;)[ \t]*\n", ""),
    Mutation("missing_fence_proxy_async",
             "fence.proxy.async removed after generic-proxy shared-memory stores that the async proxy (TMA store / wgmma) reads",
             WRONG, r"^[ \t]*(?:fence_proxy_async\(\);|fence\.proxy\.async(?:\.shared::cta)?;)[ \t]*\n", ""),
    Mutation("wait_group_too_little",
             "wgmma.wait_group before the epilogue waits for too little (1 instead of 0): accumulators are read while the "
             "last MMA group is still in flight",
             WRONG, r"wgmma_wait<0>\(\);|wgmma\.wait_group\.sync\.aligned 0;", lambda m: m.group(0).replace("0", "1"), 1),
    Mutation("wrong_desc_k_step",
             "wrong shared-memory descriptor advance along K inside the 128B swizzle atom (64 bytes per k16 step instead of 32)",
             WRONG, r"(\bd[ab]) \+ 2 \* kk\b", r"\1 + 4 * kk"),
    Mutation("wrong_swizzle",
             "the TMA map's swizzle (64B) no longer matches the 128B swizzle the wgmma descriptors assume "
             "(the plan check refuses a 128-byte inner box under a 64B swizzle before anything runs)",
             WRONG + ("PLAN_ERROR",), r'(swizzle\s*=\s*)"128B"', r'\1"64B"', 1),
    Mutation("mbarrier_phase_error",
             "consumers wait on the full barrier with the wrong parity, so they read a stage before its TMA load landed",
             HANG_OR_WRONG, r"mbar_wait\(&full\[stage\], phase\)", "mbar_wait(&full[stage], phase ^ 1)"),
    Mutation("expect_tx_mismatch",
             "mbarrier expect-tx byte count is smaller than what the TMA loads deliver (the transaction count underflows)",
             HANG_OR_WRONG, r"mbar_arrive_expect_tx\(&full\[stage\], STAGE_BYTES\)",
             "mbar_arrive_expect_tx(&full[stage], STAGE_BYTES - 1024)"),
    Mutation("off_by_one_k_tiles",
             "off-by-one tile bound: the K loop drops its last tile (floor instead of ceiling division, minus one)",
             WRONG, r"const int k_iters = \(K \+ BK - 1\) / BK;", "const int k_iters = (K + BK - 1) / BK - 1;"),
    Mutation("off_by_one_n_tiles",
             "off-by-one tile bound: the last column of tiles is never computed",
             WRONG, r"const int tiles_n = \(N \+ BN - 1\) / BN;", "const int tiles_n = (N + BN - 1) / BN - 1;"),
    Mutation("accumulator_not_zeroed",
             "the first wgmma of a tile accumulates into uninitialised registers (scale-d stays 1)",
             WRONG, r"\(k \| kc \| kk\) != 0", "true"),
    Mutation("wrong_softmax_scale",
             "softmax scale applied as 1/D instead of 1/sqrt(D)",
             WRONG, r'"f32:scale"', '"f32:scale * scale"'),
    Mutation("missing_causal_mask",
             "the causal mask is never applied: the plan's last argument, the causal flag of the reference attention "
             "kernels, is passed as 0",
             WRONG, r'"i32:1"\]([ \t]*)$', r'"i32:0"]\1'),
    # The wgmma attention forward's own bug classes (register-sourced P, N-major V, quad-owned softmax rows).
    Mutation("pv_operand_not_transposed",
             "O += P V reads V (stored [keys, d], N-major) without imm-trans-b, so the wgmma takes it as K-major",
             WRONG, r"(\}, %\d+, p, 1, 1, )1;", r"\g<1>0;"),
    Mutation("softmax_max_not_reduced",
             "the row max is reduced over 2 of the 4 threads that share a row (shfl.xor 2 dropped): the quad's "
             "probabilities are scaled by different maxima and summed into one output row",
             WRONG, r"^[ \t]*(\w+) = fmaxf\(\1, __shfl_xor_sync\([^;]*, 2\)\);[ \t]*\n", ""),
    Mutation("row_sum_not_reduced",
             "the softmax row sum is never reduced over the quad that shares the row: each thread normalises by its "
             "own partial sum",
             WRONG, r"^[ \t]*(\w+) \+= __shfl_xor_sync\([^;]*\);[ \t]*\n", ""),
    # The knowledge pack's pipeline rules (prompts/knowledge_sm90a.md, "Pipelines, clusters and multicast"),
    # one class per rule a model can break (issue 17); bench/check_mutations.py runs them on the GPU.
    Mutation("producer_start_parity",
             "the producer waits on its empty barriers with parity `phase` (0 on the first pass) instead of "
             "`phase ^ 1`: a fresh barrier has not completed phase 0, so the first wait never returns",
             ("TIMEOUT",), r"(mbar_wait\(&empty\w*\[\w+\], )(\w+) \^ 1\)", r"\1\2)"),
    Mutation("missing_wgmma_fence_regs",
             "the register fences after wgmma waits are removed: nvcc may then move accumulator (and P fragment) "
             "reads or writes across `wgmma.wait_group` (a latent bug: it bites only where nvcc does move them)",
             WRONG, r"^(?:[ \t]*#pragma unroll\n)?[ \t]*(?:for \([^)]*\) )?wgmma_fence_regs\([^;]*\);[ \t]*\n", ""),
    Mutation("named_barrier_count_mismatch",
             "a consumer warpgroup's named barrier is given a count of 256 threads while only its 128 threads "
             "meet there: the barrier never completes",
             ("TIMEOUT",), r"((?:named_barrier_sync\(|bar\.sync )[^,;]+, )128\b", r"\g<1>256"),
    Mutation("named_barrier_shared_id",
             "both consumer warpgroups use named barrier 1 with a count of one warpgroup (128): any 128 arriving "
             "threads release it, so a consumer may store its staging buffer before its own warps wrote it",
             WRONG, r"named_barrier_sync\(1 \+ \w+, 128\)", "named_barrier_sync(1, 128)"),
    Mutation("tmap_row_missing_head_offset",
             "the K / V row coordinate in the [B*H*S, D] tensor-map view leaves out the head's first row "
             "(b*H + h) * S: every (batch, head) attends to the keys and values of batch 0, head 0",
             WRONG, r"(const int row = )kv_row \+ (j \* BN;)", r"\1\2"),
    Mutation("tma_coords_swapped",
             "a TMA load's coordinates are given outermost first (row, column) instead of innermost first: the box "
             "is read from the wrong place and out-of-bounds parts load as zeros",
             WRONG, r"(tma_load_2d\([^;]*?,\s*)([^,;]+?),\s*([^,;()]+?)\);", r"\1\3, \2);", 1),
    Mutation("tmap_view_one_head",
             "the attention tensor maps view Q, K and V as [S, D] (one head) instead of the [B*H*S, D] rows of all "
             "heads: every row past the first head loads as zeros",
             WRONG, r'(dims\s*=\s*\["D",\s*)"B \* H(?:KV)? \* S"\]', r'\1"S"]'),
    # The wgmma attention backward's own bug classes (workloads/solutions/attention_bwd_wgmma.cu, every backward
    # workload's reference); the knowledge pack's backward section teaches the rules they break.
    Mutation("bwd_dpsum_wrong",
             "the preprocess sums dO * dO instead of dO * O for Dr (dPsum): dS = P (dP - Dr) is off in every row, "
             "so dQ and dK are wrong (dV is not)",
             WRONG, r"sum = fmaf\(a\.x, b\.x, fmaf\(a\.y, b\.y, sum\)\);", "sum = fmaf(b.x, b.x, fmaf(b.y, b.y, sum));"),
    Mutation("bwd_lse_wrong_base",
             "the preprocess copies the natural-log LSE into L2 without the log2(e) factor, while P^T is computed with "
             "exp2: every probability is scaled by 2^(LSE (log2 e - 1))",
             WRONG, r"L2\[row\] = LSE\[row\] \* LOG2E;", "L2[row] = LSE[row];"),
    Mutation("bwd_stats_indexed_by_key",
             "L2 and Dr are looked up by the accumulator's row (a key) instead of its column (a query): the code "
             "reads the fragment of P^T as if it were P's",
             WRONG, r"-sL2\[q\]|sDr\[8 \* \(j / 4\) \+ col0 \+ \(j % 2\)\]",
             lambda m: ("-sL2" if m.group(0).startswith("-") else "sDr") + "[r + 8 * ((j / 2) % 2)]"),
    Mutation("bwd_causal_mask_wrong_side",
             "the causal mask zeroes P where key < query instead of key > query in the blocks that cross the diagonal",
             WRONG, r"(\+ 8 \* \(\(j / 2\) % 2\)) > (q0 \+ q\) e = 0\.f;)", r"\1 < \2",
             requires=r'^kernel = "attn_bwd_wgmma\w*_causal"'),
    Mutation("bwd_dk_scale_missing",
             "dK is stored without the softmax scale (dK = dS^T Q instead of scale dS^T Q)",
             WRONG, r"__floats2bfloat162_rn\(dk\[j\] \* scale, dk\[j \+ 1\] \* scale\)",
             "__floats2bfloat162_rn(dk[j], dk[j + 1])"),
    Mutation("bwd_dq_scale_missing",
             "the postprocess converts the fp32 dQ accumulator to bf16 without the softmax scale",
             WRONG, r"(v\.[xz]) \* scale, (v\.[yw]) \* scale", r"\1, \2"),
    Mutation("bwd_dq_plain_store",
             "dQ partials are stored instead of reduce-added: each key block overwrites the others' contributions",
             WRONG, r"atomicAdd\(reinterpret_cast<float2\*>\(dst\), (make_float2\(dq\[j\], dq\[j \+ 1\]\))\);",
             r"*reinterpret_cast<float2*>(dst) = \1;"),
    Mutation("bwd_dq_nonatomic_add",
             "dQ partials are added with a plain load-add-store instead of a reduction: warps and CTAs that add to "
             "the same dQ rows at once lose updates (a race: it bites only where they overlap in time)",
             WRONG, r"^([ \t]*)atomicAdd\(reinterpret_cast<float2\*>\(dst\), make_float2\(dq\[j\], dq\[j \+ 1\]\)\);",
             r"\1dst[0] += dq[j];\n\1dst[1] += dq[j + 1];"),
    Mutation("bwd_ds_single_buffer",
             "the double-buffered dS^T tile becomes one buffer: a consumer writes the next block's dS^T while the other "
             "may still read this one in its dQ product (a race; D = 128 only, where each consumer reads both halves)",
             WRONG, r"uint8_t\* buf = sdS \+ \(it & 1\) \* DS_BYTES;", "uint8_t* buf = sdS;",
             requires=r'^kernel = "attn_bwd_wgmma(?!_d64)'),
    Mutation("bwd_empty_count_mismatch",
             "the empty barriers expect one arrival per consumer thread (256) while one lane per consumer warp (8) "
             "arrives: no stage is ever released, so the producer waits forever once the ring wraps",
             ("TIMEOUT",), r"mbar_init\(&empty\[i\], 8\);.*$", "mbar_init(&empty[i], 256);  // one arrival per consumer thread"),
]
# The classes above that the knowledge pack's pipeline section teaches (bench/check_mutations.py's default).
PIPELINE_CLASSES = ("producer_start_parity", "missing_wgmma_fence_regs", "named_barrier_count_mismatch",
                    "named_barrier_shared_id", "tmap_row_missing_head_offset", "tma_coords_swapped",
                    "tmap_view_one_head")
# The backward's classes, with the generic fence class at the one place the backward needs it (before the dQ
# wgmma reads dS^T written by plain stores); bench/check_mutations.py --backward runs them.
BACKWARD_CLASSES = ("bwd_dpsum_wrong", "bwd_lse_wrong_base", "bwd_stats_indexed_by_key", "bwd_causal_mask_wrong_side",
                    "bwd_dk_scale_missing", "bwd_dq_scale_missing", "bwd_dq_plain_store", "bwd_dq_nonatomic_add",
                    "missing_fence_proxy_async", "bwd_ds_single_buffer", "bwd_empty_count_mismatch")

BY_NAME = {m.name: m for m in MUTATIONS}


def applicable(source: str, names: list[str] | None = None) -> list[tuple[Mutation, str]]:
    """Every (mutation, broken source) pair that changes this kernel."""
    chosen = [BY_NAME[n] for n in names] if names else MUTATIONS
    out = []
    for m in chosen:
        broken = m.apply(source)
        if broken is not None:
            out.append((m, broken))
    return out
