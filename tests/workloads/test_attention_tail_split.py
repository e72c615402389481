"""The attention forward's tail_split option (workloads/solutions/attention_tail.py): the last wave's query tiles cut
into pieces over their key tiles. Checked here: a mirror of its decode gives every (head, query tile, key tile) to
exactly one CTA at every non-causal forward shape, the pieces after every whole tile; the merge, mirrored in numpy,
gives the softmax of the whole row from pieces whose maxima lag their true ones (the lazy rescale) or are empty; the
option assembles where validate() allows it, without spills and with the same wgmma products, and is refused causal
with ping-pong or with a key tile that is not a power of two; it is off in TUNED. Speed: the GPU (attention_template.md round 16)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from ptxbench.tools.compile import compile_source
from ptxbench.tools.solution.parse import parse_solution, resolve_plan
from ptxbench.workloads.registry import get_workload, list_workloads
from ptxbench.workloads.solutions import attention_template as at
from ptxbench.workloads.solutions.attention_tail import EDITS, TAIL_PIECES

FORWARD = [w.id for w in list_workloads() if w.op == "mha_fwd" and not w.causal]


def test_the_mirror_is_the_options_text():
    decode = dict(EDITS)["    q_tile = CAUSAL ? n_q - 1 - blockIdx.x : blockIdx.x;  // causal: each head's longest rows first\n"
                         "    bh = blockIdx.y;\n"]
    assert "rem = pieces > 1 ? items % nsm : 0, full = items - rem;" in decode
    assert "lin = bx < full ? bx : full + (bx - full) / pieces;" in decode and "q_tile = lin % n_q;" in decode
    tiles = "".join(new for _, new in EDITS)
    assert "const int j_lo = piece < 0 ? 0 : piece * n_all / pieces;" in tiles
    assert "const int n_tiles = piece < 0 ? n_all : (piece + 1) * n_all / pieces - j_lo;" in tiles
    assert "const int row = kv_row + (j_lo + j) * BN;" in tiles


@pytest.mark.parametrize("wid", FORWARD)
def test_every_key_tile_of_every_query_tile_is_taken_once(wid):
    w = get_workload(wid)
    base = at.default_params(w)
    if base.schedule == "pingpong":  # D = 64's TUNED point: tail_split is for cooperative points, so the plain one
        base = at.plain_params(w)
    p = base.model_copy(update={"tail_split": True})
    assert at.validate(p, w) == []
    s, heads, nsm = int(w.symbols["S"]), int(w.symbols["B"]) * int(w.symbols["H"]), 132
    n_q, n_all = -(-s // p.bm), -(-s // p.bn)
    plan = resolve_plan(parse_solution(at.render(p), w).plan, w, nsm, "sm_90a")
    ctas = int(plan.launches[0].grid[0])
    items = n_q * heads
    rem = items % nsm
    assert ctas == items + rem * (TAIL_PIECES - 1)
    taken: dict[tuple, int] = {}
    for bx in range(ctas):
        full = items - rem
        lin, piece = (bx, -1) if bx < full else (full + (bx - full) // TAIL_PIECES, (bx - full) % TAIL_PIECES)
        j_lo = 0 if piece < 0 else piece * n_all // TAIL_PIECES
        n = n_all if piece < 0 else (piece + 1) * n_all // TAIL_PIECES - j_lo
        for j in range(j_lo, j_lo + n):
            key = (lin // n_q, lin % n_q, j)
            taken[key] = taken.get(key, 0) + 1
    assert set(taken) == {(h, q, j) for h in range(heads) for q in range(n_q) for j in range(n_all)}
    assert set(taken.values()) == {1}


def test_the_merge_gives_the_whole_rows_softmax():
    """Each piece: O_p = sum 2^(s - m_p) v, l_p = sum 2^(s - m_p) for a reference max m_p at or below its true max by
    less than the lazy threshold (or -inf, l = 0, O = 0 when empty); the kernel's merge, in numpy."""
    rng = np.random.default_rng(7)
    s, v = rng.normal(size=640) * 6, rng.normal(size=(640, 16))
    cuts = [0, 0, 200, 330, 640]  # the first piece empty
    parts = []
    for a, b in zip(cuts, cuts[1:]):
        if a == b:
            parts.append((-np.inf, 0.0, np.zeros(16)))
            continue
        m = s[a:b].max() - rng.uniform(0, 7.9)  # a lagging reference max, as lazy leaves it
        e = np.exp2(s[a:b] - m)
        parts.append((m, e.sum(), e @ v[a:b]))
    m_self, l_self, o_self = parts[-1]  # the last piece merges
    big = max(m for m, _, _ in parts)
    f = 1.0 if m_self == big else np.exp2(m_self - big)
    l, o = l_self * f, o_self * f
    for m, lp, op in parts[:-1]:
        g = 1.0 if m == big else np.exp2(m - big)
        l, o = l + lp * g, o + op * g
    e = np.exp2(s - s.max())
    np.testing.assert_allclose(o / l, (e @ v) / e.sum(), rtol=1e-12)
    np.testing.assert_allclose(big + np.log2(l), s.max() + np.log2(e.sum()), rtol=1e-12)  # the LSE (log2 units)


@pytest.mark.parametrize("wid", ["mha_fwd_d128", "mha_fwd_d96", "mha_fwd_d128_gqa_h32_kv8"])
def test_it_assembles_with_the_same_products_and_no_spills(wid):
    w = get_workload(wid)
    base = at.default_params(w)
    kernels = {}
    for point in (base, base.model_copy(update={"tail_split": True})):
        r = compile_source(at.render(point), "cuda", "sm_90a")
        assert r.status == "ok" and not r.warnings, [x.message for x in r.warnings]
        kernels[point.tail_split] = r.kernels[at.kernel_name(point)]
    assert kernels[True].spill_stores == kernels[True].spill_loads == 0
    assert kernels[True].sass_opcodes["HGMMA"] == kernels[False].sass_opcodes["HGMMA"]


def test_refused_causal_and_off_in_tuned():
    causal = at.default_params(get_workload("mha_fwd_d128_causal")).model_copy(update={"tail_split": True})
    assert any("tail_split" in b for b in at.validate(causal))
    odd = at.params_for(get_workload("mha_fwd_d128"), bn=96, tail_split=True)
    assert any("tail_split" in b for b in at.validate(odd))
    turns = at.params_for(get_workload("mha_fwd_d128"), schedule="pingpong", tail_split=True)
    assert any("tail_split" in b for b in at.validate(turns))
    assert not any(pt.get("tail_split") for pt in at.TUNED.values())
    assert "tail_split" not in at.render(at.default_params())


def test_round_16_pairs_the_tuned_points_with_it():
    spec = importlib.util.spec_from_file_location("attention_sweep", Path(__file__).resolve().parents[2] / "bench" /
                                                  "attention_sweep.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    points = mod.ROUNDS[16]
    assert [wid for wid, _, _ in points[::2]] == ["mha_fwd_d128", "mha_fwd_d96", "mha_fwd_d128_gqa_h32_kv8"]
    for (wid, tuned, _), (wid2, split, predicted) in zip(points[::2], points[1::2]):
        w = get_workload(wid)
        assert wid2 == wid and split == {**tuned, "tail_split": True} and predicted > 0
        assert at.validate(at.params_for(w, **split), w) == []
