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
# have every score of a random half of their query rows (OFFSET_ROWS, each row drawn on its own) raised by SCORE_OFFSET
# (those query rows and every key set to g along one random direction r0 of the draw, with g^2 scale >= SCORE_OFFSET:
# a constant per row, so the softmax is the plain one), past float32's exp limit (88.7): a softmax without its max
# overflows. A quarter of those heads' rows also score one key, drawn from the second quarter
# of the keys, SPIKE above the rest (along a second direction r1: set for that key and those rows, zero elsewhere): a
# max taken before that key and never moved overflows there, even with a headroom C added to it (exp(s - m - C), no
# rescale): SPIKE > 88.7 + the largest C the plain heads survive (about 85, where their P underflows), so no C passes
# both (at SPIKE 100, C from 20 to 84 passed every check). Run 18's sharp heads (Q x 32, rows near one-hot among a few
# keys) put an honest bf16-P kernel with a lazy rescale at the edge of the element rule (its dominant P is not 1 while
# the max lags: bf16 rounding on it, up to 0.39%, turned a 1-ulp output into a miss on about 6% of checked calls on
# the H100, cuDNN at 67-76% of the allowance): these heads test the max without a near-tie among a few keys. The
# directions are random, not coordinates 0 and 1 (as they first were): there, coordinate 0 was the integer g on every
# row, so a kernel could tell an offset head by one element and take the careful path only there; along random
# directions every coordinate varies over the rows. What remains to see is a row's large norm: branching on a bound
# from each row's own |q| and the keys' |k| is a sound way to skip a max, while a kernel that reads one row (or one
# element) and decides for its whole head or tile is wrong on the rows it did not read, since only some rows carry the
# offset. The backward keeps plain heads: it is given LSE and needs no running max.
OFFSET_HEADS = 0.25
SCORE_OFFSET = 100.0
SPIKE = 200.0
SPIKE_ROWS = 0.25
OFFSET_ROWS = 0.5  # share of an offset head's query rows that carry the offset (each row drawn on its own)


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


def _directions(d: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Two orthonormal directions of R^d, uniformly random, drawn from `gen` (Gram-Schmidt in float64)."""
    r = torch.randn(2, d, generator=gen, device=gen.device, dtype=torch.float64)
    r0 = r[0] / (r[0] * r[0]).sum().sqrt()
    r1 = r[1] - (r[1] * r0).sum() * r0
    return r0.float(), (r1 / (r1 * r1).sum().sqrt()).float()


def _without(x: torch.Tensor, *dirs: torch.Tensor) -> torch.Tensor:
    """x with each row's component along each of the orthonormal `dirs` removed. Elementwise products and a row sum,
    no matmul: a worker and the referee drawing from the same seed must get the same bits (their input digests check
    it), which a matmul's algorithm or a TF32 setting would not promise."""
    for r in dirs:
        x = x - (x * r).sum(-1, keepdim=True) * r
    return x


def offset_heads(q: torch.Tensor, k: torch.Tensor, scale: float, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Q [B, H, S, D] and K [B, HKV, S, D] with OFFSET_HEADS of the (batch, head) pairs (at least one; none when it is
    0) offset and spiked as described above, drawn from `gen`, along two random orthonormal directions r0 and r1 of
    the draw: the offset is g r0 on the offset rows of the head's Q and every row of its group's K, the spike g' r1 on
    the spiked rows and the spike key, and the random parts have no component along either (so the scores are the
    plain ones plus those). The other query heads of a GQA group have their r1 component removed: the spike key would raise their
    scores by (q . r1) g' scale, N(0, 9) at D = 128, enough for rows near one-hot between it and the rest (the CPU
    mirror of the lazy kernel at 75% of the element rule's allowance on such rows, against 10% on plain ones); along
    r0 they see a row constant. Where two picks share a KV head, its spike key is the later pick's."""
    b, h, s, d = q.shape
    hkv = k.shape[1]
    group = h // hkv
    n = max(1, round(OFFSET_HEADS * b * h)) if OFFSET_HEADS > 0 else 0
    if not n:
        return q, k
    pick = torch.randperm(b * h, generator=gen, device=gen.device)[:n].tolist()
    spike_key = torch.randint(s // 4, s // 2, (n,), generator=gen, device=gen.device).tolist()
    spike_rows = torch.rand(n, s, generator=gen, device=gen.device) < SPIKE_ROWS
    offset_rows = torch.rand(n, s, generator=gen, device=gen.device) < OFFSET_ROWS
    r0, r1 = _directions(d, gen)
    g, g_spike = _coordinate(SCORE_OFFSET, scale), _coordinate(SPIKE, scale)
    kvs = sorted({pair // h * hkv + pair % h // group for pair in pick})  # touched (batch, KV head)s, flat
    spike_of = {pair // h * hkv + pair % h // group: key for pair, key in zip(pick, spike_key)}  # the later pick's key
    heads = [kv // hkv * h + kv % hkv * group + i for kv in kvs for i in range(group)]  # their groups' query heads
    # Only the touched heads go through float32 (the rest stay as drawn), each rounded back once.
    q, k = q.clone(), k.clone()
    qf, kf = q.view(b * h, s, d), k.view(b * hkv, s, d)
    qi, ki = torch.tensor(heads, device=q.device), torch.tensor(kvs, device=k.device)
    qg = _without(qf[qi].float(), r1)
    mine = torch.tensor([heads.index(pair) for pair in pick], device=q.device)
    spike = torch.where(spike_rows, g_spike, 0.0).to(q.device)
    lift = torch.where(offset_rows, g, 0.0).to(q.device)
    qg[mine] = _without(qg[mine], r0) + lift[..., None] * r0 + spike[..., None] * r1
    kg = _without(kf[ki].float(), r0, r1) + g * r0
    kg[torch.arange(len(kvs), device=k.device), torch.tensor([spike_of[kv] for kv in kvs], device=k.device)] += g_spike * r1
    qf[qi], kf[ki] = qg.to(q.dtype), kg.to(k.dtype)
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
