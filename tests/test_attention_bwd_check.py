"""bench/attention_bwd_check.py's rows and table, on the CPU: a refused plan's reasons reach the JSON row and are
printed under the table (v24's PLAN_ERROR came back as its one-line message only, so its cause had to be found
again on the CPU)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

from ptxbench.tools.results import EvalResult

ROOT = Path(__file__).resolve().parents[1]


def _module():
    spec = importlib.util.spec_from_file_location("attention_bwd_check", ROOT / "bench" / "attention_bwd_check.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_a_refused_plans_reasons_reach_the_row_and_the_table(capsys):
    check = _module()
    why = "launch 2 (attn_bwd_wgmma): static (1024) + dynamic (232192) shared memory = 233216 bytes exceeds the opt-in limit"
    refused = EvalResult(workload="mha_bwd_d128", status="PLAN_ERROR",
                         message="the launch plan does not fit the kernels or the device", plan_errors=[why])
    row = check._row("mha_bwd_d128", refused, 0.1)
    assert row["plan_errors"] == [why] and row["status"] == "PLAN_ERROR"
    passed = check._row("mha_bwd_d64", EvalResult(workload="mha_bwd_d64", status="PASSED"), 1.3)
    assert passed["plan_errors"] == [] and passed["runtime_error"] == ""
    check._table("late_d96+head_groups", [dict(row, timed=False), dict(passed, timed=False)])
    out = capsys.readouterr().out
    assert f"- mha_bwd_d128 (PLAN_ERROR): {why}" in out and "mha_bwd_d64 (" not in out
