"""Fresh, seeded inputs for a workload: `make_inputs(workload, seed, dist, device)` -> tensors by name.

Only inputs are made (outputs are the harness's to allocate). Random tensors are drawn in the
workload's tensor order from one generator seeded with `seed`, so a (workload, seed, dist) triple
always gives the same tensors on a given device. For mha_bwd, O and LSE are not random: they come
from the float32 reference forward of the drawn Q, K, V, so they are consistent with them. For mha_fwd, a quarter of
the heads have their scores offset past exp's range and one late key spiked (below), so a softmax without its running
max overflows.
"""
from __future__ import annotations

import math

import torch

from .references import full_precision, mha_fwd
from .schema import Workload

DISTS = ("normal", "spiky")
SPIKE_PROB = 1e-3  # share of elements that become outliers under 'spiky'
SPIKE_SCALE = 10.0  # how much larger an outlier is
# The attention forward's offset heads: standard normal Q and K give scores scale * q . k ~ N(0, 1), whose row maximum
# is about 5, so a softmax that never subtracts its running max (or takes it from the first key tile and never
# rescales) was exact on every input drawn. A quarter of the (batch, head) pairs, at least one, chosen by the seed,
# get every score raised by SCORE_OFFSET (query and key coordinate 0 set to g with g^2 scale >= SCORE_OFFSET: a
# constant per row, so the softmax is the plain one), past float32's exp limit (88.7): a softmax without its max
# overflows. A quarter of those heads' rows also score one key, drawn from the second quarter of the keys, SPIKE above
# the rest (coordinate 1: set for that key and those rows, zero elsewhere): a max taken before that key and never
# moved overflows there, even with a headroom C added to it (exp(s - m - C), no rescale): SPIKE > 88.7 + the largest C
# the plain heads survive (about 85, where their P underflows), so no C passes both (at SPIKE 100, C from 20 to 84
# passed every check). Run 18's sharp heads (Q x 32, rows near one-hot among a few keys) put an honest bf16-P kernel
# with a lazy rescale at the edge of the element rule (its dominant P is not 1 while the max lags: bf16 rounding
# on it, up to 0.39%, turned a 1-ulp output into a miss on about 6% of checked calls on the H100, cuDNN at 67-76%
# of the allowance): these heads test the max without a near-tie among a few keys. Last, each touched (batch, KV
# head) has its K and its group's Q turned by one random orthogonal map: every score stays what it was (up to
# bf16's rounding of the turned values), and no coordinate is constant any more, so a kernel cannot tell an offset
# head by one of its elements and take the careful path only there (what remains to see is a large norm, and
# branching on |q| |k| scale, a bound on every score, is a sound way to skip a max). The backward keeps plain heads:
# it is given LSE and needs no running max.
OFFSET_HEADS = 0.25
SCORE_OFFSET = 100.0
SPIKE = 200.0
SPIKE_ROWS = 0.25


def _dtype(name: str) -> torch.dtype:
    return getattr(torch, name)


def _draw(shape: tuple[int, ...], dist: str, gen: torch.Generator, device: str) -> torch.Tensor:
    """Standard normal; 'spiky' scales a random SPIKE_PROB of the elements by SPIKE_SCALE (heavy tails)."""
    x = torch.randn(shape, generator=gen, device=device, dtype=torch.float32)
    if dist == "spiky":
        spikes = torch.rand(shape, generator=gen, device=device) < SPIKE_PROB
        x = torch.where(spikes, x * SPIKE_SCALE, x)
    return x


def _coordinate(score: float, scale: float) -> float:
    """The smallest integer g with g * g * scale >= score."""
    return float(math.ceil(math.sqrt(score / scale)))


def _turn(x: torch.Tensor, gen: torch.Generator) -> None:
    """Turn the last dimension of x (in place) by a random orthogonal map drawn from `gen`: 4 ceil(log2 D) stages, each
    a random pairing of the coordinates and a random angle per pair (Givens rotations; after them a unit vector's
    largest coordinate is a uniformly random direction's, which at half the stages it is not yet). Elementwise only:
    a worker and the referee drawing from the same seed must get the same bits, which a matmul would not promise (its
    algorithm, or a TF32 setting, may differ between processes) and which their input digests check."""
    d = x.shape[-1]
    for _ in range(4 * math.ceil(math.log2(d))):
        perm = torch.randperm(d, generator=gen, device=gen.device)
        angle = torch.rand(d // 2, generator=gen, device=gen.device) * (2 * math.pi)
        c, s = torch.cos(angle), torch.sin(angle)
        i, j = perm[0:d // 2 * 2:2], perm[1:d // 2 * 2:2]
        xi, xj = x[..., i], x[..., j]
        x[..., i] = c * xi - s * xj
        x[..., j] = s * xi + c * xj


def offset_heads(q: torch.Tensor, k: torch.Tensor, scale: float, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Q [B, H, S, D] and K [B, HKV, S, D] with OFFSET_HEADS of the (batch, head) pairs (at least one; none when it is
    0) offset and spiked as described above, drawn from `gen`. The other query heads of a GQA group see coordinate 0
    as a row constant again, and their coordinate 1 is zeroed: on it the spike key would rise by q1 * g * scale,
    N(0, 9) at D = 128, enough for rows near one-hot between it and the rest (the CPU mirror of the lazy kernel at 75%
    of the element rule's allowance on such rows, against 10% on plain ones). Then the touched (batch, KV head)s are
    turned by one random orthogonal map of the draw, each K and every query head of its group alike (Q K^T unchanged)."""
    b, h, s, d = q.shape
    group = h // k.shape[1]
    n = max(1, round(OFFSET_HEADS * b * h)) if OFFSET_HEADS > 0 else 0
    if not n:
        return q, k
    pick = torch.randperm(b * h, generator=gen, device=gen.device)[:n].tolist()
    spike_key = torch.randint(s // 4, s // 2, (n,), generator=gen, device=gen.device).tolist()
    spike_rows = torch.rand(n, s, generator=gen, device=gen.device) < SPIKE_ROWS
    q, k = q.float().clone(), k.float().clone()
    g, g_spike = _coordinate(SCORE_OFFSET, scale), _coordinate(SPIKE, scale)
    for pair in pick:  # first, so that a second pick in a group cannot clear the first one's spiked rows
        bi, hi = divmod(pair, h)
        q[bi, (hi // group) * group:(hi // group + 1) * group, :, 1] = 0.0
    for i, pair in enumerate(pick):
        bi, hi = divmod(pair, h)
        kv = hi // group
        q[bi, hi, :, 0] = g
        k[bi, kv, :, 0] = g
        q[bi, hi, :, 1] = torch.where(spike_rows[i], g_spike, 0.0)
        k[bi, kv, :, 1] = 0.0
        k[bi, kv, spike_key[i], 1] = g_spike
    touched = sorted({(pair // h, pair % h // group) for pair in pick})
    qi = torch.tensor([bi * h + hq for bi, kv in touched for hq in range(kv * group, (kv + 1) * group)], device=q.device)
    ki = torch.tensor([bi * k.shape[1] + kv for bi, kv in touched], device=k.device)
    qf, kf = q.view(b * h, s, d), k.view(-1, s, d)
    both = torch.cat([qf[qi], kf[ki]])
    _turn(both, gen)
    qf[qi], kf[ki] = both[:len(qi)], both[len(qi):]
    return q, k


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
        q, k = offset_heads(out["Q"], out["K"], float(workload.symbols["scale"]), gen)
        out["Q"], out["K"] = q.to(out["Q"].dtype), k.to(out["K"].dtype)  # the reference reads these rounded values
    if derived:
        with full_precision():
            fwd = mha_fwd(out["Q"], out["K"], out["V"], scale=float(workload.symbols["scale"]), causal=workload.causal)
        out["O"] = fwd["O"].to(_dtype(workload.tensor("O").dtype))
        out["LSE"] = fwd["LSE"].to(_dtype(workload.tensor("LSE").dtype))
    return {spec.name: out[spec.name].contiguous() for spec in workload.inputs}
