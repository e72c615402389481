"""The attention forward's stagger option (workloads/solutions/attention_stagger.py): consumer 1's first S issued once
consumer 0's is done. Checked here: it is two barrier lines in the prologue, paired (one bar.sync of 256 threads by
consumer 1, one bar.arrive by consumer 0, on an id no other barrier of the template uses); it assembles at every
cooperative TUNED point without spills or ptxas warnings, and the key-tile loop's SASS is TUNED's line for line
(registers and constants abstracted), with the same exponentials under the pending P V product, so what the GPU
measures is the stagger alone; validate() refuses it off two cooperative consumers. Speed: the GPU
(attention_template.md round 19)."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from ptxbench.tools.compile import compile_source
from ptxbench.tools.sass import disassemble
from ptxbench.workloads.registry import get_workload
from ptxbench.workloads.solutions import attention_template as at
from ptxbench.workloads.solutions.attention_stagger import BAR_STAGGER

from sass_order import ex2_under_pending_product, sass_ops
from sweeps import attention_sweep

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

from loop_schedule import abstract  # noqa: E402

COOPERATIVE = ["mha_fwd_d128", "mha_fwd_d128_causal", "mha_fwd_d96", "mha_fwd_d96_causal", "mha_fwd_d128_gqa_h32_kv8"]


def _key_tile_loop(cubin: str, kernel: str, products: int) -> list[str]:
    """The shortest backward branch's span that holds one step's `products` HGMMA (S's HD / 16 and P V's bn / 16)."""
    ins = disassemble(cubin)[kernel]
    lines = [f"{i.predicate} {i.opcode} {i.operands}".strip() for i in ins]
    spans = []
    for k, i in enumerate(ins):
        m = re.search(r"0x([0-9a-f]+)", i.operands) if i.opcode.startswith("BRA") else None
        if m and int(m.group(1), 16) // 16 < k:  # 16-byte instructions: the target's index
            a = int(m.group(1), 16) // 16
            if sum(ln.startswith("HGMMA") or " HGMMA" in ln for ln in lines[a:k + 1]) == products:
                spans.append((k - a, a, k))
    assert spans, kernel
    _, a, k = min(spans)
    return lines[a:k + 1]


def test_the_barrier_is_paired_and_its_id_free():
    body = at.render(at.default_params())  # the checked-in file's point has it
    assert body.count(f"bar_sync_imm<{BAR_STAGGER}, 256>()") == 1 and body.count(f"bar_arrive_imm<{BAR_STAGGER}, 256>()") == 1
    assert "if (c == 1) bar_sync_imm<7, 256>()" in body and "if (c == 0) bar_arrive_imm<7, 256>()" in body
    base = at.render(at.default_params().model_copy(update={"stagger": False}))
    assert "BAR_TURN = 1;" in base and "BAR_EPI = 4;" in base and at.default_params().consumers == 2  # ids 1-6 taken
    assert f"<{BAR_STAGGER}," not in base


@pytest.mark.parametrize("wid", COOPERATIVE)
def test_stagger_keeps_the_loop_and_assembles_clean(wid):
    w = get_workload(wid)
    # TUNED has it since round 19; the point as round 19 measured it (before the walk and the q_regs it brought)
    q = at.params_for(w, **attention_sweep().TUNED_BEFORE_22[tuple(at.problem_of(w).values())])
    p = q.model_copy(update={"stagger": False})
    assert q.stagger
    assert at.validate(q, w) == []
    loops, ex2 = {}, {}
    for point in (p, q):
        r = compile_source(at.render(point), "cuda", "sm_90a")
        k = r.kernels[at.kernel_name(point)]
        assert r.status == "ok" and not r.warnings and k.spill_stores == k.spill_loads == 0, (wid, r.warnings)
        loops[point.stagger] = abstract(_key_tile_loop(r.cubin_path, at.kernel_name(point), (p.head_dim + p.bn) // 16))
        ex2[point.stagger] = ex2_under_pending_product(sass_ops(at.render(point), at.kernel_name(point)))
    assert loops[True] == loops[False]
    assert ex2[True] == ex2[False] > 0


def test_refused_off_two_cooperative_consumers():
    d64 = at.default_params(get_workload("mha_fwd_d64"))  # 3 consumers, ping-pong
    assert any("stagger" in b for b in at.validate(d64.model_copy(update={"stagger": True})))
    pp = at.default_params().model_copy(update={"schedule": "pingpong", "stagger": True})
    assert any("stagger" in b for b in at.validate(pp))
    assert "stagger" not in at.plain_params().model_dump()  # an option at its default leaves the dump as before
    assert sorted(k for k, pt in at.TUNED.items() if pt.get("stagger")) == [
        (96, False, False), (96, True, False), (128, False, False), (128, False, True), (128, True, False)]


def test_round_19_pairs_every_cooperative_tuned_point():
    mod = attention_sweep()
    points = mod.ROUNDS[19]
    smoke, pairs = points[:3], points[3:]
    assert all(wid.startswith("smoke_") and ch["stagger"] and pred is None for wid, ch, pred in smoke)
    assert [wid for wid, _, _ in pairs[::2]] == COOPERATIVE
    for (wid, tuned, _), (wid2, staggered, predicted) in zip(pairs[::2], pairs[1::2]):
        w = get_workload(wid)
        now = mod.TUNED_BEFORE_22[tuple(at.problem_of(w).values())]
        assert wid2 == wid and tuned == {k: v for k, v in now.items() if k != "stagger"} and now["stagger"]
        assert staggered == {**tuned, "stagger": True} and predicted > 0
        assert at.validate(at.params_for(w, **staggered), w) == []
    for wid, ch, _ in smoke:
        assert at.validate(at.params_for(get_workload(wid), **ch), get_workload(wid)) == []
