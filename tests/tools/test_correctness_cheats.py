"""Outputs a cheating kernel could produce, built on the CPU and judged by the harness's own rule
(correctness.compare with the registry's tolerances): each must fail, while the honest bf16 arithmetic (fp32
accumulation, P and dS rounded to bf16) keeps passing with margin."""
from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from ptxbench.tools.gpu.correctness import compare  # noqa: E402
from ptxbench.workloads.inputs import make_inputs  # noqa: E402
from ptxbench.workloads.references import run_reference  # noqa: E402
from ptxbench.workloads.registry import get_workload  # noqa: E402

BF = torch.bfloat16


def _fp8(x: torch.Tensor, dim: int) -> torch.Tensor:
    """x through scaled fp8 e4m3 (one scale per slice along `dim`), as a scaled fp8 GEMM's operand."""
    sc = 448.0 / x.abs().amax(dim=dim, keepdim=True).clamp_min(1e-30)
    return (x * sc).to(torch.float8_e4m3fn).float() / sc


def _bwd_case(s: int = 2048, d: int = 64, seed: int = 3):
    wl = get_workload("mha_bwd_d64")
    wl.symbols.update({"B": 1, "H": 1, "S": s, "D": d, "scale": 1 / math.sqrt(d)})
    inp = make_inputs(wl, seed, "normal", "cpu")
    return wl, inp, run_reference(wl, inp)


def _bwd(wl, inp, fp8_rows: float = 0.0) -> dict[str, torch.Tensor]:
    """FlashAttention's backward in the kernel's precisions; dQ = dS K and dK = dS^T Q in scaled fp8 for the last
    `fp8_rows` of their rows (a per-tile switch: 2 of the 5 GEMMs at twice the wgmma rate there)."""
    q, k, v, o, do, lse = (inp[n].float() for n in ("Q", "K", "V", "O", "dO", "LSE"))
    scale = wl.symbols["scale"]
    p = torch.exp(q @ k.transpose(-1, -2) * scale - lse[..., None])
    dv = p.to(BF).float().transpose(-1, -2) @ do
    ds = p * (do @ v.transpose(-1, -2) - (do * o).sum(-1, keepdim=True))
    dq, dk = (ds.to(BF).float() @ k) * scale, (ds.to(BF).float().transpose(-1, -2) @ q) * scale
    if fp8_rows:
        c = int(q.shape[-2] * (1 - fp8_rows))
        dq[..., c:, :] = ((_fp8(ds, -1) @ _fp8(k, -2)) * scale)[..., c:, :]
        dk[..., c:, :] = ((_fp8(ds, -2).transpose(-1, -2) @ _fp8(q, -2)) * scale)[..., c:, :]
    return {"dQ": dq.to(BF), "dK": dk.to(BF), "dV": dv.to(BF)}


def _verdicts(out, ref, tol):
    return {n: compare(out[n], r, tol, trial=0, tensor=n) for n, r in ref.items()}


def test_backward_with_half_its_dq_dk_tiles_in_fp8_fails():
    """The backward's relative Frobenius bound was 3e-2, 10x the honest error: dQ and dK half in fp8 (2.6e-2 at
    S = 4096, every element inside the element rule since the gradients are ~0.03) passed."""
    wl, inp, ref = _bwd_case()
    honest = _verdicts(_bwd(wl, inp), ref, wl.tolerance)
    assert all(s.passed and s.rel_fro_err < 3e-3 for s in honest.values()), honest
    cheat = _verdicts(_bwd(wl, inp, fp8_rows=0.5), ref, wl.tolerance)
    for n in ("dQ", "dK"):
        assert cheat[n].frac_matched == 1.0  # the element rule alone lets it through
        assert 1e-2 < cheat[n].rel_fro_err < 3e-2 and not cheat[n].passed, cheat[n]
