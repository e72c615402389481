"""The attention forward's store_wait option (workloads/solutions/attention_template.py, round 18): with
store_wait="read" the TMA-store epilogue's last wait is for O's staging rows to be read (cp.async.bulk.wait_group.read),
not for its writes to be done. Checked on the CPU: TUNED's renders are unchanged, the option changes that one line,
assembles with TUNED's HGMMA count and no spills, and is refused without the TMA epilogue. The speed: the GPU
(bench/attention_sweep.py --round 18)."""
from __future__ import annotations

import difflib

import pytest

from ptxbench.tools.compile import compile_source
from ptxbench.workloads.solutions import attention_template as at

POINTS = [(128, False, False), (128, True, False), (96, False, False), (128, False, True)]


def _params(problem, **changes):
    d, causal, gqa = problem
    return at.AttnParams(head_dim=d, causal=causal, gqa=gqa, **{**at.TUNED[problem], **changes})


@pytest.mark.parametrize("problem", POINTS)
def test_read_changes_only_the_last_wait(problem):
    base, mine = at.render(_params(problem)), at.render(_params(problem, store_wait="read"))
    assert "tma_store_wait_read<0>()" not in base and at.render(_params(problem, store_wait="complete")) == base
    changed = [ln for ln in difflib.unified_diff(base.splitlines(), mine.splitlines(), lineterm="", n=0)
               if ln[:1] in "+-" and ln[:3] not in ("+++", "---")]
    # the header's parameters, and the wait
    assert sorted(ln[0] for ln in changed) == ["+", "+", "-", "-"]
    header = [ln for ln in changed if "// Hopper attention forward rendered" in ln]
    assert len(header) == 2 and "'store_wait': 'read'" in header[1] and header[1].startswith("+")
    wait = [ln for ln in changed if ln not in header]
    assert wait[0] == "-    tma_store_wait<0>();" and wait[1].startswith("+    tma_store_wait_read<0>();")


def test_read_assembles_like_tuned():
    problem = (128, False, False)
    base = compile_source(at.render(_params(problem)), "cuda", "sm_90a")
    mine = compile_source(at.render(_params(problem, store_wait="read")), "cuda", "sm_90a")
    assert mine.status == "ok" and not mine.warnings, [w.message for w in mine.warnings]
    (name,) = [n for n in mine.kernels if n.startswith(at.KERNEL)]
    assert mine.kernels[name].sass_opcodes["HGMMA"] == base.kernels[name].sass_opcodes["HGMMA"]
    assert mine.kernels[name].spill_stores == 0 and mine.kernels[name].registers == base.kernels[name].registers


def test_read_needs_the_tma_epilogue():
    bad = at.validate(_params((128, False, False), epilogue="direct", store_wait="read"))
    assert any("store_wait='read' is the TMA store's wait" in b for b in bad)
    assert at.AttnParams(store_wait="read").model_dump()["store_wait"] == "read"
    assert "store_wait" not in at.AttnParams().model_dump()  # at its default a point dumps as before the option
