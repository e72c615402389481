"""The attention forward's q_regs option (workloads/solutions/attention_qregs.py): Q's A fragments loaded once with
ldmatrix and S = Q K^T issued as register-A wgmma. Checked here: a mirror of ldmatrix.x4 over the 128B-swizzled Q
tile gives every lane, in every register, the Q elements the wgmma m64k16 A fragment holds (rows r / r + 8, k 0-7 /
8-15, PTX ISA), for both consumers, every warp and k16 step of D = 64 / 96 / 128; the option assembles where
validate() allows it without spills or wgmma serialisation, with HD / 16 LDSM and the same HGMMA count, and keeps
the plain D = 128 point's 44 exponentials under the P V product; it is in TUNED (and the checked-in file) at the points
round 13 measured it faster, off elsewhere, and refused where the registers do not fit; round 13 pairs the TUNED points
as they were with it. Speed: the GPU (attention_template.md round 13)."""
from __future__ import annotations

import re

import pytest

from ptxbench.tools.compile import compile_source
from ptxbench.workloads.registry import get_workload
from ptxbench.workloads.solutions import attention_template as at

from sass_order import ex2_under_pending_product, sass_ops
from sweeps import attention_sweep


def _tma_byte(row: int, d: int, q_slab: int) -> int:
    """Where TMA's 128B swizzle put Q[row][d] (bf16) in the tile: slab d / 64, 128-byte rows, 16-byte chunk XOR row % 8."""
    within = 2 * (d % 64)
    return (d // 64) * q_slab + row * 128 + (((within // 16) ^ (row % 8)) * 16) + within % 16


def _ldmatrix_byte(c: int, warp: int, kk: int, lane: int, reg: int, q_slab: int) -> int:
    """The first byte register `reg` of `lane` holds after load_q_frag's ldmatrix.x4 for k16 step kk: lane l gives the
    address of row l % 8 of matrix l / 8, and register m of lane x is row x / 4, bytes 4 (x % 4).. of matrix m."""
    src = 8 * reg + lane // 4  # the lane whose address is that row of matrix `reg`
    row = 16 * warp + src % 8 + 8 * ((src // 8) % 2)
    addr = c * 64 * 128 + (kk // 4) * q_slab + row * 128 + (((2 * (kk % 4) + src // 16) ^ (row % 8)) << 4)
    return addr + 4 * (lane % 4)


@pytest.mark.parametrize("hd", [64, 96, 128])
def test_every_register_holds_its_a_fragment_elements(hd):
    q_slab = 128 * 128  # BM = 128 rows (two consumers) x 128 bytes; the formula holds for any BM
    for c in range(2):
        for warp in range(4):
            for kk in range(hd // 16):
                for lane in range(32):
                    for reg in range(4):
                        row = 64 * c + 16 * warp + lane // 4 + 8 * (reg % 2)  # the A fragment: a0..a3
                        d = 16 * kk + 8 * (reg // 2) + 2 * (lane % 4)
                        assert _ldmatrix_byte(c, warp, kk, lane, reg, q_slab) == _tma_byte(row, d, q_slab)
                        assert _tma_byte(row, d + 1, q_slab) == _tma_byte(row, d, q_slab) + 2  # the pair's second half


def test_the_mirror_is_the_options_text():
    from ptxbench.workloads.solutions.attention_qregs import HELPERS

    assert "row = 16 * (t / 32) + lane % 8 + 8 * ((lane / 8) % 2);" in HELPERS
    assert "q + (kk / 4) * Q_SLAB + row * 128 + (((2 * (kk % 4) + lane / 16) ^ (row % 8)) << 4)" in HELPERS
    src = at.render(at.default_params().model_copy(update={"q_regs": True}))
    assert "load_q_frag(w.qf, w.sQc, t);" in src and "Consumer w{sQ + c * 64 * 128" in src  # sQc: the consumer's rows
    assert "m64n128k16.f32.bf16.bf16" in src and "p, 1, 1, 0;" in src  # register A, K-major B


WHERE = ["mha_fwd_d128", "mha_fwd_d96", "mha_fwd_d128_gqa_h32_kv8", "mha_fwd_d128_gqa_h32_kv8_causal",
         "mha_fwd_d64_causal", "mha_fwd_d128_causal", "mha_fwd_d96_causal"]


@pytest.mark.parametrize("wid", WHERE)
def test_q_regs_assembles_with_its_loads_and_the_same_products(wid):
    w = get_workload(wid)
    p = at.single_tile(at.default_params(w)).model_copy(update={"q_regs": False})
    if wid == "mha_fwd_d128":  # as round 13 measured it: no split (round 26 gave TUNED split_rows here)
        p = p.model_copy(update={"split_rows": False})
    q = p.model_copy(update={"q_regs": True})
    assert at.validate(q, w) == []
    kernels, ops = {}, {}
    for point in (p, q):
        r = compile_source(at.render(point), "cuda", "sm_90a")
        assert r.status == "ok" and not r.warnings, (wid, [x.message for x in r.warnings])
        kernels[point.q_regs] = r.kernels[at.kernel_name(point)]
        ops[point.q_regs] = sass_ops(at.render(point), at.kernel_name(point))
    new, old = kernels[True], kernels[False]
    assert new.spill_stores == new.spill_loads == 0
    assert new.sass_opcodes.get("LDSM") == p.head_dim // 16 and "LDSM" not in old.sass_opcodes
    assert new.sass_opcodes["HGMMA"] == old.sass_opcodes["HGMMA"]
    assert max(int(x) for o in ops[True] for x in re.findall(r"\bR(\d+)\b", o)) < 240
    if wid == "mha_fwd_d128":
        assert ex2_under_pending_product(ops[True]) == ex2_under_pending_product(ops[False]) == 44
        both = q.model_copy(update={"split_max": True})  # (TUNED: both)  # with round 11's max chains too: still 44, no spills
        r = compile_source(at.render(both), "cuda", "sm_90a")
        assert r.status == "ok" and not r.warnings and r.kernels[at.kernel_name(both)].spill_stores == 0
        assert ex2_under_pending_product(sass_ops(at.render(both), at.kernel_name(both))) == 44


def test_in_tuned_where_it_was_faster_and_refused_where_it_does_not_fit():
    assert at.OPTION_SPACE["q_regs"] == [False, True]
    # (96, False, False) and (128, False, True) took it with the persistent walk (round 22), which needs it
    assert sorted(k for k, pt in at.TUNED.items() if pt.get("q_regs")) == [
        (64, True, False), (96, False, False), (96, True, False), (128, False, False), (128, False, True),
        (128, True, False)]
    # split_max joined D = 128 after round 13; round 26 moved it to D = 128 causal (split_rows at D = 128 instead)
    assert sorted(k for k, pt in at.TUNED.items() if pt.get("split_max")) == [(128, True, False)]
    assert "load_q_frag(w.qf, w.sQc, t);" in at.render(at.default_params())  # the checked-in file
    d64 = at.default_params(get_workload("mha_fwd_d64"))  # 3 consumers at 160 registers: ptxas spilled 96 bytes
    assert d64.model_copy(update={"q_regs": True}).live_regs == d64.live_regs + 16
    assert any("registers" in b for b in at.validate(d64.model_copy(update={"q_regs": True})))


def test_round_13_pairs_the_tuned_points_with_q_regs():
    mod = attention_sweep()
    points = mod.ROUNDS[13]
    pairs, both = points[:2 * len(WHERE)], points[2 * len(WHERE):]
    assert [wid for wid, _, _ in pairs[::2]] == WHERE
    assert [(wid, ch.get("q_regs"), ch.get("split_max")) for wid, ch, _ in both] == [("mha_fwd_d128", True, True)]
    for wid, ch, _ in both:
        assert at.validate(at.params_for(get_workload(wid), **ch), get_workload(wid)) == []
    for (wid, tuned, _), (wid2, with_q, predicted) in zip(pairs[::2], pairs[1::2]):
        w = get_workload(wid)
        before = {k: v for k, v in mod.TUNED_BEFORE_22.get(tuple(at.problem_of(w).values()), {}).items()
                  if k not in ("q_regs", "split_max")}  # TUNED as round 13 measured it
        assert wid2 == wid and tuned == before
        assert with_q == {**tuned, "q_regs": True} and predicted > 0 and at.validate(at.params_for(w, **with_q), w) == []


def test_rounds_11_and_13_run_in_one_sweep():
    mod = attention_sweep()
    assert mod.round_points("11,13") == mod.ROUNDS[11] + mod.ROUNDS[13]
    with pytest.raises(SystemExit, match="expected one or more of"):
        mod.round_points("11,99")
