"""A tools-mode turn that the run's token, cost or wall-time budget stops between two of its replies, before the model
could submit, is the harness's cut, not a failed turn of the model's: a pipeline run, whose budgets are checked
between turns only, never has such a turn, so the two modes scored the same behaviour differently. A tool-call budget
the model is told of with every answer, and a turn the model itself ends without a kernel, stay scored."""
from __future__ import annotations

from agent_helpers import GOOD_PTX, of_type, reply
from ptxbench.agent.records.rundir import TrajectoryRecord
from ptxbench.agent.scoring.turns import score_trajectory
from test_loop_hostile import FakeClock, SlowEvaluator, run, tool
from ptxbench.agent.loop import graph


def _score(tmp_path, evs):
    return score_trajectory(TrajectoryRecord(tmp_path / "traj", evs))


def _submit(tokens: int) -> dict:
    return {"content": "", "tool_calls": [tool("submit", {"source": GOOD_PTX})], "usage": {"total_tokens": tokens}}


def _profile(tokens: int) -> dict:
    return {"content": "", "tool_calls": [tool("profile", {"source": GOOD_PTX})], "usage": {"total_tokens": tokens}}


def test_a_token_budget_stop_inside_a_tools_turn_is_no_failed_turn_as_in_pipeline_mode(tmp_path):
    # tools: turn 1 submits; turn 2's first reply (a profile) spends the token budget before the model can submit
    outcome, evs, _ = run(tmp_path / "tools", [_submit(10), _profile(100), _submit(10)], mode="tools", turns=4,
                          max_tokens=50)
    assert outcome.stop_reason == "token_budget" and outcome.statuses == ["PASSED"]
    # the loop still closes the cut turn in the log (every reader finds each turn closed) ...
    assert [(e.turn, e.status) for e in of_type(evs, "turn_end")] == [(1, "PASSED"), (2, "FORMAT_ERROR")]
    tools = _score(tmp_path / "tools", evs)
    # ... but it is no turn of the model's: scored as the pipeline run of the same spending below
    assert [t.turn for t in tools.turns] == [1] and tools.cut_turn == 2
    assert not any(t.failed for t in tools.scored_turns) and tools.first_correct_turn == 1

    pipe_out, pipe_evs, _ = run(tmp_path / "pipe", [{**reply(GOOD_PTX), "usage": {"total_tokens": 110}},
                                                    reply(GOOD_PTX)], mode="pipeline", turns=4, max_tokens=50)
    assert pipe_out.stop_reason == "token_budget"
    pipe = _score(tmp_path / "pipe", pipe_evs)
    assert pipe.cut_turn is None
    assert [(t.turn, t.status) for t in pipe.scored_turns] == [(t.turn, t.status) for t in tools.scored_turns]


def test_a_wall_time_stop_inside_a_tools_turn_is_no_failed_turn(tmp_path, monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(graph, "time", clock)
    evaluator = SlowEvaluator(clock, 100.0)
    outcome, evs, _ = run(tmp_path, [_submit(1), _profile(1), _submit(1)], evaluator, mode="tools", turns=4,
                          max_wall_s=150)
    assert outcome.stop_reason == "time_budget"
    score = _score(tmp_path, evs)
    assert [t.status for t in score.turns] == ["PASSED"] and score.cut_turn == 2


def test_a_turn_the_model_ends_without_a_kernel_stays_failed_under_a_budget_stop(tmp_path):
    # the reply hands in nothing: the model's FORMAT_ERROR, closed by the feedback step, then the budget stops
    outcome, evs, _ = run(tmp_path, [{"content": "thinking about it", "usage": {"total_tokens": 100}}],
                          mode="tools", turns=4, max_tokens=50)
    assert outcome.stop_reason == "token_budget"
    score = _score(tmp_path, evs)
    assert [t.status for t in score.scored_turns] == ["FORMAT_ERROR"] and score.cut_turn is None


def test_a_tool_call_budget_the_model_was_told_of_leaves_its_turn_failed(tmp_path):
    # every answer says the run's tool calls left: spending them without a submit is the model's own failure
    outcome, evs, _ = run(tmp_path, [_profile(1), _profile(1), _submit(1)], mode="tools", turns=4, max_tool_calls=2)
    assert outcome.stop_reason == "tool_budget"
    score = _score(tmp_path, evs)
    assert [t.status for t in score.scored_turns] == ["FORMAT_ERROR"] and score.cut_turn is None


def test_a_cost_budget_cut_reads_the_same_with_a_kills_error_before_its_stop(tmp_path):
    """A kill between the cut turn's turn_end and the stop (the finish step run again on resume logs only the stop)
    leaves the loop's error between them: the turn is still the budget's cut."""
    from ptxbench.agent.records.events import ErrorEvent

    replies = [{**_submit(1), "cost_usd": 0.01}, {**_profile(1), "cost_usd": 1.0}, _submit(1)]
    outcome, evs, _ = run(tmp_path, replies, mode="tools", turns=4, max_cost_usd=0.5)
    assert outcome.stop_reason == "cost_budget"
    assert _score(tmp_path, evs).cut_turn == 2
    end = next(i for i, e in enumerate(evs) if e.type == "turn_end" and e.turn == 2)
    kill = ErrorEvent(trajectory_id=evs[end].trajectory_id, turn=2, where="graph", message="KeyboardInterrupt",
                      stop_asked=True)
    score = _score(tmp_path, [*evs[:end + 1], kill, *evs[end + 1:]])
    assert [t.turn for t in score.turns] == [1] and score.cut_turn == 2 and not score.left_out
