"""Fresh, seeded inputs for a workload: `make_inputs(workload, seed, dist, device)` -> tensors by name.

Only inputs are made (outputs are the harness's to allocate). Random tensors are drawn in the
workload's tensor order from one generator seeded with `seed`, so a (workload, seed, dist) triple
always gives the same tensors on a given device. For mha_bwd, O and LSE are not random: they come
from the float32 reference forward of the drawn Q, K, V, so they are consistent with them.
"""
from __future__ import annotations

import torch

from .references import full_precision, mha_fwd
from .schema import Workload

DISTS = ("normal", "spiky")
SPIKE_PROB = 1e-3  # share of elements that become outliers under 'spiky'
SPIKE_SCALE = 10.0  # how much larger an outlier is


def _dtype(name: str) -> torch.dtype:
    return getattr(torch, name)


def _draw(shape: tuple[int, ...], dist: str, gen: torch.Generator, device: str) -> torch.Tensor:
    """Standard normal; 'spiky' scales a random SPIKE_PROB of the elements by SPIKE_SCALE (heavy tails)."""
    x = torch.randn(shape, generator=gen, device=device, dtype=torch.float32)
    if dist == "spiky":
        spikes = torch.rand(shape, generator=gen, device=device) < SPIKE_PROB
        x = torch.where(spikes, x * SPIKE_SCALE, x)
    return x


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
    if derived:
        with full_precision():
            fwd = mha_fwd(out["Q"], out["K"], out["V"], scale=float(workload.symbols["scale"]), causal=workload.causal)
        out["O"] = fwd["O"].to(_dtype(workload.tensor("O").dtype))
        out["LSE"] = fwd["LSE"].to(_dtype(workload.tensor("LSE").dtype))
    return {spec.name: out[spec.name].contiguous() for spec in workload.inputs}
