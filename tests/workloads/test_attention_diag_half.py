"""The attention forward's diag_half option (workloads/solutions/attention_diag.py): on the causal diagonal key tile
consumer 0 computes S and P V over the 64 keys its rows see. Checked here: where the template allows it the diagonal
is the only masked tile and consumer 0's rows see none of its last 64 keys (a mirror of the kernel's tile counts and
mask); it is off in the checked-in file and refused outside causal, cooperative, 2 consumers, bn = 128; it assembles
at the causal points without spills and without ptxas serialising the wgmma pipe (C7511, which writing the half S
into part of s caused), the main loop's overlap kept; round 12 pairs each causal TUNED point with it. Speed: the GPU
(attention_template.md round 12)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from ptxbench.tools.compile import compile_source
from ptxbench.workloads.registry import get_workload
from ptxbench.workloads.solutions import attention_template as at

from sass_order import sass_ops

ROOT = Path(__file__).resolve().parents[2]
BM = BN = 128


def _masked(col: int, row_in_tile: int, q0: int, j: int, c: int) -> bool:
    """mask_tile's rule for consumer c's row (q0 + 64 c + row) at key j BN + col (causal: a key after the row)."""
    return j * BN + col > q0 + 64 * c + row_in_tile


@pytest.mark.parametrize("seq", [128, 1024, 4096])
def test_the_diagonal_is_the_only_masked_tile_and_consumer_0_sees_only_its_first_half(seq):
    for q0 in range(0, seq, BM):
        n_tiles = (min(q0 + BM, seq) + BN - 1) // BN  # the kernel's formulas (causal)
        n_plain = (q0 + 1) // BN
        assert list(range(n_plain, n_tiles)) == [q0 // BN]  # one masked tile: the diagonal, keys q0 .. q0 + 127
        j = q0 // BN
        assert all(_masked(col, row, q0, j, 0) for row in range(64) for col in range(64, BN))
        assert not all(_masked(col, row, q0, j, 1) for row in range(64) for col in range(64, BN))  # consumer 1 needs all


def test_off_in_the_checked_in_file_and_refused_where_it_does_not_hold():
    assert at.OPTION_SPACE["diag_half"] == [False, True]
    assert "diag_half" not in at.render(at.default_params()) and not any(pt.get("diag_half") for pt in at.TUNED.values())
    causal = at.default_params(get_workload("mha_fwd_d128_causal"))
    assert at.validate(causal.model_copy(update={"diag_half": True})) == []
    for change in ({"causal": False}, {"schedule": "pingpong"}, {"bn": 96}, {"consumers": 3}):
        q = causal.model_copy(update={"diag_half": True, **change})
        assert any("diag_half" in b for b in at.validate(q)), change


@pytest.mark.parametrize("wid", ["mha_fwd_d128_causal", "mha_fwd_d96_causal"])
def test_diag_half_assembles_without_serialising_the_wgmma_pipe(wid):
    """The half step is a copy of the masked step with S as m64n64 (HD / 16 k-steps) and its previous tile's full P V
    (8), plus the half final P V (4); ptxas 13.5 adds one more. The unmasked loop keeps its wait for one group."""
    p = at.default_params(get_workload(wid))
    kernels, ops = {}, {}
    for dh in (False, True):
        q = p.model_copy(update={"diag_half": dh})
        r = compile_source(at.render(q), "cuda", "sm_90a")
        assert r.status == "ok" and not r.warnings, [w.message for w in r.warnings]  # no C7511 / C7512
        kernels[dh], ops[dh] = r.kernels[at.kernel_name(q)], sass_ops(at.render(q), at.kernel_name(q))
    assert kernels[True].spill_stores == 0 and kernels[True].registers == kernels[False].registers
    hd = p.head_dim
    assert kernels[True].sass_opcodes["HGMMA"] - kernels[False].sass_opcodes["HGMMA"] == hd // 16 + 8 + 4 + 1
    waits_one = [sum(o == "WARPGROUP.DEPBAR.LE gsb0,0x1" for o in ops[dh]) for dh in (False, True)]
    assert waits_one[1] == waits_one[0] + 1, waits_one  # every step still waits for S alone, the half step too
    assert any(o.startswith("HGMMA.64x64x16.F32.BF16") for o in ops[True])
    assert not any(o.startswith("HGMMA.64x64x16.F32.BF16") for o in ops[False])


def test_round_12_pairs_each_causal_tuned_point_with_diag_half():
    spec = importlib.util.spec_from_file_location("attention_sweep", ROOT / "bench" / "attention_sweep.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    points = mod.ROUNDS[12]
    assert [wid for wid, _, _ in points] == ["mha_fwd_d128_causal"] * 2 + ["mha_fwd_d96_causal"] * 2
    for (wid, tuned, _), (_, half, predicted) in zip(points[::2], points[1::2]):
        w = get_workload(wid)
        assert tuned == at.TUNED[tuple(at.problem_of(w).values())] and half == {**tuned, "diag_half": True}
        assert at.validate(at.params_for(w, **half), w) == [] and predicted > 0
