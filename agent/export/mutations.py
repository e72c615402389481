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


def _clustered(replacement: str | Callable[[re.Match], str]) -> Callable[[re.Match], str]:
    """`replacement`, made only in a kernel whose plan launches clusters of 2+ CTAs (`cluster = [2, 1, 1]`);
    elsewhere the match is left as it is, so the class does not apply."""
    def sub(m: re.Match) -> str:
        cluster = re.search(r"^cluster\s*=\s*\[([^\]]*)\]", m.string, flags=re.M)
        sizes = [int(x) for x in re.findall(r"\d+", cluster.group(1))] if cluster else []
        if not any(n > 1 for n in sizes):
            return m.group(0)
        return m.expand(replacement) if isinstance(replacement, str) else replacement(m)
    return sub

def _causal_off(m: re.Match) -> str:
    """The causal flag off: the plan's argument of the plain attention kernels, or the wgmma forward's constant."""
    return f'"i32:0"]{m.group(1)}' if m.group(1) is not None else f"{m.group(2)}false;"


# Where a backward's float2 dQ atomics run: a file without the bulk reduction (the vector-dQ base, agent/export/bases.py);
# the reference reduces dQ in bulk in every kernel.
VECTOR_DQ_LIVE = r'\A(?![\s\S]*cp\.reduce\.async\.bulk)'

MUTATIONS: list[Mutation] = [
    Mutation("missing_wgmma_fence",
             "wgmma.fence removed before the first wgmma of a k-step: accumulator and shared-memory writes are not ordered "
             "with the asynchronous MMA",
             WRONG, r"^[ \t]*(?:wgmma_fence\(\);|wgmma\.fence\.sync\.aligned;)[ \t]*\n", ""),
    Mutation("missing_fence_proxy_async",
             "fence.proxy.async removed after generic-proxy shared-memory stores that the async proxy (TMA store / wgmma) reads",
             # with a comment above it that speaks of "this fence" (left in, it points at the fence that is gone)
             WRONG, r"^(?:[ \t]*//[^\n]*\bfence\b[^\n]*\n)?[ \t]*(?:fence_proxy_async\(\);|fence\.proxy\.async(?:\.shared::cta)?;)"
                    r"[ \t]*\n", ""),
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
             "the causal mask is never applied: the plan's last argument, the causal flag of the plain attention "
             "kernels, is passed as 0, or the wgmma forward's compiled-in CAUSAL is false (every key tile visited, "
             "none masked)",
             WRONG, r'"i32:1"\]([ \t]*)$|^([ \t]*constexpr bool CAUSAL = )true;', _causal_off),
    # The wgmma attention forward's own bug classes (register-sourced P, N-major V, quad-owned softmax rows).
    Mutation("pv_operand_not_transposed",
             "O += P V reads V (stored [keys, d], N-major) without imm-trans-b, so the wgmma takes it as K-major",
             WRONG, r"(\}, %\d+, p, 1, 1, )1;", r"\g<1>0;"),
    Mutation("softmax_max_not_reduced",
             "the row max is reduced over 2 of the 4 threads that share a row (shfl.xor 2 dropped): the quad's "
             "probabilities are scaled by different maxima and summed into one output row",
             # and a file header's "(shfl.xor 1, 2)", the two shuffles the reduction needs (left in, it names the fix)
             WRONG, r"^[ \t]*(\w+) = fmaxf\(\1, __shfl_xor_sync\([^;]*, 2\)\);[ \t]*\n|(?<=quad) \(shfl\.xor 1, 2\)", "",
             requires=r"^[ \t]*\w+ = fmaxf\(\w+, __shfl_xor_sync\([^;]*, 2\)\);"),
    Mutation("row_sum_not_reduced",
             "the softmax row sum is never reduced over the quad that shares the row: each thread normalises by its "
             "own partial sum",
             # and the comments that ask for the reduction ("the row sums were kept per thread: reduce over the quad
             # now" above it, "the row sums reduced over the quad here" above the persistent epilogue): left in, each
             # names the fix beside the place it goes
             WRONG, r"^[ \t]*(\w+) \+= __shfl_xor_sync\([^;]*\);[ \t]*\n|^[ \t]*//[^\n]*\breduce over the quad now\b[^\n]*\n"
                    r"|; the row sums reduced over the quad here", "",
             requires=r"^[ \t]*\w+ \+= __shfl_xor_sync\([^;]*\);"),
    # The knowledge pack's pipeline rules (prompts/knowledge_sm90a.md, "Pipelines, clusters and multicast"),
    # one class per rule a model can break (issue 17); bench/check_mutations.py runs them on the GPU.
    Mutation("producer_start_parity",
             "the producer waits on its empty barriers with parity `phase` (0 on the first pass) instead of "
             "`phase ^ 1`: a fresh barrier has not completed phase 0, so the first wait never returns",
             # and the line's comment, "a fresh barrier passes parity 1 at once", which names the parity it needs
             ("TIMEOUT",), r"(mbar_wait\(&empty\w*\[\w+\], )(\w+) \^ 1\)(;?)(?:[ \t]*//[^\n]*)?", r"\1\2)\3"),
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
             # the L2-hinted load (l2_hints) keeps its policy argument last
             WRONG, r"(tma_load_2d(?:_hint)?\([^;]*?,\s*)([^,;]+?),\s*([^,;()]+?)((?:,\s*(?:keep|stream|policy))?)\);",
             r"\1\3, \2\4);", 1),
    Mutation("tmap_view_one_head",
             "the attention tensor maps view Q, K and V (and O, stored by TMA) as [S, D] (one head) instead of the "
             "[B*H*S, D] rows of all heads: every row past the first head loads as zeros (and is never stored)",
             WRONG, r'(dims\s*=\s*\["D",\s*)"B \* H(?:KV)? \* S"\]', r'\1"S"]'),
    # The knowledge pack's register reallocation rule: the CTA's pool holds only the launch's allocation.
    Mutation("setmaxnreg_over_pool",
             "the consumers' setmaxnreg.inc asks 8 registers more each than the CTA's pool can give them after the "
             "producer's dec (the pool holds threads x the launch's registers, not the SM's 65,536): the inc waits "
             "forever",
             ("TIMEOUT",), r"^constexpr int CONSUMER_REGS = (\d+);",
             lambda m: f"constexpr int CONSUMER_REGS = {int(m.group(1)) + 8};"),
    # The wgmma attention backward's own bug classes (its reference, attention_backward.reference_backward: dQ by
    # bulk reduce-adds in every kernel; the float2 dQ classes on the checked-in file's vector-dQ base,
    # agent/export/bases.py); the knowledge pack's backward section teaches the rules they break.
    Mutation("bwd_dpsum_wrong",
             "the preprocess sums dO * dO instead of dO * O for Dr (dPsum): dS = P (dP - Dr) is off in every row, "
             "so dQ and dK are wrong (dV is not)",
             WRONG, r"sum = fmaf\(a\.x, b\.x, fmaf\(a\.y, b\.y, sum\)\);", "sum = fmaf(b.x, b.x, fmaf(b.y, b.y, sum));"),
    Mutation("bwd_lse_wrong_base",
             "the preprocess copies the natural-log LSE into L2 without the log2(e) factor, while P^T is computed with "
             "exp2: every probability is scaled by 2^(LSE (log2 e - 1))",
             # the row it is stored at may be a permuted one (stats_wide's prow)
             WRONG, r"L2\[(\w+)\] = LSE\[row\] \* LOG2E;", r"L2[\1] = LSE[row];"),
    Mutation("bwd_stats_indexed_by_key",
             "L2 and Dr are looked up by the accumulator's row (a key) instead of its column (a query): the code "
             "reads the fragment of P^T as if it were P's",
             WRONG, r"-sL2\[q\]|sDr\[8 \* \(j / 4\) \+ col0 \+ \(j % 2\)\]"
                    r"|-\(j % 2 \? l2\[j / 4\]\.y : l2\[j / 4\]\.x\)|\(j % 2 \? dr\[j / 4\]\.y : dr\[j / 4\]\.x\)"
                    r"|-\(k % 2 \? l2\.y : l2\.x\)|\(k % 2 \? dr\.y : dr\.x\)",  # st_ahead's block: j = 4 a + k
             lambda m: ("-sL2" if m.group(0).startswith("-") else "sDr")
             + ("[r + 8 * (k / 2)]" if "k %" in m.group(0) else "[r + 8 * ((j / 2) % 2)]")),
    Mutation("bwd_causal_mask_wrong_side",
             "the causal mask zeroes P where key < query instead of key > query in the blocks that cross the diagonal",
             WRONG, r"(\+ 8 \* (?:\(\(j / 2\) % 2\)|\(k / 2\))) > (q0 \+ q\) [ex] = 0\.f;)", r"\1 < \2",
             requires=r'^kernel = "attn_bwd_wgmma\w*_causal"'),
    Mutation("bwd_dk_scale_missing",
             "dK is stored without the softmax scale (dK = dS^T Q instead of scale dS^T Q)",
             WRONG, r"__floats2bfloat162_rn\(dk\[j\] \* scale, dk\[j \+ 1\] \* scale\)"
                    r"|store_rows16\(dK, dk, scale, row0, D, lane\)",  # the 4-byte stores, or the 16-byte ones
             lambda m: ("__floats2bfloat162_rn(dk[j], dk[j + 1])" if m.group(0).startswith("__")
                        else "store_rows16(dK, dk, 1.f, row0, D, lane)")),
    Mutation("bwd_dq_scale_missing",
             "the postprocess converts the fp32 dQ accumulator to bf16 without the softmax scale",
             # v.x / v.z: the reference's postprocess
             WRONG, r"(v\.[xyzw]) \* scale, (v\.[xyzw]) \* scale", r"\1, \2"),
    Mutation("bwd_dq_plain_store",
             "dQ partials are stored instead of reduce-added: each key block overwrites the others' contributions",
             WRONG, r"atomicAdd\(reinterpret_cast<float2\*>\(dst\), (make_float2\(dq\[j\], dq\[j \+ 1\]\))\);",
             r"*reinterpret_cast<float2*>(dst) = \1;",
             requires=VECTOR_DQ_LIVE),
    Mutation("bwd_dq_nonatomic_add",
             "dQ partials are added with a plain load-add-store instead of a reduction: warps and CTAs that add to "
             "the same dQ rows at once lose updates (a race: it bites only where they overlap in time)",
             WRONG, r"^([ \t]*)atomicAdd\(reinterpret_cast<float2\*>\(dst\), make_float2\(dq\[j\], dq\[j \+ 1\]\)\);",
             r"\1dst[0] += dq[j];\n\1dst[1] += dq[j + 1];",
             requires=VECTOR_DQ_LIVE),
    Mutation("bwd_dq_bulk_copy_not_add",
             "the dQ tile goes out with a bulk copy (`cp.async.bulk`) instead of a bulk reduce-add: each key block's "
             "partial overwrites the others' in the fp32 accumulator",
             WRONG, r"cp\.reduce\.async\.bulk\.global\.shared::cta\.bulk_group\.add\.f32",
             "cp.async.bulk.global.shared::cta.bulk_group"),
    Mutation("bwd_dq_bulk_no_wait_read",
             "the issuing thread no longer waits for its previous bulk reduction to finish reading the dQ staging tile "
             "before the consumers overwrite it (a race: it bites only where they overtake the copy)",
             # a consumer's thread 0 (its own reductions), or the writer warp's issuer (dq_writer, the 128-wide
             # kernels): it frees the tile right after issuing
             # a block left empty by it goes too: `if constexpr (KD != 128) { }` under "the writer warp waits for the
             # reads" points at what it held
             WRONG, r"^[ \t]*if constexpr \([^)]*\) \{[^\n]*\n[ \t]*if \(t == 0\) bulk_wait_read\(\);[^\n]*\n[ \t]*\}[ \t]*\n"
                    r"|^[ \t]*(?:if \(t == 0(?: && \(HD == 64 \|\| issuer\))?\) )?bulk_wait_read\(\);[^\n]*\n", ""),
    Mutation("bwd_ds_single_buffer",
             "the double-buffered dS^T tile becomes one buffer: a consumer writes the next block's dS^T while the other "
             "may still read this one in its dQ product (a race wherever each consumer reads both halves: D = 96 / 128, "
             "and D = 64 with 128 query rows a block)",
             WRONG, r"uint8_t\* buf = sdS \+ \(it & 1\) \* (?:DS_BYTES|QRows<HD>::DS);", "uint8_t* buf = sdS;",
             requires=r'^kernel = "attn_bwd_wgmma(?!_d64)|QRows<HD>::DS'),
    Mutation("bwd_empty_count_mismatch",
             "the empty barriers expect one arrival per consumer thread (256) while one lane per consumer warp (8) "
             "arrives: no stage is ever released, so the producer waits forever once the ring wraps",
             ("TIMEOUT",), r"mbar_init\(&empty\[i\], 8\);.*$", "mbar_init(&empty[i], 256);  // one arrival per consumer thread"),
    # The knowledge pack's cluster / multicast rules (prompts/knowledge_sm90a.md, "Pipelines, clusters and
    # multicast"), one class per rule a model can break. They apply only to a kernel launched in clusters of 2+
    # CTAs (plan `cluster = [2, 1, 1]`): the GEMM template's multicast code is also in the text of every
    # unclustered render, under `if constexpr (CLUSTER_M > 1)`, where breaking it changes nothing that runs.
    # Their base is the clustered GEMM render (agent/export/bases.py); bench/check_mutations.py --cluster runs them.
    Mutation("cluster_expect_tx_own_bytes",
             "each CTA's full barrier expects only the bytes its own producer loads (its A box and its own slice of "
             "B), not the peer's multicast slice: the phase completes before the whole B tile has landed and the "
             "late bytes count against the next phase",
             HANG_OR_WRONG, r"mbar_arrive_expect_tx\(&full\[stage\], STAGE_BYTES\)",
             _clustered("mbar_arrive_expect_tx(&full[stage], A_STAGE + B_SLICE * KCH)")),
    Mutation("cluster_expect_tx_leader_only",
             "only cluster rank 0 arms its full barrier (arrive_expect_tx), as if the multicast signalled the "
             "issuing CTA's barrier for the whole cluster: the peer's full barriers never get their producer "
             "arrival, so its consumers wait forever",
             ("TIMEOUT",), r"^([ \t]*)(mbar_arrive_expect_tx\(&full\[stage\], STAGE_BYTES\);)",
             _clustered(r"\1if (cta_rank == 0) \2")),
    Mutation("multicast_mask_missing_peer",
             "the B slice is multicast with a mask of the issuing CTA only (1 << rank): the peers never receive "
             "it, so their full barriers wait forever for its bytes",
             ("TIMEOUT",), r"(tma_load_2d_multicast\([^;]*?(\w*rank\w*) \*[^;]*?,\s*)\(1 << \w+\) - 1\)",
             _clustered(r"\g<1>1 << \2)")),
    Mutation("multicast_mask_missing_self",
             "the B slice is multicast to the peers only (the issuing CTA's bit cleared from the mask): the CTA "
             "never receives its own slice, so its full barrier waits forever for those bytes",
             ("TIMEOUT",), r"(tma_load_2d_multicast\([^;]*?(\w*rank\w*) \*[^;]*?,\s*)(\(1 << \w+\) - 1)\)",
             _clustered(r"\g<1>(\3) & ~(1 << \2))")),
    Mutation("cluster_empty_arrive_local_only",
             "consumer warps release a stage on their own CTA's empty barrier only (mbar_arrive) instead of on the "
             "empty barrier of every CTA of the cluster (mbar_arrive_cluster through mapa): each empty barrier "
             "gets half its arrivals, so no producer can refill a stage once the ring wraps",
             ("TIMEOUT",), r"for \(int (\w+) = 0; \1 < \w+; \+\+\1\) mbar_arrive_cluster\((&empty\w*\[\w+\]), \1\);",
             _clustered(r"mbar_arrive(\2);")),
    Mutation("cluster_empty_count_local",
             "the empty barriers count the consumer warps of one CTA (CONSUMERS * 4) while the consumers of every "
             "CTA of the cluster arrive on them: a stage is released after half its readers are done (the peer "
             "may still read it) and each ring pass completes two phases, so the producer's parity falls out of step",
             # with the comment above it, "one arrival per consumer warp of every CTA in the cluster", the fix in words
             HANG_OR_WRONG, r"^(?:[ \t]*//[^\n]*\bcluster\b[^\n]*\n)?([ \t]*)mbar_init\(&empty\[s\], CONSUMERS \* 4 \* CLUSTER_M\);",
             _clustered(r"\1mbar_init(&empty[s], CONSUMERS * 4);")),
    Mutation("cluster_init_sync_local",
             "the barriers are initialised and then synchronised with __syncthreads() instead of cluster_sync(): a "
             "peer may multicast into, or arrive on, barriers this CTA has not initialised yet (a race at start-up)",
             HANG_OR_WRONG, r"if constexpr \(CLUSTER_M > 1\) cluster_sync\(\); else __syncthreads\(\);",
             _clustered("__syncthreads();")),
    Mutation("cluster_exit_without_sync",
             "the final cluster_sync() is removed: a CTA may exit while its peer still arrives on its empty "
             "barriers (or multicasts into its shared memory) (a race at exit: it bites only where a peer lags)",
             HANG_OR_WRONG,
             r"^(?:[ \t]*//[^\n]*\n)*[ \t]*(?:if constexpr \([^)]*\) )?cluster_sync\(\);[ \t]*\n(?=\}[ \t]*$)",
             _clustered("")),
    Mutation("cluster_rank_same_b_slice",
             "the B slice's row coordinate leaves out the cluster rank: every CTA loads the first BN / CM rows of "
             "the B tile, so the other slices of every CTA's B tile hold the first one's rows",
             WRONG, r"(tma_load_2d_multicast\([^;]*?,\s*)n0 \+ \w*rank\w* \* \(BN / \w+\)",
             _clustered(r"\1n0")),
    Mutation("cluster_rank_same_m_tile",
             "the tile row leaves out the cluster rank: both CTAs of a cluster compute and store the same M tile, "
             "so the other one of every pair is never written",
             WRONG, r"const int m0 = \(tm \* CLUSTER_M \+ cta_rank\) \* BM;",
             _clustered("const int m0 = tm * CLUSTER_M * BM;")),
]
# The classes above that the knowledge pack's pipeline section teaches (bench/check_mutations.py's default).
PIPELINE_CLASSES = ("producer_start_parity", "missing_wgmma_fence_regs", "named_barrier_count_mismatch",
                    "named_barrier_shared_id", "tmap_row_missing_head_offset", "tma_coords_swapped",
                    "tmap_view_one_head", "setmaxnreg_over_pool")
# The backward's classes, with the generic fence class at the one place the backward needs it (before the dQ
# wgmma reads dS^T written by plain stores); bench/check_mutations.py --backward runs them.
BACKWARD_CLASSES = ("bwd_dpsum_wrong", "bwd_lse_wrong_base", "bwd_stats_indexed_by_key", "bwd_causal_mask_wrong_side",
                    "bwd_dk_scale_missing", "bwd_dq_scale_missing", "bwd_dq_plain_store", "bwd_dq_nonatomic_add",
                    "bwd_dq_bulk_copy_not_add", "bwd_dq_bulk_no_wait_read",
                    "missing_fence_proxy_async", "bwd_ds_single_buffer", "bwd_empty_count_mismatch")
# The knowledge pack's cluster / multicast rules, on the clustered GEMM render (bench/check_mutations.py --cluster).
CLUSTER_CLASSES = ("cluster_expect_tx_own_bytes", "cluster_expect_tx_leader_only", "multicast_mask_missing_peer",
                   "multicast_mask_missing_self", "cluster_empty_arrive_local_only", "cluster_empty_count_local",
                   "cluster_init_sync_local", "cluster_exit_without_sync", "cluster_rank_same_b_slice",
                   "cluster_rank_same_m_tile")

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
