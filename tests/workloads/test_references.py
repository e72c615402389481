"""References, input generation and library baselines, checked on the CPU at small shapes.

The attention references are compared with torch autograd and logsumexp in float64; the baselines'
aten calls run on 'meta' tensors (shape propagation through the installed torch's schemas), and on
a GPU the smoke workloads' baselines are compared with the references.
"""
from __future__ import annotations

import math

import pytest
import torch

from ptxbench.tools.gpu.correctness import compare, library_error
from ptxbench.workloads import references
from ptxbench.workloads.baselines import ATEN_SIGNATURES, _group_sum, make_baseline
from ptxbench.workloads.inputs import make_inputs
from ptxbench.workloads.references import gemm, mha_bwd, mha_fwd, run_reference
from ptxbench.workloads.registry import WORKLOADS, get_workload, list_workloads

F64 = torch.float64


def _rand(*shape, seed=0, dtype=F64):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=dtype)


def _naive_attention(q, k, v, scale, causal):
    """Dense softmax attention with autograd, K/V expanded to the query heads."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    s = (q @ k.transpose(-1, -2)) * scale
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(s, -1) @ v, s


def test_gemm_reference_is_a_times_b_transposed():
    a, b = _rand(5, 7), _rand(3, 7, seed=1)
    torch.testing.assert_close(gemm(a, b)["C"], a @ b.T)
    assert gemm(a.bfloat16(), b.bfloat16())["C"].dtype == torch.float32


@pytest.mark.parametrize("causal", [False, True])
def test_forward_output_and_lse(causal):
    q, k, v = _rand(2, 3, 16, 8), _rand(2, 3, 16, 8, seed=1), _rand(2, 3, 16, 8, seed=2)
    ref = mha_fwd(q, k, v, scale=0.3, causal=causal)
    o, s = _naive_attention(q, k, v, 0.3, causal)
    torch.testing.assert_close(ref["O"], o)
    torch.testing.assert_close(ref["LSE"], torch.logsumexp(s, -1))
    assert ref["LSE"].shape == (2, 3, 16)
    if causal:  # the first query sees only the first key
        torch.testing.assert_close(ref["LSE"][..., 0], 0.3 * (q[..., 0, :] * k[..., 0, :]).sum(-1))


def test_causal_future_keys_have_no_influence():
    q, k, v = _rand(1, 2, 12, 4), _rand(1, 2, 12, 4, seed=1), _rand(1, 2, 12, 4, seed=2)
    base = mha_fwd(q, k, v, scale=0.5, causal=True)
    k2, v2 = k.clone(), v.clone()
    k2[..., 7:, :] += 5.0
    v2[..., 7:, :] -= 3.0
    moved = mha_fwd(q, k2, v2, scale=0.5, causal=True)
    torch.testing.assert_close(moved["O"][..., :7, :], base["O"][..., :7, :])
    torch.testing.assert_close(moved["LSE"][..., :7], base["LSE"][..., :7])
    assert not torch.allclose(moved["O"][..., 7:, :], base["O"][..., 7:, :])
    # Without the mask the early rows do change.
    assert not torch.allclose(mha_fwd(q, k2, v2, scale=0.5, causal=False)["O"][..., :7, :],
                              mha_fwd(q, k, v, scale=0.5, causal=False)["O"][..., :7, :])


def test_gqa_forward_matches_expanded_heads():
    q, k, v = _rand(2, 6, 10, 4), _rand(2, 2, 10, 4, seed=1), _rand(2, 2, 10, 4, seed=2)
    ref = mha_fwd(q, k, v, scale=0.5, causal=False)
    full = mha_fwd(q, k.repeat_interleave(3, 1), v.repeat_interleave(3, 1), scale=0.5, causal=False)
    torch.testing.assert_close(ref["O"], full["O"])
    # query head 4 reads KV head 4 // 3 = 1
    one = mha_fwd(q[:, 4:5], k[:, 1:2], v[:, 1:2], scale=0.5, causal=False)
    torch.testing.assert_close(ref["O"][:, 4:5], one["O"])
    with pytest.raises(ValueError, match="divide"):
        mha_fwd(_rand(1, 5, 4, 4), _rand(1, 2, 4, 4), _rand(1, 2, 4, 4), scale=1.0, causal=False)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("h,hkv", [(3, 3), (3, 1), (4, 2)])  # MHA; one KV head; GQA groups of 2 (dK, dV summed)
def test_backward_matches_autograd(causal, h, hkv):
    q = _rand(2, h, 16, 8).requires_grad_()
    k, v = _rand(2, hkv, 16, 8, seed=1).requires_grad_(), _rand(2, hkv, 16, 8, seed=2).requires_grad_()
    do = _rand(2, h, 16, 8, seed=3)
    o, s = _naive_attention(q, k, v, 0.35, causal)
    o.backward(do)
    with torch.no_grad():
        ref = mha_bwd(q, k, v, o, do, torch.logsumexp(s, -1), scale=0.35, causal=causal)
    torch.testing.assert_close(ref["dQ"], q.grad)
    torch.testing.assert_close(ref["dK"], k.grad)
    torch.testing.assert_close(ref["dV"], v.grad)


@pytest.mark.parametrize("hkv", [3, 1])
def test_chunking_over_heads_and_rows_gives_the_same_result(monkeypatch, hkv):
    # with hkv = 1 a chunk of two heads splits the group of three: dK, dV add up across chunks
    q, do = _rand(2, 3, 24, 8, seed=0), _rand(2, 3, 24, 8, seed=3)
    k, v = _rand(2, hkv, 24, 8, seed=1), _rand(2, hkv, 24, 8, seed=2)
    whole_f = mha_fwd(q, k, v, scale=0.3, causal=True)
    whole_b = mha_bwd(q, k, v, whole_f["O"], do, whole_f["LSE"], scale=0.3, causal=True)
    assert whole_b["dK"].shape == whole_b["dV"].shape == (2, hkv, 24, 8)
    for budget in (24 * 24 * 2, 24 * 5):  # two heads per chunk; five rows per chunk
        monkeypatch.setattr(references, "SCORE_BUDGET", budget)
        blocks = list(references._chunks(6, 24, 24))
        assert len(blocks) > 1
        f = mha_fwd(q, k, v, scale=0.3, causal=True)
        b = mha_bwd(q, k, v, f["O"], do, f["LSE"], scale=0.3, causal=True)
        for name in ("O", "LSE"):
            torch.testing.assert_close(f[name], whole_f[name])
        for name in ("dQ", "dK", "dV"):
            torch.testing.assert_close(b[name], whole_b[name])


def test_float32_references_from_bf16_inputs():
    w = get_workload("smoke_mha_bwd_d64_causal")
    x = make_inputs(w, seed=1, device="cpu")
    out = run_reference(w, x)
    assert {n: (tuple(t.shape), t.dtype) for n, t in out.items()} == {
        n: ((1, 2, 256, 64), torch.float32) for n in ("dQ", "dK", "dV")}
    exact = {n: x[n].double() for n in ("Q", "K", "V", "dO")}
    o, s = _naive_attention(exact["Q"], exact["K"], exact["V"], w.symbols["scale"], True)
    ref64 = mha_bwd(exact["Q"], exact["K"], exact["V"], o, exact["dO"], torch.logsumexp(s, -1),
                    scale=w.symbols["scale"], causal=True)
    for n in ("dQ", "dK", "dV"):  # the bf16 O passed in is the only difference from exact arithmetic
        assert torch.linalg.norm(out[n].double() - ref64[n]) / torch.linalg.norm(ref64[n]) < 5e-3


def test_gqa_backward_workload_reference_and_inputs_match_autograd_of_the_expanded_heads():
    """smoke_mha_bwd_d64_gqa_h4_kv2 on the CPU: O and LSE are the GQA forward of the drawn inputs, and the
    reference's dK, dV are float64 autograd through K, V expanded to the query heads (so summed over each group)."""
    w = get_workload("smoke_mha_bwd_d64_gqa_h4_kv2")
    x = make_inputs(w, 2, device="cpu")
    assert {n: tuple(t.shape) for n, t in x.items()} == {n: w.shape(n) for n in ("Q", "K", "V", "O", "dO", "LSE")}
    fwd = run_reference(get_workload("smoke_mha_fwd_d64_gqa_h4_kv2"), {n: x[n] for n in ("Q", "K", "V")})
    torch.testing.assert_close(x["O"], fwd["O"].bfloat16())
    torch.testing.assert_close(x["LSE"], fwd["LSE"])
    out = run_reference(w, x)
    q, k, v = (x[n].double().requires_grad_() for n in ("Q", "K", "V"))
    o, s = _naive_attention(q, k, v, w.symbols["scale"], False)
    o.backward(x["dO"].double())
    exact = mha_bwd(*(x[n].double() for n in ("Q", "K", "V")), o.detach(), x["dO"].double(),
                    torch.logsumexp(s, -1).detach(), scale=w.symbols["scale"], causal=False)
    for n, grad in (("dQ", q.grad), ("dK", k.grad), ("dV", v.grad)):
        assert out[n].shape == grad.shape == w.shape(n)
        torch.testing.assert_close(exact[n], grad)  # the reference formulas with exact O and LSE
        # the bf16 O passed in is the only difference from exact arithmetic
        assert torch.linalg.norm(out[n].double() - grad) / torch.linalg.norm(grad) < 5e-3, n


def test_gqa_baseline_group_sum_matches_the_reference_grouping():
    """What the GQA backward baselines add to the library call: per-query-head dK, dV summed over each group
    (query head i = j * group + g to KV head j), equal to autograd's gradient of the unexpanded K, V."""
    w = get_workload("smoke_mha_bwd_d64_gqa_h4_kv2")
    x = make_inputs(w, 3, device="cpu")
    q = x["Q"].double().requires_grad_()
    k, v = (x[n].double().requires_grad_() for n in ("K", "V"))
    group = int(w.symbols["H"]) // int(w.symbols["HKV"])
    ke, ve = (t.repeat_interleave(group, 1).detach().requires_grad_() for t in (k, v))  # what the library sees
    o, _ = _naive_attention(q, ke, ve, w.symbols["scale"], False)
    o.backward(x["dO"].double())
    reduce, sums = _group_sum({n: t.double() for n, t in x.items()})
    assert set(sums) == {"dK", "dV"}  # the buffers every call writes in full (LibraryCall.outputs)
    summed = reduce({"dQ": q.grad, "dK": ke.grad, "dV": ve.grad})
    o2, _ = _naive_attention(q.detach(), k, v, w.symbols["scale"], False)
    o2.backward(x["dO"].double())
    torch.testing.assert_close(summed["dK"], k.grad)
    torch.testing.assert_close(summed["dV"], v.grad)
    assert summed["dQ"] is q.grad
    mha = get_workload("smoke_mha_bwd_d64")
    grads = {"dQ": q.grad}
    plain, no_buffers = _group_sum(make_inputs(mha, 3, device="cpu"))
    assert plain(grads) is grads and no_buffers == {}  # without GQA: untouched, and nothing kept


def test_inputs_are_seeded_fresh_and_typed():
    w = get_workload("smoke_gemm_bf16_m256_n256_k512")
    a, b, c = make_inputs(w, 7, device="cpu"), make_inputs(w, 7, device="cpu"), make_inputs(w, 8, device="cpu")
    assert set(a) == {"A", "B"}
    assert a["A"].dtype == torch.bfloat16 and a["A"].shape == (256, 512) and a["B"].shape == (256, 512)
    assert torch.equal(a["A"], b["A"]) and torch.equal(a["B"], b["B"])
    assert not torch.equal(a["A"], c["A"]) and not torch.equal(a["A"], a["B"])
    assert 0.9 < a["A"].float().std() < 1.1
    with pytest.raises(ValueError, match="spiky"):
        make_inputs(w, 0, dist="uniform", device="cpu")


def test_spiky_inputs_have_heavy_tails():
    w = get_workload("smoke_mha_bwd_d64")
    normal, spiky = make_inputs(w, 3, device="cpu"), make_inputs(w, 3, dist="spiky", device="cpu")
    # V as drawn (Q carries the offset heads' long rows, dO their damping: workloads/inputs.py)
    assert normal["V"].abs().max() < 6.5
    assert spiky["V"].abs().max() > 10
    kurtosis = lambda t: float((t.float() ** 4).mean() / (t.float() ** 2).mean() ** 2)  # noqa: E731
    assert kurtosis(spiky["V"]) > 2 * kurtosis(normal["V"])


@pytest.mark.parametrize("dist", ["normal", "spiky"])
def test_backward_inputs_are_consistent_with_the_forward(dist):
    w = get_workload("smoke_mha_bwd_d64_causal")
    x = make_inputs(w, 5, dist=dist, device="cpu")
    assert list(x) == ["Q", "K", "V", "O", "dO", "LSE"]
    assert x["O"].dtype == torch.bfloat16 and x["LSE"].dtype == torch.float32 and x["LSE"].shape == (1, 2, 256)
    fwd = run_reference(get_workload("smoke_mha_fwd_d64_causal"), {n: x[n] for n in ("Q", "K", "V")})
    torch.testing.assert_close(x["O"], fwd["O"].bfloat16())
    torch.testing.assert_close(x["LSE"], fwd["LSE"])
    assert not torch.equal(x["dO"], x["O"])


@pytest.mark.parametrize("op", sorted(ATEN_SIGNATURES))
def test_aten_schemas_match_the_calls(op):
    schema = getattr(torch.ops.aten, op).default._schema
    assert [a.name for a in schema.arguments] == ATEN_SIGNATURES[op]
    assert [a.name for a in schema.arguments if a.kwarg_only] == ["scale"]


def _meta_inputs(w):
    return {t.name: torch.empty(w.shape(t.name), dtype=getattr(torch, t.dtype), device="meta") for t in w.inputs}


@pytest.mark.parametrize("wid", list(WORKLOADS))
def test_baselines_run_on_meta_tensors_with_the_workload_shapes(wid):
    w = get_workload(wid)
    x = _meta_inputs(w)
    for b in w.baselines:
        out = make_baseline(w, b.name, x)()
        assert {n: tuple(t.shape) for n, t in out.items()} == {t.name: w.shape(t.name) for t in w.outputs}, b.name
        assert all(out[t.name].dtype == getattr(torch, t.dtype) for t in w.outputs), b.name


def test_baseline_errors_and_cublas_on_cpu():
    w = get_workload("smoke_gemm_bf16_m256_n256_k512")
    x = make_inputs(w, 0, device="cpu")
    with pytest.raises(KeyError, match="cublas"):
        make_baseline(w, "cudnn_sdpa", x)
    run = make_baseline(w, "cublas", x)
    c = run()["C"]
    assert run()["C"] is c  # preallocated output
    ref = run_reference(w, x)["C"]
    assert torch.linalg.norm(c.float() - ref) / torch.linalg.norm(ref) < w.tolerance.max_rel_fro


def _passes(out: torch.Tensor, ref: torch.Tensor, tol) -> bool:
    err = (out.float() - ref).abs()
    element_ok = bool(((err <= tol.atol) | (err <= tol.rtol * ref.abs())).all())
    return element_ok and float(torch.linalg.norm(out.float() - ref) / torch.linalg.norm(ref)) <= tol.max_rel_fro


# Measured on the H200 (2026-11-29, bench/results/h200-examples.md): cuDNN's bf16 backward misses the 1e-2 element
# rule on dQ for the heavy-tailed 'spiky' inputs. The harness calibrates for it: where the primary library misses
# the element rule, an output is held to Tolerance.library_factor (2) x the library's own error (rule "library_x2",
# tools/gpu/correctness.py; checked by test_library_passes_its_own_calibrated_rule_on_spiky_backward below).
# Kept as a strict xfail: it documents the library fact and fails loudly if a library or torch update changes it.
# Since the backward's inputs carry the forward's offset heads with those rows' dO damped (workloads/inputs.py),
# cuDNN meets the strict rule on smoke_mha_bwd_d64_causal's spiky draw (seed 11; an H100, 2026-12-06) and still misses
# it on the other two (dV on smoke_mha_bwd_d64): the miss is a property of the draw, so the xfail names the draws that
# miss.
_SPIKY_BWD_MISSES = ("smoke_mha_bwd_d64", "smoke_mha_bwd_d64_gqa_h4_kv2")
_SPIKY_BWD = pytest.mark.xfail(strict=True, reason="cuDNN bwd misses the 1e-2 element rule on spiky inputs (H200)")
_CASES = [pytest.param(w.id, dist, marks=_SPIKY_BWD if (dist == "spiky" and w.id in _SPIKY_BWD_MISSES) else ())
          for w in list_workloads(tags=["smoke"]) for dist in w.input_dist]


@pytest.mark.gpu
@pytest.mark.parametrize("wid,dist", _CASES)
def test_baselines_match_the_reference_on_gpu(wid, dist):
    w = get_workload(wid)
    x = make_inputs(w, 11, dist=dist, device="cuda")
    ref = run_reference(w, x)
    for b in w.baselines:
        out = make_baseline(w, b.name, x)()
        torch.cuda.synchronize()
        for t in w.outputs:
            assert _passes(out[t.name], ref[t.name], w.tolerance.for_tensor(t.name)), f"{b.name} {t.name} {dist}"
    assert math.isfinite(w.flops)


_SPIKY_BWD_SMOKE = [w.id for w in list_workloads(tags=["smoke"]) if w.op == "mha_bwd" and "spiky" in w.input_dist]


@pytest.mark.gpu
@pytest.mark.parametrize("wid", _SPIKY_BWD_SMOKE)
def test_library_passes_its_own_calibrated_rule_on_spiky_backward(wid):
    """cuDNN's output judged as a candidate, with its own error as the library error: the calibrated rule is used
    where the strict rule fails (on the draws of _SPIKY_BWD_MISSES), it passes, and the verdict records the library's
    errors."""
    w = get_workload(wid)
    x = make_inputs(w, 11, dist="spiky", device="cuda")
    ref = {n: t.float() for n, t in run_reference(w, x).items()}
    primary = w.primary_baseline.name
    out = make_baseline(w, primary, x)()
    torch.cuda.synchronize()
    calibrated = []
    for t in w.outputs:
        lib = library_error(out[t.name], ref[t.name], w.tolerance, primary)
        s = compare(out[t.name], ref[t.name], w.tolerance, trial=0, tensor=t.name, dist="spiky", library=lib)
        assert s.passed, (t.name, s.note)
        if s.rule != "element":
            assert s.rule == "library_x2" and not lib.passes_element_rule and "misses the element rule" in s.note
            assert s.library_max_abs_err == lib.max_abs_err and s.library_rel_fro_err == lib.rel_fro_err
            assert s.max_abs_err == pytest.approx(lib.max_abs_err) and s.frac_matched < 1.0
            calibrated.append(t.name)
    assert bool(calibrated) == (wid in _SPIKY_BWD_MISSES), "the strict rule's verdict differs from the xfail above"


@pytest.mark.gpu
def test_referee_measures_the_library_error_once_per_inputs():
    from ptxbench.tools.gpu.referee import RefereeCore

    w = get_workload("smoke_mha_bwd_d64")
    core = RefereeCore("cuda")
    core.prepare(w.id, 11, "spiky")
    spiky = core._library_errors((w.id, 11, "spiky"))
    assert set(spiky) == {"dQ", "dK", "dV"}
    assert all(e.baseline == "cudnn_sdpa" and math.isfinite(e.max_abs_err) and e.rel_fro_err < 1 for e in spiky.values())
    assert any(e.calibrates for e in spiky.values())  # the library misses the element rule on spiky inputs
    assert core._library_errors((w.id, 11, "spiky")) is spiky  # cached per (workload, seed, dist)
    core.prepare(w.id, 11, "normal")
    normal = core._library_errors((w.id, 11, "normal"))
    # within the rule on normal inputs; it sets the bar only where its worst element nears the rule's edge
    assert all(e.passes_element_rule and e.calibrates == e.near_miss for e in normal.values())
