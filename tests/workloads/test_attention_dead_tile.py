"""The attention forward's dead_tile option (workloads/solutions/attention_diag.py DEAD_TILE): under D = 64 causal's
ping-pong point (3 consumers, 192 query rows, 96-key tiles) consumer 0's last key tile of each query tile lies wholly
past its rows and is skipped. Mirrored here: with the kernel's tile counts and mask rule the skip condition holds
exactly for (consumer 0, last tile) of every full query tile and nowhere else, and there every S element is masked (so P
is zero and skipping it is exact); the dead step keeps the turn and stage-release counts of a live one. It assembles
clean; validate() allows it only at that shape. Speed: the GPU (attention_template.md round 14)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from ptxbench.tools.compile import compile_source
from ptxbench.workloads.registry import get_workload
from ptxbench.workloads.solutions import attention_template as at
from ptxbench.workloads.solutions.attention_diag import DEAD_STEP, DEAD_TILE

from sass_order import sass_ops

ROOT = Path(__file__).resolve().parents[2]
BM, BN = 192, 96


@pytest.mark.parametrize("seq", [192, 4096, 960 + 64])
def test_the_skip_condition_is_exactly_the_wholly_masked_tiles(seq):
    for q0 in range(0, seq, BM):
        n_tiles = (min(q0 + BM, seq) + BN - 1) // BN  # the kernel's causal counts
        n_plain = (q0 + 1) // BN
        for c in range(3):
            last_row = q0 + 64 * c + 63
            for j in range(max(n_plain, 1), n_tiles):
                keys = range(j * BN, min(j * BN + BN, seq))
                masked = all(k > row for k in keys for row in range(q0 + 64 * c, last_row + 1))
                skipped = j * BN > last_row  # DEAD_TILE's condition
                assert skipped == masked, (q0, c, j)
                assert skipped == (c == 0 and j == n_tiles - 1 and q0 + BM <= seq), (q0, c, j)


def test_the_dead_step_keeps_the_turns_and_releases():
    live = at.BODY.read_text()
    step = live[live.index("__device__ __forceinline__ void consumer_step("):]
    step = step[:step.index("\n}\n")]
    for call in ("turn_wait(w.c);", "turn_pass(w.c);", "mbar_arrive(&w.emptyK[st]);", "mbar_arrive(&w.emptyV[sp]);",
                 "mbar_wait(&w.fullK[st]", "mbar_wait(&w.fullV[sp]"):
        assert step.count(call) == DEAD_STEP.count(call) == 1, call
    assert "issue_qk" not in DEAD_STEP and "softmax_tile" not in DEAD_STEP and "issue_pv(o, p," in DEAD_STEP
    final = DEAD_TILE[2][1]
    assert "turn_wait(c);" in final and "if (!last_dead) {" in final  # the final turn kept, its product skipped


def test_dead_tile_assembles_and_is_refused_elsewhere():
    w = get_workload("mha_fwd_d64_causal")
    p = at.default_params(w)
    assert (p.consumers, p.bn, p.schedule) == (3, 96, "pingpong")
    q = p.model_copy(update={"dead_tile": True})
    assert at.validate(q, w) == [] and "dead_tile" not in at.render(p)
    r = compile_source(at.render(q), "cuda", "sm_90a")
    assert r.status == "ok" and not r.warnings
    k, k0 = r.kernels[at.kernel_name(q)], compile_source(at.render(p), "cuda", "sm_90a").kernels[at.kernel_name(p)]
    assert k.spill_stores == 0 and k.sass_opcodes["HGMMA"] == k0.sass_opcodes["HGMMA"] + BN // 16  # the dead step's P V
    assert "HGMMA" in " ".join(sass_ops(at.render(q), at.kernel_name(q)))
    for change in ({"bn": 128}, {"causal": False, "lpt_group": 0}, {"schedule": "cooperative"}):
        assert any("dead_tile" in b for b in at.validate(q.model_copy(update=change))), change


def test_round_14_pairs_d64_causal_with_dead_tile():
    spec = importlib.util.spec_from_file_location("attention_sweep", ROOT / "bench" / "attention_sweep.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    (wid, tuned, _), (wid2, dead, predicted) = mod.ROUNDS[14]
    assert wid == wid2 == "mha_fwd_d64_causal" and tuned == at.TUNED[(64, True, False)]
    assert dead == {**tuned, "dead_tile": True} and predicted > 0
