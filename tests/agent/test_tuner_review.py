"""builtin/tuner read against the H200 profiles the profile feedback was reviewed on (tests/data/profile/review):
each rule's claim checked against the figures it quotes, and against what the feedback itself now says there."""
from __future__ import annotations

import json
from pathlib import Path

from ptxbench.agent.models.evidence import Evidence, evidence_from
from ptxbench.agent.models.tuner import TunerModel
from ptxbench.agent.models.tuner_rules import rank
from ptxbench.tools.results import EvalResult

REVIEW = Path(__file__).parents[1] / "data" / "profile" / "review"


def recorded(case: str) -> tuple[Evidence, str]:
    data = json.loads((REVIEW / f"{case}.json").read_text())
    result = EvalResult(workload=data["workload"], status="PASSED", profile=data["summary"])
    return evidence_from(result), data["workload"]


def ranked_from_weak(ev: Evidence, workload: str):
    tuner = TunerModel(workload, start="weak")
    return rank(tuner.template, tuner.start_params()[0], ev, tuner._valid)


def reasons(ranked) -> str:
    return " ".join(r for c in ranked for r in c.reasons)


def test_a_wgmma_line_at_a_busy_tensor_pipe_is_not_called_a_full_shared_memory_queue():
    # the main GEMM: its wgmma line waits on mio_throttle (25% of samples) with the tensor pipe 94% busy, which the
    # feedback reads as the tensor cores' own rate (at_wgmma_full), not a shared-memory queue to relieve
    ev, workload = recorded("gemm_m8192")
    assert ev.tensor_pipe_pct > 90 and any(h.reason == "mio_throttle" and "wgmma" in h.text for h in ev.hot_lines)
    assert "shared-memory queue is full" not in reasons(ranked_from_weak(ev, workload))
    # the same line at a half-idle tensor pipe: the queue is the suspect, and the rule still says so
    idle = ev.model_copy(update=dict(tensor_pipe_pct=50.0))
    assert "shared-memory queue is full at the wgmma line (25%)" in reasons(ranked_from_weak(idle, workload))


def test_dram_bytes_of_a_kernel_bound_by_shared_memory_are_said_to_be_worth_little():
    # the attention backward: 2.3x the minimum DRAM bytes, memory-bound by L1/shared memory with DRAM 7% busy
    ev, workload = recorded("attn_bwd_d128")
    assert ev.bottleneck == "memory" and ev.dram_sol_pct < 10 and 2.2 < ev.dram_over_min < 2.4
    order = next(c for c in ranked_from_weak(ev, workload) if c.role == "order")
    why = " ".join(order.reasons)
    assert "DRAM moved 2.3x the minimum bytes, but DRAM was only 7% busy: the memory limit is L1/shared memory" in why
    # its evidence weight is the hidden-traffic quarter: the same profile with DRAM busy ranks the move higher
    busy = ev.model_copy(update=dict(dram_sol_pct=80.0))
    busy_order = next(c for c in ranked_from_weak(busy, workload) if c.role == "order")
    assert busy_order.score > order.score * 1.5 and "worth little" not in " ".join(busy_order.reasons)


def test_other_moves_are_not_ranked_down_as_if_an_idle_dram_were_saturated():
    ev, workload = recorded("attn_bwd_d128")
    many = ev.model_copy(update=dict(dram_over_min=6.0))  # past the starved threshold, DRAM still 7% busy
    assert "DRAM is saturated" not in reasons(ranked_from_weak(many, workload))
    saturated = many.model_copy(update=dict(dram_sol_pct=85.0))
    assert "ranked down while DRAM is saturated" in reasons(ranked_from_weak(saturated, workload))
