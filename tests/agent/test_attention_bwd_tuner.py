"""builtin/tuner on the attention backward (workloads/solutions/attention_bwd_template.py): the template chosen for
every mha_bwd workload, turn 1 the reference (or the checked-in file from the weak start), each finding's move, and a search that only ever submits built
points. No GPU: the evidence is written by hand; which point is fastest is for the H200 to say
(bench/gpu_round.sh bwd-variants)."""
from __future__ import annotations

import pytest

from ptxbench.agent.loop.extract import extract_solution
from ptxbench.agent.models import ModelExhausted, ModelRequest, TurnOutcome, load_model
from ptxbench.agent.models.evidence import Evidence, HotSpot
from ptxbench.agent.models.tuner import TunerModel
from ptxbench.agent.models.tuner_rules import rank
from ptxbench.workloads.registry import get_workload, list_workloads
from ptxbench.workloads.solutions import attention_bwd_template as bt
from ptxbench.workloads.solutions.attention_backward import reference_backward

BACKWARD = [w.id for w in list_workloads() if w.op == "mha_bwd"]


@pytest.mark.parametrize("wid", BACKWARD)
def test_every_backward_workload_is_searched_from_the_template_starting_at_the_reference(wid):
    tuner = load_model("builtin/tuner", wid)
    assert tuner.template is bt
    first = tuner.query(ModelRequest(messages=[], turn=1))
    assert first.tags["params"] == bt.default_params(get_workload(wid)).model_dump()
    assert extract_solution(first.content).source.strip() == reference_backward(get_workload(wid)).strip()


def _evidence(*hot: tuple[str, float]) -> Evidence:
    return Evidence(status="PASSED", speedup=0.50, profiled=True, bottleneck="compute", tensor_pipe_pct=45.0,
                    headroom_pct=60.0, hot_lines=[HotSpot(line=300 + i, text=t, share_pct=s, reason="lg_throttle")
                                                  for i, (t, s) in enumerate(hot)])


def _first_move(ev: Evidence):
    """The first move from the checked-in file's point (the weak start: vector dQ, 2 stages)."""
    tuner = TunerModel("mha_bwd_d128")
    return rank(bt, bt.weak_params(get_workload("mha_bwd_d128")).model_dump(), ev, tuner._valid)[0]


def test_hot_dq_reductions_point_at_the_bulk_reduction():
    move = _first_move(_evidence(("atomicAdd(reinterpret_cast<float2*>(dst), make_float2(dq[j], dq[j + 1]));", 30.0)))
    assert move.params["dq"] == "bulk" and move.role == "dq_reduce"
    assert any("dQ reductions hold 30%" in r for r in move.reasons)


def test_hot_exponentials_raise_decoupled_consumers_with_the_ring_they_are_built_with():
    """The exponentials and the consumers' barrier hot: the decoupled schedule gains rank from the evidence (the
    measured priors still put the bulk reduction first from the weak start: it gave -17% time, decoupling -2%)."""
    wl = get_workload("mha_bwd_d128")
    weak, valid = bt.weak_params(wl).model_dump(), TunerModel("mha_bwd_d128")._valid
    hot = _evidence(("float e = ex2(fmaf(s[j], sl2, -sL2[q]));", 25.0), ("named_barrier_sync(1, 256);", 10.0))
    move = next(m for m in rank(bt, weak, hot, valid) if m.role == "schedule")
    plain = next(m for m in rank(bt, weak, Evidence(status="PASSED", speedup=0.50), valid) if m.role == "schedule")
    assert move.params["schedule"] == "decoupled" and move.params["stages"] == 3 and move.params["dq"] == "vector"
    assert "stages" in move.label  # the repair that makes it a built point is said
    assert move.score > 2 * plain.score and move.reasons and not plain.reasons


def test_from_the_d64_weak_start_the_bulk_reduction_takes_the_ring_it_is_built_with():
    """At D = 64 the bulk dQ reduction exists only in the 3-stage build: the move says the repair."""
    wl = get_workload("mha_bwd_d64")
    move = rank(bt, bt.weak_params(wl).model_dump(),
                _evidence(("atomicAdd(reinterpret_cast<float2*>(dst), make_float2(dq[j], dq[j + 1]));", 30.0)),
                TunerModel("mha_bwd_d64")._valid)[0]
    assert move.role == "dq_reduce" and bt.variant_of(move.params) == "pair_d64_r40" and "stages" in move.label


@pytest.mark.parametrize("wid", ["mha_bwd_d128", "smoke_mha_bwd_d64"])
def test_a_search_submits_only_built_points_and_visits_each_once(wid):
    workload = get_workload(wid)
    buildable = {k for k in bt.BUILT if not bt.validate(bt.params_for(workload, **dict(zip(bt.SEARCHED, k))), workload)}
    # four builds in two launch orders; at D = 64 the 2-stage bulk build is not bulk
    assert len(buildable) == (6 if wid.startswith("smoke") else 8)
    tuner = TunerModel(wid)
    history: list[TurnOutcome] = []
    seen = []
    for turn in range(1, len(buildable) + 1):
        reply = tuner.query(ModelRequest(messages=[], turn=turn, history=history))
        params = reply.tags["params"]
        assert bt.validate(params, workload) == []
        seen.append(tuple(params[k] for k in bt.SEARCHED))
        history.append(TurnOutcome(turn=turn, status="PASSED", speedup=0.50 + 0.01 * turn, message="",
                                   tags=reply.tags, evidence=Evidence(status="PASSED", speedup=0.50 + 0.01 * turn)))
    assert set(seen) == buildable  # every buildable point, the reference first, none twice
    assert seen[0] == ("bulk", 3, "cooperative", "head_groups")
    with pytest.raises(ModelExhausted, match="search ends here"):  # then the run ends: no build is resubmitted
        tuner.query(ModelRequest(messages=[], turn=len(buildable) + 1, history=history))


def test_dram_over_the_minimum_points_at_the_head_order_first():
    """The head-fastest grid's profile on the H200 (25x the minimum DRAM bytes, memory-bound) asks for the launch
    order before anything else (it gave -27% at D = 128; bench/results/attention_bwd.md, v4)."""
    ev = Evidence(status="PASSED", speedup=0.50, profiled=True, bottleneck="memory", memory_sol_pct=74.0,
                  compute_sol_pct=38.0, dram_over_min=25.4, tensor_pipe_pct=38.0, headroom_pct=55.0)
    move = _first_move(ev)
    assert move.role == "order" and move.params["order"] == "head_groups"
    assert any("25" in r and "DRAM" in r for r in move.reasons), move.reasons
    # without that evidence the order is still the move worth most (its prior) from the weak start
    assert _first_move(Evidence(status="PASSED", speedup=0.50)).role == "order"


# Kernel ms of the backward's built points at D = 128 as the climb recorded on the H200 on 2026-12-02 measured them (tree
# 3e48552, the reference of that day; docs/examples/tuner-climb-mha_bwd_d128 now holds the 2026-12-03 recording), keyed (dq, stages, schedule, order); cuDNN 7.10 ms. The climb's points not measured there are given
# the slowest time of the run, so a search that reaches them pays.
CLIMB_MS = {("vector", 2, "cooperative", "head_fastest"): 13.86, ("vector", 2, "cooperative", "head_groups"): 10.30,
            ("bulk", 2, "cooperative", "head_groups"): 8.46, ("vector", 3, "decoupled", "head_groups"): 9.81,
            ("bulk", 3, "cooperative", "head_groups"): 7.16, ("bulk", 3, "cooperative", "head_fastest"): 11.46}


def _measured(turn: int, params: dict) -> TurnOutcome:
    ms = CLIMB_MS.get(tuple(params[k] for k in bt.SEARCHED), max(CLIMB_MS.values()))
    ev = Evidence(status="PASSED", speedup=7.10 / ms, kernel_ms=ms, profiled=True, tensor_pipe_pct=52.0,
                  headroom_pct=30.0, bottleneck="compute")
    if params["order"] == "head_fastest":  # the recorded profile of the head-fastest grid
        ev = ev.model_copy(update={"bottleneck": "memory", "dram_over_min": 25.4, "memory_sol_pct": 61.0})
    return TurnOutcome(turn=turn, status="PASSED", speedup=7.10 / ms, message="", evidence=ev,
                       tags={"params": params})


def test_the_weak_climb_reaches_the_reference_by_turn_4_on_the_recorded_times():
    """The recorded climb took the decoupled schedule at turn 4 (its build gives back the bulk reduction: 0.725x) and
    the reference at turn 5. With the 3-stage move worth what its build measured (bulk_dq -> the reference, -15%), the
    same evidence leads to the reference at turn 4, and the reply says what that build is. The H200 re-recording
    (2026-12-03, docs/examples/tuner-climb-mha_bwd_d128) took this path in each of its three runs: 1.073x at turn 4."""
    from ptxbench.agent.models.tuner import WeakTunerModel

    tuner, history, replies = WeakTunerModel("mha_bwd_d128"), [], []
    for turn in range(1, 5):
        reply = tuner.query(ModelRequest(messages=[], turn=turn, history=history))
        replies.append(reply)
        history.append(_measured(turn, reply.tags["params"]))
    path = [tuple(h.tags["params"][k] for k in bt.SEARCHED) for h in history]
    assert path == [("vector", 2, "cooperative", "head_fastest"), ("vector", 2, "cooperative", "head_groups"),
                    ("bulk", 2, "cooperative", "head_groups"), ("bulk", 3, "cooperative", "head_groups")]
    assert "the 3-stage build, the reference" in replies[3].content
