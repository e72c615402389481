"""The attention forward's softmax on the CPU, for the tests that judge cheats against make_inputs' offset and spiked
heads: the masked scores, the closed-form softmax from a given max, and the check's verdict on O and LSE."""
from __future__ import annotations

import torch

from ptxbench.tools.gpu.correctness import compare

BF = torch.bfloat16


def masked_scores(q: torch.Tensor, k: torch.Tensor, scale: float, causal: bool) -> torch.Tensor:
    """scale * Q K^T, masked (-inf) above the diagonal when causal."""
    s = q @ k.transpose(-1, -2) * scale
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2], s.shape[-1], dtype=torch.bool).triu(1), float("-inf"))
    return s


def forward_tensors(wl, inp) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Q, K, V in float32 (K and V expanded to the query heads under GQA) and the masked scores."""
    group = inp["Q"].shape[1] // inp["K"].shape[1]
    q = inp["Q"].float()
    k, v = (inp[n].float().repeat_interleave(group, 1) for n in ("K", "V"))
    return q, k, v, masked_scores(q, k, wl.symbols["scale"], wl.causal)


def softmax_from(s: torch.Tensor, m: torch.Tensor, v: torch.Tensor) -> dict[str, torch.Tensor]:
    """O and LSE of softmax(s) V taken as exp(s - m) with the given max m ([..., 1]), P rounded to bf16 for P V."""
    p = torch.exp(s - m)
    l = p.sum(-1, keepdim=True)
    return {"O": ((p.to(BF).float() @ v) / l).to(BF), "LSE": (m + l.log()).squeeze(-1)}


def verdicts(out: dict, ref: dict, tol) -> dict:
    """Each reference tensor's TrialStats under its own bounds (tol.for_tensor)."""
    return {n: compare(out[n], r, tol.for_tensor(n), trial=0, tensor=n) for n, r in ref.items()}


def passes(wl, out: dict, ref: dict) -> bool:
    return all(st.passed for st in verdicts(out, ref, wl.tolerance).values())
