"""Fresh, seeded inputs for a workload: `make_inputs(workload, seed, dist, device)` -> tensors by name.

Only inputs are made (outputs are the harness's to allocate). Random tensors are drawn in the
workload's tensor order from one generator seeded with `seed`, so a (workload, seed, dist) triple
always gives the same tensors on a given device. For mha_bwd, O and LSE are not random: they come
from the float32 reference forward of the drawn Q, K, V, so they are consistent with them. For mha_fwd, a quarter of
the heads are sharp (Q x SHARP_SCALE, below), so a softmax without its running max overflows.
"""
from __future__ import annotations

import torch

from .references import full_precision, mha_fwd
from .schema import Workload

DISTS = ("normal", "spiky")
SPIKE_PROB = 1e-3  # share of elements that become outliers under 'spiky'
SPIKE_SCALE = 10.0  # how much larger an outlier is
# The attention forward's sharp heads: standard normal Q and K give scores scale * q . k ~ N(0, 1), whose row
# maximum is about 5, so a softmax that never subtracts its running max (or takes it from the first key tile and
# never rescales) was exact on every input drawn. A quarter of the (batch, head) pairs, at least one, chosen by the
# seed, have Q scaled by SHARP_SCALE: scores ~ N(0, 32^2), row maxima past 100, where exp overflows float32 (88.7)
# without the max; those rows are near one-hot, as trained models' sharp heads are. The backward keeps plain
# heads: it is given LSE and needs no running max.
SHARP_HEADS = 0.25
SHARP_SCALE = 32.0


def _dtype(name: str) -> torch.dtype:
    return getattr(torch, name)


def _draw(shape: tuple[int, ...], dist: str, gen: torch.Generator, device: str) -> torch.Tensor:
    """Standard normal; 'spiky' scales a random SPIKE_PROB of the elements by SPIKE_SCALE (heavy tails)."""
    x = torch.randn(shape, generator=gen, device=device, dtype=torch.float32)
    if dist == "spiky":
        spikes = torch.rand(shape, generator=gen, device=device) < SPIKE_PROB
        x = torch.where(spikes, x * SPIKE_SCALE, x)
    return x


def sharpen(q: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Q [B, H, S, D] with SHARP_HEADS of its (batch, head) pairs (at least one), drawn from `gen`, scaled by SHARP_SCALE."""
    b, h = q.shape[0], q.shape[1]
    n_sharp = max(1, round(SHARP_HEADS * b * h))
    pick = torch.randperm(b * h, generator=gen, device=gen.device)[:n_sharp].to(q.device)
    factor = torch.ones(b * h, device=q.device, dtype=torch.float32)
    factor[pick] = SHARP_SCALE
    return (q.float() * factor.reshape(b, h, 1, 1)).to(q.dtype)  # a power of two: exact in bf16


@torch.no_grad()
def make_inputs(workload: Workload, seed: int, dist: str = "normal", device: str = "cuda") -> dict[str, torch.Tensor]:
    """Every input tensor of the workload, contiguous, in its declared dtype, on `device`."""
    if dist not in DISTS:
        raise ValueError(f"unknown input distribution {dist!r}; known: {DISTS}")
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    derived = {"O", "LSE"} if workload.op == "mha_bwd" else set()
    out: dict[str, torch.Tensor] = {}
    for spec in workload.inputs:
        if spec.name in derived:
            continue
        out[spec.name] = _draw(workload.shape(spec.name), dist, gen, device).to(_dtype(spec.dtype))
    if workload.op == "mha_fwd":
        out["Q"] = sharpen(out["Q"], gen)
    if derived:
        with full_precision():
            fwd = mha_fwd(out["Q"], out["K"], out["V"], scale=float(workload.symbols["scale"]), causal=workload.causal)
        out["O"] = fwd["O"].to(_dtype(workload.tensor("O").dtype))
        out["LSE"] = fwd["LSE"].to(_dtype(workload.tensor("LSE").dtype))
    return {spec.name: out[spec.name].contiguous() for spec in workload.inputs}
