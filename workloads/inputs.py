"""Fresh, seeded inputs for a workload: `make_inputs(workload, seed, dist, device)` -> tensors by name.

Only inputs are made (outputs are the harness's to allocate). Random tensors are drawn in the
workload's tensor order from one generator seeded with `seed`, so a (workload, seed, dist) triple
always gives the same tensors on a given device. For mha_bwd, O and LSE are not random: they come
from the float32 reference forward of the drawn Q, K, V, so they are consistent with them. For mha_fwd, about half the
rows of a quarter of the heads score past exp's range, and a quarter of the rows of another quarter score one late key
far above the rest (below), so a softmax without a running max that moves overflows.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .references import full_precision, mha_fwd
from .schema import DISTS, Workload

SPIKE_PROB = 1e-3  # share of elements that become outliers under 'spiky'
SPIKE_SCALE = 10.0  # how much larger an outlier is
# The attention forward's offset and spiked heads: standard normal Q and K give scores scale * q . k ~ N(0, 1), whose
# row maximum is about 5, so a softmax that never subtracts its running max (or takes it from the first key tile and
# never rescales) was exact on every input drawn. So, in a quarter of the (batch, KV head)s (OFFSET_HEADS, at least one,
# chosen by the seed), with all their query heads, about half the query rows from a row drawn in each head's first half
# on (OFFSET_ROWS, each row drawn on its own) have every score raised by SCORE_OFFSET, past float32's exp limit (88.7):
# a softmax without its max overflows there, while the softmax itself is the plain one (a constant per row). In another
# quarter (SPIKED_HEADS), a quarter of the rows (SPIKE_ROWS) score one key, drawn from the second quarter of the keys,
# SPIKE above the rest: a max taken before that key and never moved overflows there, even with a headroom C added to it
# (exp(s - m - C), no rescale): SPIKE > 88.7 + the largest C the plain heads survive (about 85, where their P
# underflows), so no C passes both (at SPIKE 100, C from 20 to 84 passed every check). Both lie along random orthonormal
# directions r0 and r1 of the draw (the random parts' components along them removed), so no coordinate tells them (built
# along coordinates 0 and 1, coordinate 0 was the integer g on every row). The length sits on one side of each product:
# an offset row is long along r0 while every key of its KV head carries only KEY_LIFT along it (inside a plain key's
# spread); a spiked row carries only SPIKE_QUERY along r1 while the spike key is long. So neither a key's norm nor a
# spiked row's tells them; a spiked head's first key tile scores as a plain head's, and an offset head's first rows may
# be plain. What stays visible is an offset row's own norm and the spike key's: a bound from each row's own |q| (or its
# tile's largest) and the largest |k| of the keys it reads is a sound way to skip a max, while a kernel that reads one
# row, one key or one tile and decides for more is wrong somewhere (tests/workloads/test_offset_heads.py,
# test_offset_heads_sampled_tells.py). What still sees a spiked or offset head costs what the max costs: a row's mean
# score on a key tile is a row reduction like the max, and K's mean over a head is a pass over K first. Run 18's
# sharp heads (Q x 32, rows near one-hot among a few keys) put an honest bf16-P kernel with a lazy rescale at the edge
# of the element rule (bf16 rounding on its lagging dominant P turned a 1-ulp output into a miss on about 6% of checked
# calls on the H100): these heads test the max without a near-tie among a few keys. The backward is given LSE and needs
# no running max, but it gets the offset heads: with plain heads every score stayed below 7, so a backward computing
# P = exp(s) exp(-LSE), or the softmax again without LSE's max, was exact; on an offset row exp(s) overflows. There an
# honest backward's dS, rounded to bf16 as a wgmma operand, meets an offset row's |q| of about 1100 in dK = dS^T Q, and
# its rounding outgrew the element rule on dK (0.3% of it); so those rows' dO is scaled by DO_DAMP (a power of two:
# exact in bf16), which scales their dS and keeps dK's products of a plain row's size, while the overflow a wrong
# exponent meets does not move. No spiked heads: the spike key's |k| of about 1100 enters dQ = dS K of every plain row
# of its head, undamped (their LSE is plain), and an honest bf16-dS reference missed 2x cuDNN's error there (dQ off
# by 0.8 at 0.99 on a spiky mha_bwd_d96_causal draw; an H100, 2026-12-06).
OFFSET_HEADS = 0.25
SPIKED_HEADS = 0.25
SCORE_OFFSET = 100.0
SPIKE = 200.0
SPIKE_ROWS = 0.25
OFFSET_ROWS = 0.5  # share of an offset head's query rows from its first offset row on (drawn in the first half) that
#                   carry the offset, each row drawn on its own
KEY_LIFT = 1.0  # every key's component along r0 in an offset head's KV head: |k|^2 = D + 1, against D +- sqrt(2 D)
SPIKE_QUERY = 2.0  # a spiked row's component along r1: |q|^2 = D + 4
OFFSET_FLOOR = 90.0  # below every offset row's score (SCORE_OFFSET less six spreads of the plain part and bf16's noise)
DO_DAMP = 2.0 ** -10  # the backward's dO on rows whose LSE exceeds DAMP_LSE (its offset rows)
DAMP_LSE = 50.0  # far above a plain row's LSE (at most ln S + 6, about 15) and below every offset row's (about 100)
# Damped, an offset row's share of dV = P^T dO is 2^-10 of a plain row's, so a dV that dropped it, or took its P from
# bf16-rounded scores (off by a quarter at 100), passed. So every UNDAMP_EVERY-th offset KV head (its group's query
# heads), in flat (batch, KV head) order from the second on, keeps its dO as drawn: its dV and dQ carry the offset rows
# at their natural size, and its dK, whose offset rows then outweigh the plain ones 2^10 times (|q| ~ 1100), is judged
# at 2^-10 (judging_weights), where its offset rows count as on a damped head. A lone offset head stays damped (its dK
# then judges its plain rows too). 0: none undamped.
UNDAMP_EVERY = 2


def _dtype(name: str) -> torch.dtype:
    return getattr(torch, name)


def _draw(shape: tuple[int, ...], dist: str, gen: torch.Generator, device: str) -> torch.Tensor:
    """Standard normal; 'spiky' scales a random SPIKE_PROB of the elements by SPIKE_SCALE (heavy tails)."""
    x = torch.randn(shape, generator=gen, device=device, dtype=torch.float32)
    if dist == "spiky":
        spikes = torch.rand(shape, generator=gen, device=device) < SPIKE_PROB
        x = torch.where(spikes, x * SPIKE_SCALE, x)
    return x


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


def offset_heads(q: torch.Tensor, k: torch.Tensor, scale: float, gen: torch.Generator,
                 spiked: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Q [B, H, S, D] and K [B, HKV, S, D] with the offset and spiked heads described above, drawn from `gen` (none when
    OFFSET_HEADS is 0). Heads are drawn as (batch, KV head)s, each with its whole group of query heads: a quarter
    offset, another quarter spiked, none both (an offset row and a spike key, both long, would meet with bf16's rounding
    of each moving their score by tens). An offset group's offset rows get SCORE_OFFSET / (KEY_LIFT scale) along r0 and
    its other rows none; every key of its KV head gets KEY_LIFT along r0. A spiked group's spiked rows get SPIKE_QUERY
    along r1 and its other rows none; its KV head's spike key gets SPIKE / (SPIKE_QUERY scale) along r1. Only the
    touched heads go through float32, each rounded back once. spiked=False: the offset heads only (the backward's)."""
    b, h, s, d = q.shape
    hkv = k.shape[1]
    group = h // hkv
    n = max(1, round(OFFSET_HEADS * b * hkv)) if OFFSET_HEADS > 0 else 0
    if not n:
        return q, k
    order = torch.randperm(b * hkv, generator=gen, device=gen.device).tolist()
    lift_kvs, spike_kvs = order[:n], order[n:n + max(1, round(SPIKED_HEADS * b * hkv))] if spiked else []
    spike_key = torch.randint(s // 4, s // 2, (len(spike_kvs),), generator=gen, device=gen.device)
    lift_heads, spike_heads = ([kv // hkv * h + kv % hkv * group + i for kv in kvs for i in range(group)]
                               for kvs in (lift_kvs, spike_kvs))  # each KV head's query heads, flat
    spike_rows = torch.rand(len(spike_heads), s, generator=gen, device=gen.device) < SPIKE_ROWS
    offset_rows = torch.rand(len(lift_heads), s, generator=gen, device=gen.device) < OFFSET_ROWS
    first_row = torch.randint(0, s // 2, (len(lift_heads), 1), generator=gen, device=gen.device)
    offset_rows &= torch.arange(s, device=gen.device) >= first_row  # none before a head's own first offset row
    r0, r1 = _directions(d, gen)
    q, k = q.clone(), k.clone()
    qf, kf = q.view(b * h, s, d), k.view(b * hkv, s, d)
    qi_lift, ki_lift, qi_spike, ki_spike = (torch.tensor(rows, device=q.device, dtype=torch.long)
                                            for rows in (lift_heads, lift_kvs, spike_heads, spike_kvs))
    lift = torch.where(offset_rows, SCORE_OFFSET / (KEY_LIFT * scale), 0.0).to(q.device)
    qf[qi_lift] = (_without(qf[qi_lift].float(), r0) + lift[..., None] * r0).to(q.dtype)
    kf[ki_lift] = (_without(kf[ki_lift].float(), r0) + KEY_LIFT * r0).to(k.dtype)
    if spike_kvs:
        spike = torch.where(spike_rows, SPIKE_QUERY, 0.0).to(q.device)
        qf[qi_spike] = (_without(qf[qi_spike].float(), r1) + spike[..., None] * r1).to(q.dtype)
        kg = _without(kf[ki_spike].float(), r1)
        kg[torch.arange(len(spike_kvs), device=k.device), spike_key.to(k.device)] += SPIKE / (SPIKE_QUERY * scale) * r1
        kf[ki_spike] = kg.to(k.dtype)
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
    if workload.op in ("mha_fwd", "mha_bwd"):  # in their dtype; the backward's without the spike key (see above)
        out["Q"], out["K"] = offset_heads(out["Q"], out["K"], float(workload.symbols["scale"]), gen,
                                          spiked=workload.op == "mha_fwd")
    if derived:
        with full_precision():
            fwd = mha_fwd(out["Q"], out["K"], out["V"], scale=float(workload.symbols["scale"]), causal=workload.causal)
        out["O"] = fwd["O"].to(_dtype(workload.tensor("O").dtype))
        out["LSE"] = fwd["LSE"].to(_dtype(workload.tensor("LSE").dtype))
        hkv = int(workload.symbols.get("HKV", workload.symbols["H"]))
        out["dO"] = torch.where(damped_rows(out["LSE"], hkv), out["dO"] * DO_DAMP, out["dO"])  # exact: a power of two
    return {spec.name: out[spec.name].contiguous() for spec in workload.inputs}


def offset_rows(lse: torch.Tensor) -> torch.Tensor:
    """[B, H, S, 1]: the backward's offset rows (every score over 90, so their LSE is over DAMP_LSE)."""
    return (lse > DAMP_LSE)[..., None]


def undamped_kv_heads(lse: torch.Tensor, hkv: int | None = None) -> torch.Tensor:
    """[B, HKV, 1, 1]: the offset KV heads whose offset rows keep their dO as drawn (UNDAMP_EVERY), from LSE alone."""
    b, h, s = lse.shape
    hkv = hkv or h
    offset_kv = (lse > DAMP_LSE).reshape(b, hkv, h // hkv * s).any(-1).reshape(-1)
    rank = offset_kv.long().cumsum(0) - 1  # each offset KV head's place among them, in flat order
    undamped = offset_kv & (rank % UNDAMP_EVERY == UNDAMP_EVERY - 1) if UNDAMP_EVERY else torch.zeros_like(offset_kv)
    return undamped.view(b, hkv, 1, 1)


def damped_rows(lse: torch.Tensor, hkv: int | None = None) -> torch.Tensor:
    """[B, H, S, 1]: the backward's query rows whose dO make_inputs scales by DO_DAMP: the offset rows of the offset KV
    heads that undamped_kv_heads leaves out (`hkv`: the workload's KV heads; H when None)."""
    b, h, s = lse.shape
    undamped = undamped_kv_heads(lse, hkv).repeat_interleave(h // (hkv or h), dim=1)
    return offset_rows(lse) & ~undamped


@dataclass(frozen=True)
class Weight:
    """A power-of-two factor, broadcastable to an output, that its output and reference are both multiplied by before
    they are judged (exact: only the exponent moves), and why."""

    factor: torch.Tensor
    why: str


def judging_weights(workload: Workload, inputs: dict[str, torch.Tensor]) -> dict[str, Weight]:
    """Per output, the Weight that undoes the inputs' own scaling, so every row is judged at its natural size.

    The backward's dQ row i is linear in dO row i, so on the damped rows it is DO_DAMP (2^-10) times its natural size:
    about 2e-5, a thousandth of atol, so the element rule passed anything there and the row held no share of any
    Frobenius norm: a dQ of zeros on those rows, or one whose P came from bf16 scores (off by a quarter at scores of
    100), passed. Judged at 1/DO_DAMP their size, they are plain rows again; an honest kernel's error scales with them
    exactly (fp32 sums, bf16 roundings relative). dK and dV sum over rows, so no factor undoes it there: dK carries the
    offset rows' share at a plain row's size (|q| ~ 1100 meets the damped dS), which is what catches a wrong P there,
    and dV, blind to them on a damped head, sees them on the undamped heads (UNDAMP_EVERY). There dK's offset rows are
    2^10 times a damped head's, and so is an honest bf16-dS kernel's error on them: judged at DO_DAMP its size, the
    head's dK is judged as a damped head's offset rows are."""
    if workload.op != "mha_bwd":
        return {}
    hkv = int(workload.symbols.get("HKV", workload.symbols["H"]))
    lse = inputs["LSE"]
    damp = math.log2(DO_DAMP)
    factor = torch.where(damped_rows(lse, hkv), 1.0 / DO_DAMP, 1.0).float()
    weights = {"dQ": Weight(factor, f"dQ's rows whose dO the checked inputs scale by 2^{damp:g} (their LSE is over "
                                    f"{DAMP_LSE:g}: every score of the row exceeds 90) are judged scaled back by "
                                    f"2^{-damp:g}, at a plain row's size; the errors and bounds here are in those units")}
    undamped = undamped_kv_heads(lse, hkv)
    if bool(undamped.any()):
        weights["dK"] = Weight(torch.where(undamped, DO_DAMP, 1.0).float(),
                               f"dK's KV heads whose offset rows keep their dO undamped (their sums meet |q| ~ 1100 at "
                               f"full size) are judged scaled by 2^{damp:g}, at a damped head's size; the errors and "
                               f"bounds here are in those units")
    return weights
