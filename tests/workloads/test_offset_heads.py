"""make_inputs' offset and spiked heads (workloads/inputs.py offset_heads): the construction the docs state, over many
shapes, and the cheap tells a kernel could use to skip its softmax max only where the check needs it, each failing.

1. Over B 1..4, GQA groups 1/2/4/8 and 1-3 KV heads, at D = 64 and 128: untouched heads keep the plain draw's bits; an
   offset group's query heads are the plain draw with r0 removed plus SCORE_OFFSET / (KEY_LIFT scale) along r0 on their
   offset rows, its keys with r0 removed plus KEY_LIFT along it; a spiked group's likewise along r1 (SPIKE_QUERY on the
   spiked rows, the spike key long); no group both; every element within bf16's rounding of that.
2. Tells that decide for more than they read: a query tile judged by its rows' scores on the first key tile, a KV group
   by one key's norm, a head by its first query tile's largest |q|, a row bounded by the first key tile's largest |k|,
   a never-moved max unless a row's |q| is long. Each overflows on the rows or keys it did not read, on every seed."""
from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from ptxbench.workloads import inputs as inputs_mod  # noqa: E402
from ptxbench.workloads.references import run_reference  # noqa: E402
from ptxbench.workloads.registry import get_workload  # noqa: E402
from softmax_mirror import forward_tensors, passes, softmax_from  # noqa: E402


def _case(monkeypatch, b, h, hkv, d, seed, s=128):
    wl = get_workload("smoke_mha_fwd_d64_gqa_h4_kv2")
    scale = 1 / math.sqrt(d)
    wl.symbols.update({"B": b, "H": h, "HKV": hkv, "S": s, "D": d, "scale": scale})
    drawn, directions = [], inputs_mod._directions
    monkeypatch.setattr(inputs_mod, "_directions", lambda dd, gen: drawn.append(directions(dd, gen)) or drawn[-1])
    inp = inputs_mod.make_inputs(wl, seed, "normal", "cpu")
    monkeypatch.setattr(inputs_mod, "OFFSET_HEADS", 0.0)
    plain = inputs_mod.make_inputs(wl, seed, "normal", "cpu")
    monkeypatch.undo()
    # the generator's draws after Q, K, V, replayed: which groups, keys and rows
    gen = torch.Generator().manual_seed(seed)
    for n in ("Q", "K", "V"):
        torch.randn(wl.shape(n), generator=gen)
    n = max(1, round(inputs_mod.OFFSET_HEADS * b * hkv))
    order = torch.randperm(b * hkv, generator=gen).tolist()
    lift, spike = order[:n], order[n:n + max(1, round(inputs_mod.SPIKED_HEADS * b * hkv))]
    keys = torch.randint(s // 4, s // 2, (len(spike),), generator=gen).tolist()
    group = h // hkv
    spiked = torch.rand(len(spike) * group, s, generator=gen) < inputs_mod.SPIKE_ROWS
    lifted = torch.rand(len(lift) * group, s, generator=gen) < inputs_mod.OFFSET_ROWS
    lifted &= torch.arange(s) >= torch.randint(0, s // 2, (len(lift) * group, 1), generator=gen)
    return wl, scale, inp, plain, drawn[0], lift, spike, keys, spiked, lifted


def _close(actual: torch.Tensor, expected: torch.Tensor) -> bool:
    """Equal up to bf16's rounding of the expected values."""
    return bool(((actual - expected).abs() <= expected.abs() * 2 ** -8 + 1e-6).all())


@pytest.mark.parametrize("b,group,hkv", [(b, g, kv) for b in (1, 2, 4) for g in (1, 2, 4, 8) for kv in (1, 3)])
def test_offset_and_spiked_heads_are_their_stated_construction(monkeypatch, b, group, hkv):
    h = group * hkv
    for d in (64, 128):
        for seed in range(2):
            wl, scale, inp, plain, (r0, r1), lift, spike, keys, spiked, lifted = _case(monkeypatch, b, h, hkv, d, seed)
            r0, r1 = r0.double(), r1.double()
            assert not set(lift) & set(spike) and len(lift) == max(1, round(b * hkv / 4))
            along = lambda x, r: x - (x @ r)[..., None] * r  # noqa: E731
            assert torch.equal(inp["V"], plain["V"])
            long_q, long_key = inputs_mod.SCORE_OFFSET / (inputs_mod.KEY_LIFT * scale), inputs_mod.SPIKE / (
                inputs_mod.SPIKE_QUERY * scale)
            for kv in range(b * hkv):
                bi, kh = divmod(kv, hkv)
                heads = range(kh * group, (kh + 1) * group)
                ka, kp = inp["K"][bi, kh].double(), plain["K"][bi, kh].double()
                if kv in lift:
                    i = lift.index(kv) * group
                    assert _close(ka, along(kp, r0) + inputs_mod.KEY_LIFT * r0)
                    for j, hq in enumerate(heads):
                        qp = plain["Q"][bi, hq].double()
                        qe = along(qp, r0) + long_q * lifted[i + j].double()[:, None] * r0
                        assert _close(inp["Q"][bi, hq].double(), qe)
                elif kv in spike:
                    i = spike.index(kv) * group
                    ke = along(kp, r1)
                    ke[keys[spike.index(kv)]] += long_key * r1
                    assert _close(ka, ke)
                    for j, hq in enumerate(heads):
                        qp = plain["Q"][bi, hq].double()
                        qe = along(qp, r1) + inputs_mod.SPIKE_QUERY * spiked[i + j].double()[:, None] * r1
                        assert _close(inp["Q"][bi, hq].double(), qe)
                else:  # untouched: the plain draw's bits
                    assert torch.equal(inp["K"][bi, kh], plain["K"][bi, kh])
                    assert torch.equal(inp["Q"][bi, heads.start:heads.stop], plain["Q"][bi, heads.start:heads.stop])


def _tiles(x: torch.Tensor, reduce) -> torch.Tensor:
    """A per-row value reduced over each 64-row tile and spread back over the tile's rows."""
    t = reduce(x.unflatten(-1, (-1, 64)), -1, keepdim=True)
    return t.expand(*t.shape[:-1], 64).flatten(-2)


TELLS = {
    # per 64-row query tile: careful if any of its rows scores > 20 on the first key tile, else no max at all
    "a tile's scores on the first key tile": lambda q, k, s, sc: _tiles(s[..., :64].amax(-1), torch.amax) > 20,
    # careful where the KV head's first key is long, no max elsewhere
    "one key's norm": lambda q, k, s, sc: (k[..., :1, :].norm(dim=-1) ** 2 > 1.5 * k.shape[-1]).expand(q.shape[:-1]),
    # a head judged by its first query tile's largest |q| times its largest |k|
    "a head's first query tile": lambda q, k, s, sc: (
        q[..., :64, :].norm(dim=-1).amax(-1, keepdim=True) * k.norm(dim=-1).amax(-1, keepdim=True) * sc > 80
    ).expand(q.shape[:-1]),
    # each row's own |q|, but times the first key tile's largest |k| only
    "a row against the first key tile": lambda q, k, s, sc: (
        q.norm(dim=-1) * k[..., :64, :].norm(dim=-1).amax(-1, keepdim=True) * sc > 80),
    # careful only where a row's |q| is long (the offset rows), no max elsewhere
    "a row's own norm alone": lambda q, k, s, sc: q.norm(dim=-1) > 2 * math.sqrt(k.shape[-1]),
}


@pytest.mark.parametrize("tell", sorted(TELLS))
@pytest.mark.parametrize("causal", [False, True])
def test_a_cheap_tell_fails_on_every_seed(tell, causal):
    """Where the tell says "careful", the honest max; elsewhere none at all (exp of the raw scores)."""
    wl = get_workload("mha_fwd_d64_causal" if causal else "mha_fwd_d64")
    wl.symbols.update({"B": 1, "H": 32, "S": 512})  # 8 offset heads: a tell right on each by chance, (1/4)^8 at best
    for seed in range(3):
        inp = inputs_mod.make_inputs(wl, seed, "normal", "cpu")
        ref = run_reference(wl, inp)
        q, k, v, s = forward_tensors(wl, inp)
        careful = TELLS[tell](q, k, s, wl.symbols["scale"])
        m = torch.where(careful[..., None], s.amax(-1, keepdim=True), torch.zeros(()))
        assert not passes(wl, softmax_from(s, m, v), ref), (tell, seed)
        # the sound bound: each row's own |q| times the largest |k| of every key it reads
        sound = q.norm(dim=-1) * k.norm(dim=-1).amax(-1, keepdim=True) * wl.symbols["scale"] > 80
        m = torch.where(sound[..., None], s.amax(-1, keepdim=True), torch.zeros(()))
        assert passes(wl, softmax_from(s, m, v), ref)
