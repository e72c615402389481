"""The reference attention solutions: they parse and compile for every attention workload, and pass on the GPU."""
from __future__ import annotations

import pytest

from ptxbench.tools.compile import compile_source
from ptxbench.tools.evaluator import EvalOptions
from ptxbench.tools.solution.parse import parse_solution
from ptxbench.workloads.registry import list_workloads
from ptxbench.workloads.registry import get_workload
from ptxbench.workloads.solutions.attention import attention_solution

# The plain fp32 backward has no GQA variant (dK, dV summed over a group): the fast backward covers those.
GQA_BACKWARD = [w for w in list_workloads() if w.op == "mha_bwd" and "HKV" in w.symbols]
ATTENTION = [w for w in list_workloads() if w.op in ("mha_fwd", "mha_bwd") and w not in GQA_BACKWARD]


def _plan_free(text: str) -> str:
    return "\n".join(line for line in text.splitlines()[1:] if '"f32:scale", "i32:' not in line)


def test_gqa_variant_is_the_same_code_with_group_from_the_symbols():
    plain = attention_solution(get_workload("mha_fwd_d128")).splitlines()[1:]
    gqa = attention_solution(get_workload("mha_fwd_d128_gqa_h32_kv8")).splitlines()[1:]
    assert [a for a, b in zip(plain, gqa) if a != b] == [l for l in plain if '"i32:H", "i32:1"' in l]
    assert any('"i32:H // HKV"' in line for line in gqa)


def test_the_plain_backward_declines_gqa():
    assert [w.id for w in GQA_BACKWARD] == ["mha_bwd_d128_gqa_h32_kv8", "smoke_mha_bwd_d64_gqa_h4_kv2"]
    for w in GQA_BACKWARD:
        with pytest.raises(KeyError, match="no reference solution"):
            attention_solution(w)


@pytest.mark.parametrize("op", ["fwd", "bwd"])
def test_causal_variant_is_the_same_code_with_causal_on(op):
    plain = attention_solution(get_workload(f"mha_{op}_d128"))
    causal = attention_solution(get_workload(f"mha_{op}_d128_causal"))
    assert _plan_free(plain) == _plan_free(causal)
    assert causal.count('"f32:scale", "i32:1"]') == plain.count('"f32:scale", "i32:0"]') >= 1


@pytest.mark.parametrize("wid", [w.id for w in ATTENTION])
def test_solution_parses_for_every_attention_workload(wid):
    w = next(w for w in ATTENTION if w.id == wid)
    sol = parse_solution(attention_solution(w), w)
    assert not isinstance(sol, list), sol


@pytest.mark.parametrize("op", ["mha_fwd", "mha_bwd"])
def test_solution_compiles_without_spills(op):
    w = next(w for w in ATTENTION if w.op == op and "main" in w.tags)
    r = compile_source(attention_solution(w), "cuda", "sm_90a", w)
    assert r.status == "ok", r.errors
    for k in r.kernels.values():
        assert k.spill_stores == 0 and k.spill_loads == 0, k


@pytest.mark.gpu
@pytest.mark.parametrize("wid", [w.id for w in ATTENTION if "main" in w.tags or "smoke" in w.tags])
def test_reference_attention_passes(wid):
    from gpu_helpers import shared_evaluator

    w = next(w for w in ATTENTION if w.id == wid)
    smoke = "smoke" in w.tags
    # The full-size ncu profile of this CUDA-core reference takes about a minute a workload; the profile path is
    # covered by tests/tools/test_profile_gpu.py, so only the smoke shapes go through it here.
    options = EvalOptions(timeout_s=120, time=smoke, trials=None if smoke else 1, profile_on_pass=smoke)
    r = shared_evaluator().evaluate(wid, attention_solution(w), options)
    assert r.status == "PASSED", (r.message, r.runtime_error, r.plan_errors)
    if smoke:
        assert r.timing and r.timing.speedup > 0 and "cudnn_sdpa" in r.timing.baselines
        assert "flash_sdpa" in r.timing.baselines


@pytest.mark.gpu
def test_backward_passes_on_spiky_inputs():
    from gpu_helpers import shared_evaluator

    w = next(w for w in ATTENTION if w.id == "smoke_mha_bwd_d64")
    r = shared_evaluator().evaluate(w.id, attention_solution(w), EvalOptions(dist="spiky", time=False))
    assert r.status == "PASSED", r.message
    # every set spiky; the last call has the workload's other declared distribution (runner.declared_dists_check)
    assert [s.dist for s in r.correctness] == ["spiky"] * (len(r.correctness) - 3) + ["normal"] * 3
    for s in r.correctness:  # where the calibrated rule decided, the library's own error is recorded and respected
        assert s.rule in ("element", "library_x2"), s.rule
        if s.rule == "library_x2":
            assert s.library_max_abs_err is not None and s.library_rel_fro_err is not None
            assert s.max_abs_err <= w.tolerance.library_factor * s.library_max_abs_err + 1e-5


@pytest.mark.gpu
def test_a_very_slow_candidate_gets_a_short_flagged_timing():
    """The CUDA-core forward at full size runs at about 0.015x cuDNN: timed with 15 paired calls, not 160."""
    from gpu_helpers import shared_evaluator
    from ptxbench.tools.gpu.timing import SLOW_ITERS

    w = next(w for w in ATTENTION if w.id == "mha_fwd_d128")
    r = shared_evaluator().evaluate(w.id, attention_solution(w),
                                    EvalOptions(timeout_s=120, trials=1, profile_on_pass=False))
    assert r.status == "PASSED", r.message
    assert "slow_candidate" in r.timing.flags, r.timing.flags
    assert r.timing.candidate.n == SLOW_ITERS and r.timing.speedup < 1 / 20
    lo, hi = r.timing.speedup_ci
    assert lo <= r.timing.speedup <= hi
