"""The bug classes of the knowledge pack's pipeline rules (agent/export/mutations.py PIPELINE_CLASSES), on the CPU:
each applies to a real reference kernel (the GEMM, the wgmma attention forward), changes only what it names,
and the broken file still parses, resolves and assembles, so the GPU (bench/check_mutations.py) decides
how it fails."""
from __future__ import annotations

import difflib
from concurrent.futures import ThreadPoolExecutor

import pytest

from ptxbench.agent.export.mutations import BY_NAME, MUTATIONS, PIPELINE_CLASSES
from ptxbench.agent.models.builtin import reference_source
from ptxbench.agent.repairs.candidates import from_mutations
from ptxbench.tools.compile import compile_source
from ptxbench.tools.solution.parse import parse_solution, resolve_plan
from ptxbench.tools.solution.plan import Solution
from ptxbench.workloads.registry import get_workload

GEMM = "gemm_bf16_m8192_n7168_k5120"
ATTN = "mha_fwd_d128"  # its reference is workloads/solutions/attention_fwd_wgmma.cu
# Where each class applies: the reference kernels whose text holds what it breaks.
WHERE = {"producer_start_parity": (GEMM, ATTN), "missing_wgmma_fence_regs": (GEMM, ATTN),
         "named_barrier_count_mismatch": (GEMM,), "named_barrier_shared_id": (GEMM,),
         "tmap_row_missing_head_offset": (ATTN,), "tma_coords_swapped": (GEMM, ATTN), "tmap_view_one_head": (ATTN,),
         "setmaxnreg_over_pool": (GEMM, ATTN)}
PLAN_ONLY = ("tmap_view_one_head",)  # edits the launch plan only: the device code is the reference's


@pytest.fixture(scope="module", autouse=True)
def private_cache(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PTXBENCH_CACHE", str(tmp_path_factory.mktemp("ptxbench-cache")))
        yield


def _changed(good: str, bad: str) -> list[str]:
    """The changed lines, '-old' / '+new', indentation dropped."""
    return [ln[0] + ln[1:].strip() for ln in difflib.unified_diff(good.splitlines(), bad.splitlines(), lineterm="", n=0)
            if ln[:1] in "+-" and ln[:3] not in ("+++", "---")]


@pytest.fixture(scope="module")
def mutants() -> dict[tuple[str, str], str]:
    out = {}
    for wid in (GEMM, ATTN):
        good = reference_source(wid)
        for name in PIPELINE_CLASSES:
            broken = BY_NAME[name].apply(good)
            if broken is not None:
                out[(name, wid)] = broken
    return out


@pytest.fixture(scope="module")
def compiled(mutants):
    """Every code-changing mutant, parsed and compiled (two at a time: nvcc is the slow part)."""
    def one(key):
        sol = parse_solution(mutants[key], get_workload(key[1]), "sm_90a")
        assert isinstance(sol, Solution), (key, sol)
        return key, compile_source(sol.source, sol.language, "sm_90a", key[1])

    keys = [k for k in mutants if k[0] not in PLAN_ONLY]
    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(one, keys))


def test_every_pipeline_class_is_in_the_recipe_and_applies_where_expected(mutants):
    assert set(PIPELINE_CLASSES) == set(WHERE) and set(PIPELINE_CLASSES) <= {m.name for m in MUTATIONS}
    applied = {}
    for name, wid in mutants:
        applied.setdefault(name, set()).add(wid)
    assert applied == {n: set(w) for n, w in WHERE.items()}
    # the repair suite's candidates include them (origin: the shared recipe, so synth-repairs makes them too)
    ids = {c.id for c in from_mutations([GEMM, ATTN], [BY_NAME[n] for n in PIPELINE_CLASSES])}
    assert ids == {f"{w}__{n}" for n, ws in WHERE.items() for w in ws}


def test_each_mutant_assembles(compiled):
    for key, result in compiled.items():
        assert result.status == "ok", (key, [str(e.message) for e in result.errors])
        assert all(k.sass_opcodes.get("HGMMA", 0) >= 1 for k in result.kernels.values()), key


def test_the_edits_are_the_named_ones(mutants):
    parity = _changed(reference_source(ATTN), mutants[("producer_start_parity", ATTN)])
    assert parity and all("mbar_wait(&empty" in ln for ln in parity)  # the consumers' full waits are untouched
    gemm_parity = _changed(reference_source(GEMM), mutants[("producer_start_parity", GEMM)])
    assert gemm_parity == ["-mbar_wait(&empty[stage], phase ^ 1);", "+mbar_wait(&empty[stage], phase);"]
    fences = mutants[("missing_wgmma_fence_regs", ATTN)]
    assert "wgmma_fence_regs(s);" not in fences and "wgmma_fence_regs(o);" not in fences
    assert "wgmma_fence_regs(acc" not in mutants[("missing_wgmma_fence_regs", GEMM)]
    swapped = _changed(reference_source(GEMM), mutants[("tma_coords_swapped", GEMM)])
    assert swapped == ["-tma_load_2d_hint(sA + kc * A_CHUNK, &tmA, &full[stage], kx, m0, keep);",
                       "+tma_load_2d_hint(sA + kc * A_CHUNK, &tmA, &full[stage], m0, kx, keep);"]
    # a kernel without the L2 priorities (a template point, a model's kernel) swaps the same way
    from ptxbench.agent.export.mutations import MUTATIONS
    from ptxbench.workloads.solutions.gemm_template import GemmParams, render
    plain = render(GemmParams())
    cls = next(m for m in MUTATIONS if m.name == "tma_coords_swapped")
    assert _changed(plain, cls.apply(plain)) == ["-tma_load_2d(sA + kc * A_CHUNK, &tmA, &full[stage], kx, m0);",
                                                 "+tma_load_2d(sA + kc * A_CHUNK, &tmA, &full[stage], m0, kx);"]
    row = _changed(reference_source(ATTN), mutants[("tmap_row_missing_head_offset", ATTN)])
    assert row == ["-const int row = kv_row + j * BN;", "+const int row = j * BN;"]
    assert _changed(reference_source(GEMM), mutants[("setmaxnreg_over_pool", GEMM)]) == [
        "-constexpr int CONSUMER_REGS = 232;", "+constexpr int CONSUMER_REGS = 240;"]
    assert _changed(reference_source(ATTN), mutants[("setmaxnreg_over_pool", ATTN)]) == [  # the walk's 40 / 232 / 232
        "-constexpr int CONSUMER_REGS = 232;", "+constexpr int CONSUMER_REGS = 240;"]


def test_the_pool_mutants_are_over_the_pool_and_say_so(compiled):
    """Each reference's split is exactly the pool (GEMM 40 / 232 / 232, forward 40 / 232 / 232 at 168), so 8 more per
    consumer is 2,048 registers short, and the compile warnings a no-GPU evaluation returns give the arithmetic: the
    feedback a repair row's model reads."""
    from ptxbench.tools.evaluate import LocalEvaluator
    from ptxbench.tools.evaluator import EvalOptions
    from ptxbench.tools.regpool import SetmaxnregMoves, pool_shortfall

    for wid in (GEMM, ATTN):
        result = compiled[("setmaxnreg_over_pool", wid)]
        for name, k in result.kernels.items():
            if k.setmaxnreg_inc:
                assert pool_shortfall(k.registers, 384, SetmaxnregMoves(k.setmaxnreg_dec, k.setmaxnreg_inc)) == 2048, name
        r = LocalEvaluator().evaluate(wid, BY_NAME["setmaxnreg_over_pool"].apply(reference_source(wid)),
                                      EvalOptions(no_gpu=True))
        assert any("setmaxnreg cannot be met" in w.message and "2,048 more" in w.message for w in r.compile.warnings), wid


def test_named_barrier_mutants_and_the_reserved_barriers(compiled):
    # the reference's runtime id (1 + consumer) reserves all 16; one immediate id reserves 2 (0 and 1)
    (mismatch,) = compiled[("named_barrier_count_mismatch", GEMM)].kernels.values()
    (shared,) = compiled[("named_barrier_shared_id", GEMM)].kernels.values()
    assert mismatch.barriers == 16 and shared.barriers == 2


def test_the_one_head_view_changes_the_plan_only(mutants):
    wl = get_workload(ATTN)
    good, bad = (parse_solution(s, wl, "sm_90a") for s in (reference_source(ATTN), mutants[("tmap_view_one_head", ATTN)]))
    assert isinstance(bad, Solution) and bad.source.split("*/", 1)[1] == good.source.split("*/", 1)[1]
    dims = {t.tensor: t.dims for t in resolve_plan(bad.plan, wl, 132).tmaps}
    # one head's rows: the rest load as zeros (and the reference's TMA-store epilogue never stores them)
    assert dims == {t: [128, 4096] for t in ("Q", "K", "V", "O")}
