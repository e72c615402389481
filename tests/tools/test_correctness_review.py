"""Wrong outputs a kernel under optimisation pressure writes, judged by the referee's own path (verdict.judge_outputs
with the registry's tolerances and make_inputs' draws, on the CPU): each must fail with a message that says where, and
the honest bf16 arithmetic must keep passing.

The backward's damped rows: make_inputs scales dO by 2^-10 on the offset rows (LSE > 50), so their dQ is about 2e-5, a
thousandth of atol; judged as written, a dQ of zeros there, or one computed from bf16-rounded scores (off by a quarter
at scores of 100), passed. They are judged scaled back to a plain row's size (inputs.judging_weights)."""
from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from ptxbench.tools.gpu.correctness import compare, library_error  # noqa: E402
from ptxbench.tools.gpu.referee import TrialData  # noqa: E402
from ptxbench.tools.gpu.verdict import judge_outputs, status_of  # noqa: E402
from ptxbench.workloads.inputs import DO_DAMP, damped_rows, judging_weights, make_inputs  # noqa: E402
from ptxbench.workloads.references import run_reference  # noqa: E402
from ptxbench.workloads.registry import get_workload, list_workloads  # noqa: E402

BF = torch.bfloat16


def _case(wid: str, seed: int = 5, dist: str = "normal", **symbols):
    wl = get_workload(wid)
    wl.symbols.update(symbols)
    inp = make_inputs(wl, seed, dist, "cpu")
    return wl, TrialData(inp, {k: v.float() for k, v in run_reference(wl, inp).items()})


def _judge(wl, data, out: dict) -> dict:
    stats = judge_outputs(out, data.inputs, data, wl, 0, "normal")
    return {s.tensor: s for s in stats}


# ---- the backward's damped rows ----

def _bwd_case(causal: bool):
    return _case("mha_bwd_d64" + ("_causal" if causal else ""), B=1, H=4, S=512, D=64, scale=1 / 8)


def _bwd(wl, inp, *, dq_scores=None, dq_damped_zero: bool = False) -> dict:
    """FlashAttention's backward in a kernel's precisions (P and dS rounded to bf16 as operands, fp32 sums); dQ from a
    P of its own (a separate dQ pass) whose scores are rounded to `dq_scores`, or zero on the damped rows."""
    q, k, v, o, do, lse = (inp[n].float() for n in ("Q", "K", "V", "O", "dO", "LSE"))
    scale = wl.symbols["scale"]

    def probs(dtype=None):
        s = q @ k.transpose(-1, -2) * scale
        s = s if dtype is None else s.to(dtype).float()
        if wl.causal:
            s = s.masked_fill(torch.ones(s.shape[-2], s.shape[-1], dtype=torch.bool).triu(1), float("-inf"))
        return torch.exp(s - lse[..., None])

    def grad_s(p):
        return (p * (do @ v.transpose(-1, -2) - (do * o).sum(-1, keepdim=True))).to(BF).float()

    p = probs()
    dk = grad_s(p).transpose(-1, -2) @ q * scale
    dq = grad_s(probs(dq_scores)) @ k * scale
    if dq_damped_zero:
        dq = torch.where(damped_rows(inp["LSE"]), 0.0, dq)
    return {"dQ": dq.to(BF), "dK": dk.to(BF), "dV": (p.to(BF).float().transpose(-1, -2) @ do).to(BF)}


@pytest.mark.parametrize("causal", [False, True])
def test_a_dq_wrong_only_on_the_damped_rows_fails(causal):
    wl, data = _bwd_case(causal)
    assert damped_rows(data.inputs["LSE"]).any()  # one offset head of four
    honest = _judge(wl, data, _bwd(wl, data.inputs))
    assert all(s.passed and s.rel_fro_err < 4e-3 for s in honest.values()), honest
    for bug in (dict(dq_damped_zero=True), dict(dq_scores=BF)):
        got = _judge(wl, data, _bwd(wl, data.inputs, **bug))
        assert not got["dQ"].passed and got["dK"].passed and got["dV"].passed, (bug, got)
        assert "judged scaled back by 2^10" in got["dQ"].note
        assert damped_rows(data.inputs["LSE"])[tuple(got["dQ"].worst_index[:3])]  # located on a damped row


def test_the_worst_element_is_reported_as_written_while_judged_at_natural_size():
    wl, data = _bwd_case(False)
    out = _bwd(wl, data.inputs, dq_damped_zero=True)
    st = _judge(wl, data, out)["dQ"]
    i = tuple(st.worst_index)
    assert st.worst_value == 0.0 and st.worst_expected == pytest.approx(float(data.reference["dQ"][i]))
    assert abs(st.worst_expected) < 1e-3 < st.max_abs_err  # the error is in the judged units: 2^10 times larger


def test_judging_weights_undo_exactly_the_damping_of_do():
    wl, data = _bwd_case(True)
    w = judging_weights(wl, data.inputs)
    assert set(w) == {"dQ"}  # dK and dV sum over rows: nothing to undo there
    damped = damped_rows(data.inputs["LSE"])
    assert torch.equal(w["dQ"].factor, torch.where(damped, 1 / DO_DAMP, 1.0))
    assert judging_weights(get_workload("mha_fwd_d64"), {}) == {}
    assert judging_weights(get_workload("gemm_bf16_m8192_n7168_k5120"), {}) == {}


def test_the_library_error_is_measured_in_the_judged_units():
    """Otherwise a library wrong on the damped rows would look exact there, and calibrate nothing it should."""
    wl, data = _bwd_case(False)
    lib = _bwd(wl, data.inputs, dq_damped_zero=True)["dQ"]
    tol = wl.tolerance.for_tensor("dQ")
    plain = library_error(lib, data.reference["dQ"], tol)
    judged = library_error(lib, data.reference["dQ"], tol, weight=judging_weights(wl, data.inputs)["dQ"])
    assert plain.passes_element_rule and not judged.passes_element_rule
    assert judged.max_abs_err > 100 * plain.max_abs_err


# ---- the other wrong outputs of the review: caught, and located ----

def _fwd_case(causal: bool = True):
    return _case("mha_fwd_d64" + ("_causal" if causal else ""), B=1, H=4, S=512, D=64, scale=1 / 8)


def _honest_fwd(data) -> dict:
    return {"O": data.reference["O"].to(BF), "LSE": data.reference["LSE"].clone()}


def test_honest_rounding_passes():
    wl, data = _fwd_case()
    assert all(s.passed for s in _judge(wl, data, _honest_fwd(data)).values())


@pytest.mark.parametrize("factor", [1.015, 0.985])
def test_a_nearly_right_output_fails_on_its_frobenius_error(factor):
    """O off by 1.5% everywhere: nearly every element inside atol (O is ~0.03 at S = 4096, ~0.07 here), the relative
    Frobenius error is not."""
    wl, data = _fwd_case(False)
    out = _honest_fwd(data)
    out["O"] = (data.reference["O"] * factor).to(BF)
    st = _judge(wl, data, out)["O"]
    assert not st.passed and st.frac_matched > 0.9 and st.rel_fro_err > wl.tolerance.max_rel_fro


def test_zeros_where_the_reference_is_below_atol_fail():
    """The element rule alone passes a zero wherever |ref| < atol (a third of O's elements at S = 4096, a tenth
    here)."""
    wl, data = _fwd_case(False)
    out = _honest_fwd(data)
    ref = data.reference["O"]
    out["O"] = torch.where(ref.abs() < 1e-2, 0.0, ref).to(BF)
    st = _judge(wl, data, out)["O"]
    assert (ref.abs() < 1e-2).float().mean() > 0.05
    assert not st.passed and st.frac_matched == 1.0 and "Frobenius" in st.note


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_values_fail_as_nan_and_are_located(bad):
    wl, data = _fwd_case()
    out = _honest_fwd(data)
    out["O"][0, 2, 300, 7] = bad
    stats = judge_outputs(out, data.inputs, data, wl, 0, "normal")
    st = next(s for s in stats if s.tensor == "O")
    assert status_of(stats) == "INCORRECT_NAN" and st.worst_index == [0, 2, 300, 7]


def test_denormal_output_fails():
    """Values the right shape but 2^-130 the size (bf16 denormals): no real output."""
    wl, data = _fwd_case()
    out = _honest_fwd(data)
    out["O"] = (data.reference["O"] * 2.0 ** -130).to(BF)
    assert bool((out["O"] != 0).any())
    assert not _judge(wl, data, out)["O"].passed


def test_only_the_first_rows_computed_well_fails_on_the_later_blocks():
    """Rows 0-255 of each head exact, the later ones 5% off: a causal output's norm is its first rows'."""
    wl, data = _fwd_case(True)
    out = _honest_fwd(data)
    ref = data.reference["O"]
    late = torch.arange(ref.shape[-2])[:, None] >= 256
    out["O"] = torch.where(late, ref * 1.05, ref).to(BF)
    st = _judge(wl, data, out)["O"]
    assert not st.passed, st
    assert "the first at [0, 0, 256, 0]" in st.note  # where the bad rows start, as an index of O
    assert "elements [0, 2, 256, 0]..[0, 2, 383, 63] (consecutive" in st.note  # the worst block, likewise


def test_a_partly_written_output_is_named_and_located():
    """The harness poisons outputs before every call; what a kernel leaves is the poison, never a stale right answer."""
    from ptxbench.tools.gpu.buffers import poison_

    wl, data = _fwd_case()
    out = _honest_fwd(data)
    poison_(out["O"][:, 3, 448:])  # the last row tile of the last head never written
    stats = judge_outputs(out, data.inputs, data, wl, 0, "normal")
    st = next(s for s in stats if s.tensor == "O")
    assert status_of(stats) == "INCORRECT_NAN" and "4096 of 131072 elements were never written" in st.note
    assert st.worst_index == [0, 3, 448, 0] and "the first at [0, 3, 448, 0], the last at [0, 3, 511, 63]" in st.note


def test_an_lse_off_by_a_little_fails_its_own_rule():
    wl, data = _fwd_case()
    out = _honest_fwd(data)
    out["LSE"] = data.reference["LSE"] + 5e-3  # O exact, LSE a twentieth of an ulp of bf16 at 8 off
    got = _judge(wl, data, out)
    assert got["O"].passed and not got["LSE"].passed


def test_a_head_given_its_neighbours_output_fails():
    """Heads share their statistics (same RMS, same spread): only the values tell a wrong head mapping."""
    wl, data = _fwd_case(False)
    out = _honest_fwd(data)
    out["O"][:, 1] = out["O"][:, 0]
    out["LSE"][:, 1] = out["LSE"][:, 0]
    got = _judge(wl, data, out)
    assert not got["O"].passed and got["O"].worst_index[1] == 1


def test_the_message_gives_the_expected_value_of_one_element_only():
    """The worst element's expected value helps locate a bug; nothing else of the reference is in the verdict."""
    wl, data = _fwd_case()
    out = _honest_fwd(data)
    out["O"] = torch.zeros_like(out["O"])
    st = _judge(wl, data, out)["O"]
    dumped = st.model_dump_json()
    ref = data.reference["O"].reshape(-1)
    shown = [f"{float(x):.6g}" for x in ref[:64] if abs(float(x)) > 1e-3]
    assert sum(s in dumped for s in shown) <= 1


def test_a_gemm_from_quantised_operands_fails_on_the_element_rule():
    """C's near-zero elements leave no room: 8-bit operands with a per-32 scale pass a Frobenius bound of 1e-2."""
    wl, data = _case("gemm_bf16_m64_n7168_k5120", 3, M=64, N=256, K=1024)
    a, b = (data.inputs[n].float() for n in ("A", "B"))

    def int8_blocks(x):
        xb = x.reshape(x.shape[0], -1, 32)
        s = xb.abs().amax(-1, keepdim=True) / 127
        return (torch.round(xb / s) * s).reshape(x.shape)

    st = _judge(wl, data, {"C": (int8_blocks(a) @ int8_blocks(b).T).to(BF)})["C"]
    assert not st.passed and st.frac_matched < 1.0
    assert compare((a @ b.T).to(BF), data.reference["C"], wl.tolerance, trial=0, tensor="C").passed


_BWD_SMOKE = [w.id for w in list_workloads(tags=["smoke"]) if w.op == "mha_bwd"]


@pytest.mark.gpu
@pytest.mark.parametrize("wid", _BWD_SMOKE)
def test_both_libraries_pass_the_backward_with_dq_judged_at_natural_size(wid):
    """cuDNN and FlashAttention's backward, each judged as a candidate by the referee (its damped dQ rows scaled back,
    cuDNN's error calibrating where it nearly misses) on normal draws: honest kernels keep passing."""
    from ptxbench.tools.gpu.referee import RefereeCore
    from ptxbench.workloads.baselines import make_baseline

    wl = get_workload(wid)
    core = RefereeCore("cuda")
    for seed in (11, 12, 13):
        core.prepare(wid, seed, "normal")
        data = core.data[(wid, seed, "normal")]
        assert damped_rows(data.inputs["LSE"]).any()
        for b in wl.baselines:
            out = make_baseline(wl, b.name, data.inputs)()
            torch.cuda.synchronize()
            stats = core.judge(wid, seed, "normal", 0, out, data.inputs)
            assert all(s["passed"] for s in stats), (b.name, seed, [(s["tensor"], s["note"]) for s in stats])
