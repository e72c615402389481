"""The bug classes of the knowledge pack's cluster / multicast rules (agent/export/mutations.py CLUSTER_CLASSES), on
the CPU: each applies to the clustered GEMM render (agent/export/bases.py, cluster_m = 2) and to no unclustered
reference (whose text holds the same multicast code as dead `if constexpr` branches), changes only what it names,
and the broken file still parses, resolves and assembles, so the GPU (bench/check_mutations.py --cluster) decides
how it fails. The repair suite's candidates and synth-repairs take them from the clustered base."""
from __future__ import annotations

import difflib
from concurrent.futures import ThreadPoolExecutor

import pytest

from ptxbench.agent.export.bases import CLUSTER2, REFERENCE, base_source, clustered_gemm_params, extra_bases
from ptxbench.agent.export.mutations import BY_NAME, CLUSTER_CLASSES, MUTATIONS, applicable
from ptxbench.agent.export.synth import synthesize
from ptxbench.agent.models.builtin import reference_source
from ptxbench.agent.repairs.candidates import from_mutations
from ptxbench.tools.compile import compile_source
from ptxbench.tools.results import CompileResult, EvalResult
from ptxbench.tools.solution.parse import parse_solution, resolve_plan
from ptxbench.tools.solution.plan import Solution
from ptxbench.workloads.registry import get_workload
from ptxbench.workloads.solutions.gemm_template import render

GEMM = "gemm_bf16_m8192_n7168_k5120"
ATTN = "mha_fwd_d128"
# The lines each class changes in the clustered render ('-old' / '+new', indentation dropped).
EDITS = {
    "cluster_expect_tx_own_bytes": ["-mbar_arrive_expect_tx(&full[stage], STAGE_BYTES);",
                                    "+mbar_arrive_expect_tx(&full[stage], A_STAGE + B_SLICE * KCH);"],
    "cluster_expect_tx_leader_only": ["-mbar_arrive_expect_tx(&full[stage], STAGE_BYTES);",
                                      "+if (cta_rank == 0) mbar_arrive_expect_tx(&full[stage], STAGE_BYTES);"],
    "multicast_mask_missing_peer": ["-n0 + cta_rank * (BN / CLUSTER_M), (1 << CLUSTER_M) - 1);",
                                    "+n0 + cta_rank * (BN / CLUSTER_M), 1 << cta_rank);"],
    "multicast_mask_missing_self": ["-n0 + cta_rank * (BN / CLUSTER_M), (1 << CLUSTER_M) - 1);",
                                    "+n0 + cta_rank * (BN / CLUSTER_M), ((1 << CLUSTER_M) - 1) & ~(1 << cta_rank));"],
    "cluster_empty_arrive_local_only": ["-for (int r = 0; r < CLUSTER_M; ++r) mbar_arrive_cluster(&empty[prev], r);",
                                        "+mbar_arrive(&empty[prev]);"] * 2,
    "cluster_empty_count_local": [  # with the comment above it, which says the fix in words
        "-// one arrival per consumer warp of every CTA in the cluster (each frees its B slice for all)",
        "-mbar_init(&empty[s], CONSUMERS * 4 * CLUSTER_M);", "+mbar_init(&empty[s], CONSUMERS * 4);"],
    "cluster_init_sync_local": ["-if constexpr (CLUSTER_M > 1) cluster_sync(); else __syncthreads();", "+__syncthreads();"],
    "cluster_exit_without_sync": [
        "-// A CTA of a cluster must not exit while others may still multicast into it or arrive on its barriers.",
        "-if constexpr (CLUSTER_M > 1) cluster_sync();"],
    "cluster_rank_same_b_slice": ["-n0 + cta_rank * (BN / CLUSTER_M), (1 << CLUSTER_M) - 1);",
                                  "+n0, (1 << CLUSTER_M) - 1);"],
    "cluster_rank_same_m_tile": ["-const int m0 = (tm * CLUSTER_M + cta_rank) * BM;",
                                 "+const int m0 = tm * CLUSTER_M * BM;"] * 2,
}


@pytest.fixture(scope="module", autouse=True)
def private_cache(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PTXBENCH_CACHE", str(tmp_path_factory.mktemp("ptxbench-cache")))
        yield


def _changed(good: str, bad: str) -> list[str]:
    out = []
    for op in difflib.SequenceMatcher(a=good.splitlines(), b=bad.splitlines(), autojunk=False).get_opcodes():
        tag, i1, i2, j1, j2 = op
        if tag != "equal":
            old, new = good.splitlines()[i1:i2], bad.splitlines()[j1:j2]
            out += ["-" + ln.strip() for ln in old] + ["+" + ln.strip() for ln in new]
    return out


@pytest.fixture(scope="module")
def clustered() -> str:
    return base_source(GEMM, CLUSTER2)


@pytest.fixture(scope="module")
def mutants(clustered) -> dict[str, str]:
    return {name: BY_NAME[name].apply(clustered) for name in CLUSTER_CLASSES}


@pytest.fixture(scope="module")
def compiled(clustered, mutants):
    """The clustered base and every mutant, parsed, resolved and compiled."""
    wl = get_workload(GEMM)

    def one(item):
        name, source = item
        sol = parse_solution(source, wl, "sm_90a")
        assert isinstance(sol, Solution), (name, sol)
        (launch,) = resolve_plan(sol.plan, wl, 132).launches
        assert launch.cluster == (2, 1, 1) and launch.grid == (128, 1, 1), name  # the default's 128 CTAs (max_ctas)
        return name, compile_source(sol.source, sol.language, "sm_90a", GEMM)

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(one, [(REFERENCE, clustered), *mutants.items()]))


def test_the_clustered_base_is_the_template_with_two_cta_clusters(clustered):
    assert clustered_gemm_params().cluster_m == 2 and clustered == render(clustered_gemm_params())
    assert "cluster = [2, 1, 1]" in clustered and "constexpr int CLUSTER_M = 2;" in clustered
    assert [b.name for b in extra_bases(GEMM)] == [CLUSTER2] and extra_bases(ATTN) == []
    assert set(extra_bases(GEMM)[0].classes) == set(CLUSTER_CLASSES)
    with pytest.raises(KeyError):
        base_source(ATTN, CLUSTER2)


def test_every_cluster_class_applies_to_the_clustered_render_only(mutants):
    assert set(CLUSTER_CLASSES) == set(EDITS) and set(CLUSTER_CLASSES) <= {m.name for m in MUTATIONS}
    assert all(mutants[n] is not None for n in CLUSTER_CLASSES)
    # the unclustered references hold the multicast code too (GEMM: dead branches) but none applies there
    for wid in (GEMM, ATTN):
        assert not applicable(reference_source(wid), list(CLUSTER_CLASSES)), wid
    assert "tma_load_2d_multicast" in reference_source(GEMM)


def test_the_edits_are_the_named_ones(clustered, mutants):
    for name in CLUSTER_CLASSES:
        assert _changed(clustered, mutants[name]) == EDITS[name], name


def test_each_mutant_assembles(compiled):
    base = compiled[REFERENCE]
    assert base.status == "ok", [str(e.message) for e in base.errors]
    for name, result in compiled.items():
        assert result.status == "ok", (name, [str(e.message) for e in result.errors])
        (k,) = result.kernels.values()
        assert k.sass_opcodes.get("HGMMA", 0) >= 1 and k.sass_opcodes.get("UTMALDG", 0) >= 1, name
        assert k.spill_stores == 0 and k.spill_loads == 0, name


def test_candidates_and_synth_repairs_take_them_from_the_clustered_base(clustered, mutants, tmp_path):
    cands = from_mutations([GEMM, ATTN], [BY_NAME[n] for n in CLUSTER_CLASSES])
    assert {c.id for c in cands} == {f"{GEMM}__{n}" for n in CLUSTER_CLASSES}
    assert all(c.base == CLUSTER2 and c.source == mutants[c.bug_class] and "cluster_m = 2" in c.provenance[0]
               for c in cands)
    # the whole recipe: the reference's classes on the reference, only the cluster classes on the clustered base
    every = from_mutations([GEMM])
    assert {c.bug_class for c in every if c.base == CLUSTER2} == set(CLUSTER_CLASSES)
    assert not {c.bug_class for c in every if c.base == REFERENCE} & set(CLUSTER_CLASSES)
    assert len({c.id for c in every}) == len(every)

    broken = {mutants["multicast_mask_missing_peer"]: "TIMEOUT", mutants["cluster_rank_same_m_tile"]: "INCORRECT_NUMERICAL"}

    class Scripted:
        def evaluate(self, workload_id, source, options):
            status = broken.get(source, "PASSED")
            return EvalResult(workload=workload_id, status=status, message=status,
                              compile=CompileResult(status="ok", arch="sm_90a"), gpu_evaluated=True)

    reference = reference_source(GEMM)
    report = synthesize([GEMM], Scripted(), tmp_path / "run", sources=lambda w: reference, prompts=lambda w: ("S", "T"),
                        feedback=lambda r, t: r.status,
                        mutations=["missing_wgmma_fence", "multicast_mask_missing_peer", "cluster_rank_same_m_tile"],
                        extra_sources=lambda w: [(b.name, base_source(w, b.name), b.classes) for b in extra_bases(w)])
    assert report.reference_status == {GEMM: "PASSED", f"{GEMM}@{CLUSTER2}": "PASSED"}
    assert [o.mutation for o in report.outcomes] == ["missing_wgmma_fence", "multicast_mask_missing_peer",
                                                     "cluster_rank_same_m_tile"]
    assert [o.mutation for o in report.kept] == ["multicast_mask_missing_peer", "cluster_rank_same_m_tile"]
    kernels = sorted((tmp_path / "run" / "trajectories" / f"{GEMM}__synthetic-multicast_mask_missing_peer").rglob("*.cu"))
    assert [k.read_text() for k in kernels] == [mutants["multicast_mask_missing_peer"], clustered]  # fixed: the base
