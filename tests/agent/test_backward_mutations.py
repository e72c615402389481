"""The wgmma attention backward's bug classes (agent/export/mutations.py BACKWARD_CLASSES), on the CPU: each
applies to the backward workloads and bases it names (the causal mask to causal ones only, the dS^T buffer to
D = 128 only, the float2 dQ atomics on the vector-dQ base, the checked-in file, which is where they still run), edits exactly its lines of the reference (attention_backward.reference_backward)
or of the checked-in file as found at HEAD (a class whose text is gone fails here, not silently on the GPU), and
the broken file still parses and assembles, so the GPU (bench/check_mutations.py --backward) decides how it fails."""
from __future__ import annotations

import difflib
from concurrent.futures import ThreadPoolExecutor

import pytest

from ptxbench.agent.export.bases import REFERENCE, VECTOR_DQ, VECTOR_DQ_CLASSES, base_source, extra_bases
from ptxbench.agent.export.mutations import BACKWARD_CLASSES, BY_NAME, MUTATIONS
from ptxbench.agent.models.builtin import reference_source
from ptxbench.agent.repairs.candidates import from_mutations
from ptxbench.tools.compile import compile_source
from ptxbench.tools.solution.parse import parse_solution
from ptxbench.tools.solution.plan import Solution
from ptxbench.workloads.registry import get_workload

SMOKE, SMOKE_C = "smoke_mha_bwd_d64", "smoke_mha_bwd_d64_causal"
MAIN, MAIN_C = "mha_bwd_d128", "mha_bwd_d128_causal"
ALL = (SMOKE, SMOKE_C, MAIN, MAIN_C)  # bench/check_mutations.py's BACKWARD_WORKLOADS
# (class, base) -> the workloads it is made on
WHERE = {(n, REFERENCE): ALL for n in BACKWARD_CLASSES}
WHERE[("bwd_causal_mask_wrong_side", REFERENCE)] = (SMOKE_C, MAIN_C)
# the reference's D = 64 blocks have 128 query rows, each consumer's dQ over all keys: both read both dS^T halves
WHERE[("bwd_ds_single_buffer", REFERENCE)] = ALL
for _n in VECTOR_DQ_CLASSES:  # the float2 atomics: gone from the reference, live on the vector-dQ base
    del WHERE[(_n, REFERENCE)]
    WHERE[(_n, VECTOR_DQ)] = ALL
# The exact edit of each class ('-' old line, '+' new line, indentation dropped).
EDITS = {
    "bwd_dpsum_wrong": ["-sum = fmaf(a.x, b.x, fmaf(a.y, b.y, sum));", "+sum = fmaf(b.x, b.x, fmaf(b.y, b.y, sum));"],
    "bwd_lse_wrong_base": ["-L2[prow] = LSE[row] * LOG2E;", "+L2[prow] = LSE[row];"],  # pre_plain: prow = row
    # the D = 64 block's lines, then the 128-wide block's (st_ahead's order, the reference's: j = 4 a + k)
    "bwd_stats_indexed_by_key": [
        "-float e = ex2(fmaf(s[j], sl2, -(j % 2 ? l2[j / 4].y : l2[j / 4].x)));",
        "+float e = ex2(fmaf(s[j], sl2, -sL2[r + 8 * ((j / 2) % 2)]));",
        "-for (int j = 0; j < QR / 2; ++j) p[j] = s[j] * (p[j] - (j % 2 ? dr[j / 4].y : dr[j / 4].x));",
        "+for (int j = 0; j < QR / 2; ++j) p[j] = s[j] * (p[j] - sDr[r + 8 * ((j / 2) % 2)]);",
        "-float x = ex2(fmaf(s[j], sl2, -(k % 2 ? l2.y : l2.x)));",
        "+float x = ex2(fmaf(s[j], sl2, -sL2[r + 8 * (k / 2)]));",
        "-for (int k = 0; k < 4; ++k) p[4 * a + k] = e[4 * a + k] * (p[4 * a + k] - (k % 2 ? dr.y : dr.x));",
        "+for (int k = 0; k < 4; ++k) p[4 * a + k] = e[4 * a + k] * (p[4 * a + k] - sDr[r + 8 * (k / 2)]);"] + [
        # late_d96 (writer_d96, the reference: its D = 96 blocks): the D = 96 entry points' own copy of the 128-wide block
        "-float x = ex2(fmaf(s[j], sl2, -(k % 2 ? l2.y : l2.x)));",
        "+float x = ex2(fmaf(s[j], sl2, -sL2[r + 8 * (k / 2)]));",
        "-for (int k = 0; k < 4; ++k) p[4 * a + k] = e[4 * a + k] * (p[4 * a + k] - (k % 2 ? dr.y : dr.x));",
        "+for (int k = 0; k < 4; ++k) p[4 * a + k] = e[4 * a + k] * (p[4 * a + k] - sDr[r + 8 * (k / 2)]);"],
    "bwd_causal_mask_wrong_side": ["-if (mask && key0 + 64 * c + r + 8 * ((j / 2) % 2) > q0 + q) e = 0.f;",
                                   "+if (mask && key0 + 64 * c + r + 8 * ((j / 2) % 2) < q0 + q) e = 0.f;",
                                   "-if (mask && key0 + 64 * c + r + 8 * (k / 2) > q0 + q) x = 0.f;",
                                   "+if (mask && key0 + 64 * c + r + 8 * (k / 2) < q0 + q) x = 0.f;"] + [
                                   # late_d96's D = 96 block
                                   "-if (mask && key0 + 64 * c + r + 8 * (k / 2) > q0 + q) x = 0.f;",
                                   "+if (mask && key0 + 64 * c + r + 8 * (k / 2) < q0 + q) x = 0.f;"],
    "bwd_dk_scale_missing": ["-store_rows16(dK, dk, scale, row0, D, lane);",  # the reference's 16-byte stores
                             "+store_rows16(dK, dk, 1.f, row0, D, lane);"],
    "bwd_dq_scale_missing": ["-out[0] = __floats2bfloat162_rn(v.x * scale, v.y * scale);",
                             "-out[1] = __floats2bfloat162_rn(v.z * scale, v.w * scale);",
                             "+out[0] = __floats2bfloat162_rn(v.x, v.y);", "+out[1] = __floats2bfloat162_rn(v.z, v.w);"],
    "bwd_dq_plain_store": ["-atomicAdd(reinterpret_cast<float2*>(dst), make_float2(dq[j], dq[j + 1]));",
                           "+*reinterpret_cast<float2*>(dst) = make_float2(dq[j], dq[j + 1]);"],
    "bwd_dq_nonatomic_add": ["-atomicAdd(reinterpret_cast<float2*>(dst), make_float2(dq[j], dq[j + 1]));",
                             "+dst[0] += dq[j];", "+dst[1] += dq[j + 1];"],
    "bwd_dq_bulk_copy_not_add": ['-asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;"',
                                 '+asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;"'],
    # each of these in every block: D = 64's (a no-op since pair_d64's writers took its reductions, kept for ptxas) and
    # st_ahead's 128-wide one (kept where HD != 128), and the writer warps' (dq_writer, writer_d96, pair_d64: every
    # kernel's reductions), the wait that guards the tile
    # (the block that held only the second one goes with it: left empty under "the writer warp waits for the reads",
    # it pointed at what was gone)
    "bwd_dq_bulk_no_wait_read": ["-if (t == 0) bulk_wait_read();  // pair_d64: nothing of this thread's in flight; kept "
                                 "for ptxas (see above)",
                                 "-if constexpr (KD != 128) {  // dq_writer: at KD = 128 the writer warp waits for the reads",
                                 "-if (t == 0) bulk_wait_read();  // this consumer's previous dQ reduction has read its "
                                 "tile", "-}", "-bulk_wait_read();  // the reduction has read the tile"],
    # every fence: before the dQ wgmma reads dS^T, and before a bulk reduction reads a consumer's dQ tile (writer_d96:
    # late_d96's D = 96 block and its dead causal block each fence before arriving on the writer's barrier)
    # (with dq_late's comment on "this fence", which would point at the one that is gone)
    "missing_fence_proxy_async": ["-fence_proxy_async();"] * 4
    + ["-// dq_late: this fence also covers this consumer's dQ tile of the previous block"] + ["-fence_proxy_async();"] * 4,
    "bwd_ds_single_buffer": ["-uint8_t* buf = sdS + (it & 1) * QRows<HD>::DS;", "+uint8_t* buf = sdS;"] * 3,
    "bwd_empty_count_mismatch": ["-mbar_init(&empty[i], 8);  // one arrival per consumer warp",
                                 "+mbar_init(&empty[i], 256);  // one arrival per consumer thread"],
}


@pytest.fixture(scope="module", autouse=True)
def private_cache(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PTXBENCH_CACHE", str(tmp_path_factory.mktemp("ptxbench-cache")))
        yield


def _changed(good: str, bad: str) -> list[str]:
    return [ln[0] + ln[1:].strip() for ln in difflib.unified_diff(good.splitlines(), bad.splitlines(), lineterm="", n=0)
            if ln[:1] in "+-" and ln[:3] not in ("+++", "---")]


def _device_code(source: str) -> str:
    return source.split("*/", 1)[1]  # after the plan block: the same text for every backward workload


@pytest.fixture(scope="module")
def mutants() -> dict[tuple[str, str, str], str]:
    """(class, base, workload) -> the broken file."""
    out = {}
    for wid in ALL:
        bases = [(REFERENCE, None)] + [(b.name, b.classes) for b in extra_bases(wid)]
        for base, classes in bases:
            for name in BACKWARD_CLASSES:
                if classes is not None and name not in classes:
                    continue
                broken = BY_NAME[name].apply(base_source(wid, base))
                if broken is not None:
                    out[(name, base, wid)] = broken
    return out


def test_every_backward_class_applies_where_expected(mutants):
    assert set(BACKWARD_CLASSES) == set(EDITS) and set(BACKWARD_CLASSES) <= {m.name for m in MUTATIONS}
    applied = {}
    for name, base, wid in mutants:
        applied.setdefault((name, base), set()).add(wid)
    assert applied == {k: set(w) for k, w in WHERE.items()}
    ids = {c.id for c in from_mutations(list(ALL), [BY_NAME[n] for n in BACKWARD_CLASSES])}
    assert ids == {f"{w}__{n}" for (n, _), ws in WHERE.items() for w in ws}  # unique: no class on two bases of one workload
    # the backward-only classes leave the GEMM and the attention forwards alone
    for wid in ("gemm_bf16_m8192_n7168_k5120", "mha_fwd_d128", "mha_fwd_d128_causal"):
        assert not [n for n in BACKWARD_CLASSES if n.startswith("bwd_") and BY_NAME[n].apply(reference_source(wid))]


def test_each_class_edits_exactly_its_lines(mutants):
    for (name, base, wid), broken in mutants.items():
        assert _changed(base_source(wid, base), broken) == EDITS[name], (name, base, wid)
        # one device-code mutant per class and base: the plans differ, the broken code does not
        last = WHERE[(name, base)][-1]
        assert _device_code(broken) == _device_code(mutants[(name, base, last)]), (name, base, wid)


# Classes whose broken code spills under ptxas 13.5 in some entry points (it still runs: the GPU judges the race),
# each built apart from the others with those spills allowed, class -> which kernels: without its wait for the
# previous reduction to have read its tile, the reference's D = 64 kernels (128 query rows a block) spill 52-100
# bytes; with one dS^T buffer, the writer's non-causal 128-wide kernels spill 12 (dq_writer's at D = 128, writer_d96's
# at D = 96 too; st_ahead's causal ones did; st_static's did not).
SPILLS_APART = {"bwd_dq_bulk_no_wait_read": lambda k: "_d64" in k,
                "bwd_ds_single_buffer": lambda k: "_d64" not in k and "_causal" not in k}
# The reference's own spills (bytes stored, loaded), allowed in every build: pair_d64_r40's non-causal D = 64 kernels
# keep 12 / 32 (GQA 12 / 24) of prologue values beside their writers (tests/workloads/test_attention_bwd_regs_d64.py)
REFERENCE_SPILLS = {"attn_bwd_wgmma_d64": (12, 32), "attn_bwd_wgmma_d64_gqa": (12, 32)}


@pytest.fixture(scope="module")
def compiled(mutants):
    """The broken code compiled on mha_bwd_d128_causal (where every class applies on one base or the other), six
    builds instead of thirteen (nvcc takes seconds): every reference class's edit at once (they touch different
    lines) but SPILLS_APART's, each alone, and each float2 class on the vector-dQ base (the plain store and the
    non-atomic add rewrite the same line). Each edit is local, so the build of all of them stands for each."""
    together = reference_source(MAIN_C)
    for name in BACKWARD_CLASSES:
        if name not in VECTOR_DQ_CLASSES and name not in SPILLS_APART:
            together = BY_NAME[name].apply(together)
            assert together is not None, name

    def one(item):
        key, source = item
        sol = parse_solution(source, get_workload(MAIN_C), "sm_90a")
        assert isinstance(sol, Solution), (key, sol)
        return key, compile_source(sol.source, sol.language, "sm_90a", MAIN_C)

    builds = {"together": together, **{n: mutants[(n, REFERENCE, MAIN_C)] for n in SPILLS_APART},
              **{n: mutants[(n, VECTOR_DQ, MAIN_C)] for n in VECTOR_DQ_CLASSES}}
    with ThreadPoolExecutor(max_workers=3) as pool:
        return dict(pool.map(one, builds.items()))


def test_the_mutants_assemble_with_wgmma_tma_and_no_spills(compiled):
    for key, result in compiled.items():
        assert result.status == "ok", (key, [str(e.message) for e in result.errors])
        mains = {k: v for k, v in result.kernels.items() if k.startswith("attn_bwd_wgmma")}
        # six entry points, and the reference's three of D = 96 (tiles_d96)
        assert len(mains) == (6 if key in VECTOR_DQ_CLASSES else 9), (key, sorted(result.kernels))
        for k, v in mains.items():
            assert v.sass_opcodes.get("HGMMA", 0) >= 1 and v.sass_opcodes.get("UTMALDG", 0) >= 1, (key, k)
            if key in SPILLS_APART and SPILLS_APART[key](k):  # spills, still runs: the GPU judges the race
                assert v.spill_stores > 0, (key, k, "no longer spills: drop the exemption")
                continue
            stores, loads = (0, 0) if key in VECTOR_DQ_CLASSES else REFERENCE_SPILLS.get(k, (0, 0))
            assert v.spill_stores <= stores and v.spill_loads <= loads, (key, k)
            if key in VECTOR_DQ_CLASSES:  # the dQ vector reduction (REDG) is gone: plain stores in both builds
                assert not v.sass_opcodes.get("REDG", 0), (key, k)


# The backward variants that may still become the reference: the ones measured faster somewhere before late_d96 took
# their D = 96 gains (attention_bwd.md v21-v23; the last-wave tail variants measured slower and were deleted, "v25
# measured"), dq_writer (the reference before writer_d96 took the writer warp to D = 96, "v28 measured") and
# writer_d96 (the reference before pair_d64_r40 gave the D = 64 kernels their writers, "v32 measured"). Every class
# must break each as it breaks the reference (the GPU re-verifies the rejections after a promotion).
CANDIDATES = ("skip_plain+head_groups", "dq_late+head_groups", "causal_skip+head_groups", "dq_writer+head_groups",
              "writer_d96+head_groups")


@pytest.mark.parametrize("variant", CANDIDATES)
def test_every_reference_class_applies_to_each_candidate_in_full(variant):
    from ptxbench.workloads.solutions.attention_backward import fast_backward
    from ptxbench.workloads.solutions.attention_bwd_variants.registry import variant_text

    text = variant_text(variant)
    for wid in (SMOKE, MAIN, MAIN_C):
        cand = fast_backward(get_workload(wid), text)
        for (name, base), workloads in WHERE.items():
            if base != REFERENCE or wid not in workloads:
                continue
            broken = BY_NAME[name].apply(cand)
            assert broken is not None, (variant, wid, name)
            # the classes that remove every call of a kind leave none in the candidate (its new lines included)
            gone = {"missing_fence_proxy_async": "fence_proxy_async();", "bwd_dq_bulk_no_wait_read": "bulk_wait_read();",
                    "bwd_dq_scale_missing": "* scale, "}.get(name)
            if gone == "* scale, ":
                post = broken[broken.index("void __launch_bounds__(256) attn_bwd_post"):]
                assert gone not in post[:post.index("\n}\n")], (variant, wid, name)
            elif gone:
                assert gone not in broken, (variant, wid, name)
