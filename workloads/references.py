"""Torch references for every workload op, computed in float32 (float64 inputs stay float64).

Attention is computed in chunks of heads and query rows, so the full 4 x 48 x 4096 x 4096 problem fits
in GPU memory: at most `SCORE_BUDGET` score elements live at once (a few of them in the backward).
`run_reference(workload, inputs)` returns each output tensor by name.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch

from .schema import Workload

SCORE_BUDGET = 1 << 27  # fp32 score elements per chunk: 512 MB


def _up(x: torch.Tensor) -> torch.Tensor:
    return x if x.dtype == torch.float64 else x.float()


@contextmanager
def full_precision() -> Iterator[None]:
    """No TF32 in references, whatever the caller set."""
    saved = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(saved)


def gemm(A: torch.Tensor, B: torch.Tensor) -> dict[str, torch.Tensor]:
    """C = A @ B^T with A[M,K], B[N,K]."""
    return {"C": _up(A) @ _up(B).T}


def _kv_index(b: int, h: int, hkv: int, device: torch.device) -> torch.Tensor:
    """For each flattened (batch, query head), its flattened (batch, KV head): query head i reads KV head i // (h // hkv)."""
    if h % hkv:
        raise ValueError(f"{h} query heads do not divide evenly over {hkv} KV heads")
    qh = torch.arange(b * h, device=device)
    return (qh // h) * hkv + (qh % h) // (h // hkv)


def _chunks(n_heads: int, s_q: int, s_k: int) -> Iterator[tuple[int, int, int, int]]:
    """(head0, head1, row0, row1) blocks whose score matrices hold at most SCORE_BUDGET elements."""
    heads = max(1, SCORE_BUDGET // (s_q * s_k))
    rows = s_q if heads > 1 or s_q * s_k <= SCORE_BUDGET else max(1, SCORE_BUDGET // s_k)
    for h0 in range(0, n_heads, heads):
        for r0 in range(0, s_q, rows):
            yield h0, min(h0 + heads, n_heads), r0, min(r0 + rows, s_q)


def _scores(q: torch.Tensor, k: torch.Tensor, scale: float, causal: bool, r0: int) -> torch.Tensor:
    """scale * q k^T for query rows r0.. ; causal masks key j > query i with -inf."""
    s = (q @ k.transpose(-1, -2)) * scale
    if causal:
        rows = torch.arange(r0, r0 + q.shape[-2], device=q.device)[:, None]
        cols = torch.arange(k.shape[-2], device=q.device)[None, :]
        s = s.masked_fill(cols > rows, float("-inf"))
    return s


def mha_fwd(Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor, *, scale: float, causal: bool) -> dict[str, torch.Tensor]:
    """O = softmax(scale Q K^T) V and LSE (natural log) for Q[B,H,S,D], K/V[B,HKV,S,D] (HKV divides H)."""
    b, h, s_q, d = Q.shape
    hkv, s_k = K.shape[1], K.shape[2]
    q, k, v = Q.reshape(b * h, s_q, d), K.reshape(b * hkv, s_k, d), V.reshape(b * hkv, s_k, V.shape[-1])
    kv = _kv_index(b, h, hkv, Q.device)
    dtype = _up(Q[:0]).dtype
    out = torch.empty(b * h, s_q, V.shape[-1], dtype=dtype, device=Q.device)
    lse = torch.empty(b * h, s_q, dtype=dtype, device=Q.device)
    for h0, h1, r0, r1 in _chunks(b * h, s_q, s_k):
        idx = kv[h0:h1]
        s = _scores(_up(q[h0:h1, r0:r1]), _up(k[idx]), scale, causal, r0)
        lse_c = torch.logsumexp(s, dim=-1)
        out[h0:h1, r0:r1] = torch.exp(s - lse_c[..., None]) @ _up(v[idx])
        lse[h0:h1, r0:r1] = lse_c
    return {"O": out.reshape(b, h, s_q, -1), "LSE": lse.reshape(b, h, s_q)}


def mha_bwd(Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor, O: torch.Tensor, dO: torch.Tensor, LSE: torch.Tensor,
            *, scale: float, causal: bool) -> dict[str, torch.Tensor]:
    """dQ, dK, dV by the FlashAttention backward, from the given O and LSE (not recomputed).

    P = exp(S - LSE); dV = P^T dO; dP = dO V^T; Dr = rowsum(dO * O); dS = P (dP - Dr);
    dQ = scale dS K; dK = scale dS^T Q. With GQA, dK and dV sum over the query heads sharing a KV head.
    """
    b, h, s_q, d = Q.shape
    hkv, s_k, dv = K.shape[1], K.shape[2], V.shape[-1]
    q, k, v = Q.reshape(b * h, s_q, d), K.reshape(b * hkv, s_k, d), V.reshape(b * hkv, s_k, dv)
    o, do, lse = O.reshape(b * h, s_q, dv), dO.reshape(b * h, s_q, dv), LSE.reshape(b * h, s_q)
    kv = _kv_index(b, h, hkv, Q.device)
    dtype = _up(Q[:0]).dtype
    dq = torch.empty(b * h, s_q, d, dtype=dtype, device=Q.device)
    dk = torch.zeros(b * hkv, s_k, d, dtype=dtype, device=Q.device)
    dvv = torch.zeros(b * hkv, s_k, dv, dtype=dtype, device=Q.device)
    for h0, h1, r0, r1 in _chunks(b * h, s_q, s_k):
        idx = kv[h0:h1]
        qc, kc, vc = _up(q[h0:h1, r0:r1]), _up(k[idx]), _up(v[idx])
        doc, oc = _up(do[h0:h1, r0:r1]), _up(o[h0:h1, r0:r1])
        p = torch.exp(_scores(qc, kc, scale, causal, r0) - _up(lse[h0:h1, r0:r1])[..., None])
        dvv.index_add_(0, idx, p.transpose(-1, -2) @ doc)
        ds = p * (doc @ vc.transpose(-1, -2) - (doc * oc).sum(-1, keepdim=True))
        del p
        dq[h0:h1, r0:r1] = (ds @ kc) * scale
        dk.index_add_(0, idx, (ds.transpose(-1, -2) @ qc) * scale)
    return {"dQ": dq.reshape(b, h, s_q, d), "dK": dk.reshape(b, hkv, s_k, d), "dV": dvv.reshape(b, hkv, s_k, dv)}


REFERENCES: dict[str, Callable[..., dict[str, torch.Tensor]]] = {"gemm": gemm, "mha_fwd": mha_fwd, "mha_bwd": mha_bwd}


def get_reference(name: str) -> Callable[..., dict[str, torch.Tensor]]:
    try:
        return REFERENCES[name]
    except KeyError:
        raise KeyError(f"unknown reference {name!r}; known: {sorted(REFERENCES)}") from None


@torch.no_grad()
def run_reference(workload: Workload, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The workload's outputs (float32) by tensor name, from its inputs by tensor name."""
    fn = get_reference(workload.reference)
    args = {t.name: inputs[t.name] for t in workload.inputs}
    kwargs = {} if workload.op == "gemm" else {"scale": float(workload.symbols["scale"]), "causal": workload.causal}
    with full_precision():
        return fn(**args, **kwargs)
