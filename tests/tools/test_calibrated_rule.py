"""The calibrated correctness rule on the CPU: where the primary library itself misses the element rule on a
tensor, or nearly misses it (its worst element at half its allowance or more), an output passes within
Tolerance.library_factor (2) x the library's own error; NaN/Inf, unwritten and
degenerate outputs stay failures, and where the library passes nothing changes."""
from __future__ import annotations

import pytest
import torch

from ptxbench.tools.evaluate import _message
from ptxbench.tools.gpu.buffers import allocate_set
from ptxbench.tools.gpu.correctness import LIBRARY_ABS_SLACK, LibraryError, compare, library_error
from ptxbench.tools.gpu.verdict import judge
from ptxbench.tools.gpu.referee import TrialData
from ptxbench.tools.results import TrialStats
from ptxbench.workloads.inputs import make_inputs
from ptxbench.workloads.references import run_reference
from ptxbench.workloads.registry import WORKLOADS, get_workload
from ptxbench.workloads.schema import Tolerance

TOL = Tolerance(atol=1e-2, rtol=1e-2, max_rel_fro=3e-2)  # the rule's own numbers (the backward's bound is 1e-2)
REF = torch.linspace(-4.0, 4.0, 2000).reshape(40, 50)  # |ref| <= 4, so rtol * |ref| <= 0.04
MISSES = LibraryError(max_abs_err=0.1, rel_fro_err=0.004, passes_element_rule=False, baseline="cudnn_sdpa")
PASSES = LibraryError(max_abs_err=0.005, rel_fro_err=0.002, passes_element_rule=True, baseline="cudnn_sdpa")


def _with_error(delta: float, at=(3, 7)) -> torch.Tensor:
    out = REF.clone()
    out[at] += delta
    return out


def _judge(out, library, tol=TOL, **kw) -> TrialStats:
    return compare(out, REF, tol, trial=0, tensor="dQ", dist="spiky", library=library, **kw)


class Calls:
    """A library-error source that counts how often it is asked."""

    def __init__(self, lib: LibraryError | None):
        self.lib, self.n = lib, 0

    def __call__(self):
        self.n += 1
        return self.lib


# ---- the tolerance and the record ----
def test_factor_is_a_tolerance_field_defaulting_to_two():
    assert Tolerance().library_factor == 2.0
    assert {get_workload(w).tolerance.library_factor for w in WORKLOADS} == {2.0}


def test_old_trial_stats_load_with_the_element_rule():
    s = TrialStats.model_validate({"trial": 0, "tensor": "C", "passed": True, "max_abs_err": 0.001})
    assert s.rule == "element" and s.library_max_abs_err is None and s.library_rel_fro_err is None


def test_library_error_is_measured_against_the_reference():
    lib = library_error(_with_error(0.1), REF, TOL, "cudnn_sdpa")
    assert not lib.passes_element_rule and lib.calibrates and lib.baseline == "cudnn_sdpa"
    assert lib.max_abs_err == pytest.approx(0.1, abs=1e-6)
    assert lib.rel_fro_err == pytest.approx(0.1 / float(torch.linalg.vector_norm(REF)), rel=1e-4)
    rounded = library_error(REF.to(torch.bfloat16), REF, TOL)
    assert rounded.passes_element_rule and not rounded.calibrates and 0 < rounded.max_abs_err <= 4 * 2**-9
    assert 0 < rounded.allowance_used < 0.5  # bf16 rounding uses under half of the allowance: no calibration
    edge = library_error(_with_error(0.009, at=(20, 1)), REF, TOL)  # |ref| < 1 there: 90% of atol
    assert edge.passes_element_rule and edge.allowance_used == pytest.approx(0.9, rel=1e-3)
    assert edge.near_miss and edge.calibrates


# ---- the library within the rule but at its edge (cuDNN's backward on normal inputs) ----
def test_a_library_near_the_edge_of_the_element_rule_sets_the_bar():
    """A kernel as accurate as a library that nearly misses the rule, failing where the library happened to stay
    inside, passes within twice the library's error and says why; past twice it fails."""
    edge = LibraryError(max_abs_err=0.0142, rel_fro_err=0.0024, passes_element_rule=True, baseline="cudnn_sdpa",
                        allowance_used=0.99)
    s = _judge(_with_error(0.0102, at=(20, 1)), edge)  # |ref| < 1 there: fails the element rule by 2%
    assert s.passed and s.rule == "library_x2" and s.library_max_abs_err == 0.0142
    assert "cudnn_sdpa itself nearly misses the element rule (its worst element uses 99% of the allowance)" in s.note
    assert not _judge(_with_error(0.03, at=(20, 1)), edge).passed  # beyond 2 x 0.0142
    far = LibraryError(max_abs_err=0.003, rel_fro_err=0.001, passes_element_rule=True, baseline="cudnn_sdpa",
                       allowance_used=0.3)
    s = _judge(_with_error(0.0102, at=(20, 1)), far)  # a library well inside the rule: the strict rule decides
    assert not s.passed and s.rule == "element" and "its worst element at 30% of the allowance" in s.note


def test_a_library_with_non_finite_outputs_never_calibrates():
    out = REF.clone()
    out[0, 0] = float("nan")
    lib = library_error(out, REF, TOL, "cudnn_sdpa")
    assert not lib.passes_element_rule and not lib.calibrates
    s = _judge(_with_error(0.05), lib)
    assert not s.passed and s.rule == "element" and s.library_max_abs_err is None and "non-finite" in s.note


# ---- (a) the library passes the element rule: the strict rule decides ----
def test_library_within_the_element_rule_leaves_the_strict_rule():
    assert _judge(_with_error(0.005), PASSES).passed  # within atol: passes strictly, whatever the library
    s = _judge(_with_error(0.05), PASSES)
    assert not s.passed and s.rule == "element"
    assert s.library_max_abs_err == 0.005 and s.library_rel_fro_err == 0.002
    assert "cudnn_sdpa passes the element rule" in s.note and "strict rule applies" in s.note


def test_a_passing_candidate_never_asks_for_the_library_error():
    calls = Calls(MISSES)
    s = _judge(_with_error(0.005), calls)
    assert s.passed and s.rule == "element" and s.library_max_abs_err is None and calls.n == 0


# ---- (b) the library misses the element rule with max abs error E = 0.1 ----
def test_within_twice_the_library_error_passes_and_says_so():
    calls = Calls(MISSES)
    s = _judge(_with_error(0.15), calls)  # 1.5 E
    assert calls.n == 1
    assert s.passed and s.rule == "library_x2"
    assert s.frac_matched == pytest.approx(1 - 1 / REF.numel())  # the element rule alone would fail
    assert s.max_abs_err == pytest.approx(0.15, abs=1e-6)
    assert s.library_max_abs_err == 0.1 and s.library_rel_fro_err == 0.004
    assert "cudnn_sdpa itself misses the element rule" in s.note
    assert "max abs error 0.15 <= 0.2" in s.note and "relative Frobenius error" in s.note


def test_beyond_twice_the_library_error_fails():
    s = _judge(_with_error(0.3), MISSES)  # 3 E
    assert not s.passed and s.rule == "library_x2" and s.library_max_abs_err == 0.1
    assert "max abs error 0.3 > 0.2" in s.note


def test_the_absolute_slack_is_tiny():
    assert LIBRARY_ABS_SLACK == 1e-5
    assert _judge(_with_error(0.2 + 0.5e-5), MISSES).passed
    assert not _judge(_with_error(0.2 + 1e-4), MISSES).passed


def test_nan_fails_even_with_calibration_and_the_library_is_not_asked():
    out = _with_error(0.15)
    out[0, 0] = float("nan")
    calls = Calls(MISSES)
    s = _judge(out, calls)
    assert not s.passed and s.n_nan == 1 and s.rule == "element" and calls.n == 0


@pytest.mark.parametrize("make,words", [(torch.zeros_like, "all-zero"), (lambda r: torch.full_like(r, 0.5), "constant")])
def test_degenerate_outputs_fail_even_with_calibration(make, words):
    huge = LibraryError(max_abs_err=10.0, rel_fro_err=2.0, passes_element_rule=False, baseline="cudnn_sdpa")
    s = _judge(make(REF), huge)  # within 2x of this library's error on both counts, still degenerate
    assert not s.passed and words in s.note and s.rule == "element"


def test_unwritten_outputs_fail_even_with_calibration():
    s = _judge(_with_error(0.15), MISSES, unwritten=3)
    assert not s.passed and "never written" in s.note and s.rule == "element"


# ---- (c) the Frobenius side ----
def test_frobenius_bound_is_the_larger_of_the_workload_bound_and_twice_the_library():
    out = REF * 1.04  # relative Frobenius error 0.04, max abs 0.16 (within 2 x 0.1), element rule fails
    s = _judge(out, MISSES)  # bound max(0.03, 2 x 0.004) = 0.03
    assert s.rel_fro_err == pytest.approx(0.04, rel=1e-4) and s.max_abs_err == pytest.approx(0.16, rel=1e-4)
    assert not s.passed and s.rule == "library_x2" and "relative Frobenius error 0.04 > 0.03" in s.note
    loose = LibraryError(max_abs_err=0.1, rel_fro_err=0.025, passes_element_rule=False, baseline="cudnn_sdpa")
    s = _judge(out, loose)  # bound max(0.03, 2 x 0.025) = 0.05
    assert s.passed and "relative Frobenius error 0.04 <= 0.05" in s.note


def test_a_frobenius_only_failure_is_calibrated_too():
    tight = Tolerance(atol=1e-2, rtol=1e-2, max_rel_fro=1e-3)
    out = REF + 0.009 * torch.sign(REF)  # every element within atol; relative Frobenius ~0.0039 > 1e-3
    assert not _judge(out, None, tight).passed
    lib = LibraryError(max_abs_err=0.02, rel_fro_err=0.003, passes_element_rule=False)
    s = _judge(out, lib, tight)  # bounds: max abs 0.04, Frobenius 0.006
    assert s.passed and s.rule == "library_x2" and "the library itself misses" in s.note


# ---- the worker's judge() asks for the library error lazily ----
@pytest.fixture(scope="module")
def bwd():
    w = get_workload("smoke_mha_bwd_d64")
    x = make_inputs(w, 3, dist="spiky", device="cpu")
    return w, TrialData(x, {k: v.float() for k, v in run_reference(w, x).items()})


def _run(w, data, dq_error: float, errors: dict[str, LibraryError]):
    bufs = allocate_set([(t.name, w.shape(t.name), t.dtype, t.role) for t in w.tensors], [], device="cpu")
    bufs.load_inputs(data.inputs)
    for name, ref in data.reference.items():
        bufs.tensors[name].data.copy_(ref)
    bufs.tensors["dQ"].data[0, 0, 0, 0] = float(data.reference["dQ"][0, 0, 0, 0]) + dq_error
    calls = Calls(errors)
    return judge(bufs, data, w, 0, "spiky", calls), calls.n


def test_judge_asks_for_the_library_error_only_when_the_strict_rule_fails(bwd):
    w, data = bwd
    errors = {"dQ": MISSES, "dK": PASSES, "dV": PASSES}
    stats, calls = _run(w, data, 0.0, errors)
    assert calls == 0 and all(s.passed and s.rule == "element" for s in stats)
    stats, calls = _run(w, data, 0.15, errors)
    assert calls == 1
    assert [(s.tensor, s.passed, s.rule) for s in stats] == [
        ("dQ", True, "library_x2"), ("dK", True, "element"), ("dV", True, "element")]
    stats, calls = _run(w, data, float("nan"), errors)
    assert calls == 0 and not stats[0].passed and stats[0].n_nan == 1
    stats, _ = _run(w, data, 0.15, {**errors, "dQ": PASSES})
    assert not stats[0].passed and stats[0].rule == "element" and stats[0].library_max_abs_err == 0.005


def test_the_verdict_message_names_the_calibrated_rule():
    calibrated = _judge(_with_error(0.15), MISSES).model_dump()
    strict = _judge(REF.clone(), None).model_dump()
    text = _message({"status": "PASSED", "correctness": [calibrated, strict]})
    assert "1 of 2 outputs judged by rule library_x2" in text
    assert "judged by rule" not in _message({"status": "PASSED", "correctness": [strict]})
