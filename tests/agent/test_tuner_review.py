"""builtin/tuner reviewed as a user meets it: its rules read against the H200 profiles the profile feedback was
reviewed on (tests/data/profile/review), each claim checked against the figures it quotes and against what the
feedback itself now says there; a failed move not proposed again from the next base; a figure from another turn's
profile not quoted against the base's values; a workload without a template given the reference once."""
from __future__ import annotations

import json
from pathlib import Path

from ptxbench.agent.models import TurnOutcome
from ptxbench.agent.models.evidence import Evidence, HotSpot, evidence_from
from ptxbench.agent.models.tuner import TunerModel, _lessons
from ptxbench.agent.models.tuner_rules import rank
from ptxbench.tools.results import EvalResult
from ptxbench.workloads.solutions import gemm_template as gt

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


def test_a_move_whose_point_failed_is_not_proposed_again_from_the_next_base():
    ev, workload = recorded("gemm_m8192")
    # consumers wait on stage data: the deeper ring leads from any base with a shallow one
    waiting = ev.model_copy(update=dict(status="PASSED", headroom_pct=20.0, hot_lines=[
        HotSpot(line=299, text="mbar_wait(&full[stage], phase);", share_pct=40.0, reason="long_scoreboard")]))
    tuner = TunerModel(workload)
    start = {**gt.default_params().model_dump(), "stages": 2}
    history = [TurnOutcome(turn=1, status="PASSED", speedup=0.90, tags={"params": start, "move": None},
                           evidence=waiting)]
    deeper = tuner.next_params(history)
    assert deeper.move == ("ring", "up")
    history.append(TurnOutcome(turn=2, status="INCORRECT_NUMERICAL", tags={"params": deeper.params,
                                                                           "move": list(deeper.move)}))
    other = tuner.next_params(history)  # back to turn 1: another move, which pays
    assert "back to turn 1" in other.why and other.params["stages"] == 2
    history.append(TurnOutcome(turn=3, status="PASSED", speedup=0.95, tags={"params": other.params,
                                                                            "move": list(other.move)},
                               evidence=waiting))
    after = tuner.next_params(history)
    assert after.params["stages"] != deeper.params["stages"], after.why
    lessons = _lessons(history, {"ring": ("stages", None)}, lambda h: h.speedup or 0.0)
    ring = next(c for c in rank(gt, other.params, waiting, tuner._valid, lost=lessons) if c.role == "ring")
    assert ring.reasons == [f"stages -> {deeper.params['stages']} failed at turn 2 (INCORRECT_NUMERICAL)"]
    # the harness's own failure says nothing about the point
    history[1] = history[1].model_copy(update=dict(status="INFRA_ERROR"))
    assert tuner.next_params(history).params["stages"] == deeper.params["stages"]


def test_a_bigger_tile_whose_point_failed_is_not_proposed_again():
    # the bigger tile (bm and bn at once) leads from the weak point; its point came back wrong
    ev, workload = recorded("gemm_m8192")
    tuner = TunerModel(workload, start="weak")
    weak = tuner.start_params()[0]
    history = [TurnOutcome(turn=1, status="PASSED", speedup=0.30, tags={"params": weak, "move": None}, evidence=ev)]
    tile = tuner.next_params(history)
    assert tile.move == ("tile", "up")
    history.append(TurnOutcome(turn=2, status="INCORRECT_NUMERICAL", tags={"params": tile.params,
                                                                           "move": list(tile.move)}))
    other = tuner.next_params(history)
    history.append(TurnOutcome(turn=3, status="PASSED", speedup=0.35, tags={"params": other.params,
                                                                            "move": list(other.move)}, evidence=ev))
    after = tuner.next_params(history)
    assert (after.params["bm"], after.params["bn"]) != (tile.params["bm"], tile.params["bn"]), after.why
    lessons = _lessons(history, {"tile_m": ("bm", None), "tile_n": ("bn", None)}, lambda h: h.speedup or 0.0)
    again = next(c for c in rank(gt, other.params, ev, tuner._valid, lost=lessons) if c.role == "tile")
    assert again.reasons == [f"bm -> {tile.params['bm']}, bn -> {tile.params['bn']} failed at turn 2 "
                             "(INCORRECT_NUMERICAL)"]


def test_a_figure_from_another_turns_profile_is_not_quoted_against_the_base_points_values():
    # turn 1 (two consumer warpgroups) was profiled: the tensor pipe 40% busy; turn 2 (one warpgroup) was within
    # noise and not profiled, so it is the base and turn 1's profile the evidence: that 40% was not measured with one
    ev, workload = recorded("gemm_m8192")
    idle = ev.model_copy(update=dict(status="PASSED", tensor_pipe_pct=40.0, bottleneck="latency", hot_lines=[],
                                     headroom_pct=40.0))
    tuner = TunerModel(workload)
    two = gt.default_params().model_dump()
    one = {**two, "consumers": 1, "bm": 64, "stages": 3}  # so a second warpgroup from it is not turn 1's point
    assert tuner._valid(two) and tuner._valid(one)
    history = [TurnOutcome(turn=1, status="PASSED", speedup=0.90, tags={"params": two, "move": None}, evidence=idle),
               TurnOutcome(turn=2, status="PASSED", speedup=0.905, tags={"params": one, "move": ["warps", "down"]},
                           evidence=Evidence(status="PASSED"))]
    choice = tuner.next_params(history)
    assert "turn 2" in choice.why and "turn 1's profile" in choice.why
    assert "with 1 consumer warpgroup" not in choice.analysis + choice.why
    # profiled at the base itself, the same figure speaks
    history[1] = history[1].model_copy(update=dict(evidence=idle.model_copy()))
    assert "the tensor pipe is busy 40% of the time with 1 consumer warpgroup" in tuner.next_params(history).analysis


def test_a_workload_without_a_template_gets_the_reference_once(monkeypatch):
    import pytest

    import ptxbench.agent.models.tuner as tuner_module
    from ptxbench.agent.models import ModelExhausted, ModelRequest

    monkeypatch.setattr(tuner_module, "TEMPLATES", {k: v for k, v in tuner_module.TEMPLATES.items() if k != "mha_bwd"})
    tuner = TunerModel("mha_bwd_d128")
    first = tuner.query(ModelRequest(messages=[], turn=1))
    assert first.tags == {"reference": True} and "No tunable template" in first.content
    # the harness failed to evaluate it: asking again is fair
    lost = TurnOutcome(turn=1, status="INFRA_ERROR", tags=first.tags)
    assert tuner.query(ModelRequest(messages=[], turn=2, history=[lost])).tags == {"reference": True}
    evaluated = TurnOutcome(turn=2, status="PASSED", speedup=1.0, tags=first.tags)
    with pytest.raises(ModelExhausted, match="no tunable template for mha_bwd_d128.*evaluated at turn 2"):
        tuner.query(ModelRequest(messages=[], turn=3, history=[lost, evaluated]))


def test_a_memory_bound_kernel_at_its_minimum_bytes_is_not_told_to_grow_its_tile():
    # the decode GEMM (M = 64): memory-bound with DRAM 72% busy at 1.02x the minimum bytes and the tensor pipe 23%
    # busy; no bigger tile or second warpgroup cuts those bytes (bm 128 would leave half its rows empty), and the
    # feedback leaves the idle tensor pipe to the memory finding: the consumers' wait for stage data leads
    ev, workload = recorded("gemm_m64")
    assert ev.bottleneck == "memory" and ev.dram_over_min < 1.1 and ev.tensor_pipe_pct < 30
    ranked = ranked_from_weak(ev, workload)
    assert ranked[0].role == "ring" and "consumers wait 51% of stall samples for stage data" in ranked[0].reasons[0]
    said = reasons(ranked)
    assert "memory-bound (memory" not in said and "consumer warpgroup" not in said
    # with bytes to cut, memory-bound still points at the traffic moves
    traffic = ev.model_copy(update=dict(dram_over_min=3.0))
    assert "memory-bound (memory 72% of peak, compute 23%)" in reasons(ranked_from_weak(traffic, workload))


def test_the_headroom_sentences_the_evidence_reads_are_the_ones_the_feedback_writes():
    # a result without a timing takes its headroom from the feedback's text: these two sentences
    from ptxbench.agent.models.evidence import PAST_ROOF, WITHIN_ROOF
    from ptxbench.tools.profile.feedback import template

    t = template()["standing"]
    within = WITHIN_ROOF.search(t["at_roof"].format(left="12 us", pct=3.0))
    assert within is not None and float(within.group(1)) == 3.0
    assert PAST_ROOF in t["past_roof"]
