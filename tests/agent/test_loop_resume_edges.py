"""Resume edges of the agent loop: a kill in a step after it recorded its work but before its checkpoint."""
from __future__ import annotations

import pytest

from agent_helpers import GOOD_PTX, WORKLOAD, BROKEN_PTX, events, of_type, reply
from openai_server import ScriptedServer
from ptxbench.agent.loop.optimize import optimize
from ptxbench.agent.loop.state import OptimizeConfig
from ptxbench.tools.evaluate import LocalEvaluator


@pytest.fixture(scope="module")
def evaluator():
    ev = LocalEvaluator()
    yield ev
    ev.close()


class Counting:
    def __init__(self, inner):
        self.inner, self.calls = inner, 0

    def evaluate(self, workload_id, source, options):
        self.calls += 1
        return self.inner.evaluate(workload_id, source, options)

    def close(self):
        """Nothing to release."""


def _killed_at(kind: str, turn: int):
    def listener(event):
        if event.type == kind and event.turn == turn:
            raise KeyboardInterrupt("killed")
    return listener


@pytest.mark.parametrize("kind", ["eval_result", "turn_end"])
def test_a_kill_after_the_start_kernel_was_recorded_does_not_evaluate_it_again(tmp_path, evaluator, kind):
    start = tmp_path / "start.ptx"
    start.write_text(BROKEN_PTX)
    run_dir = tmp_path / "run"
    with ScriptedServer([reply(GOOD_PTX)]) as server:
        config = OptimizeConfig(workload=WORKLOAD, model="openai/scripted", api_base=server.base_url, no_gpu=True,
                                turns=1, start_from=str(start))
        with pytest.raises(KeyboardInterrupt):
            optimize(config, run_dir=run_dir, evaluator=evaluator, listeners=[_killed_at(kind, 0)])
        resumed = Counting(evaluator)
        outcome = optimize(resume=run_dir, evaluator=resumed)
    assert resumed.calls == 1 and outcome.statuses == ["COMPILED"]  # turn 1 only
    evs = events(run_dir)
    assert [e.turn for e in of_type(evs, "eval_result")] == [0, 1]
    assert [e.turn for e in of_type(evs, "turn_end")] == [0, 1]


def _interrupted_at(kind: str, nth: int):
    """Ctrl-C once the nth event of `kind` is on disk: run_trajectory then logs the interruption after it."""
    seen = []

    def listener(event):
        if event.type == kind:
            seen.append(event)
            if len(seen) == nth:
                raise KeyboardInterrupt
    return listener


def test_ctrl_c_after_a_model_call_was_recorded_takes_the_recorded_reply(tmp_path):
    from agent_helpers import StubEvaluator
    from ptxbench.agent.models import load_model

    run_dir = tmp_path / "run"
    config = OptimizeConfig(workload=WORKLOAD, model="builtin/reference", no_gpu=True, turns=3, target_speedup=0)
    with pytest.raises(KeyboardInterrupt):
        optimize(config, run_dir=run_dir, evaluator=StubEvaluator([1.0]), listeners=[_interrupted_at("model_call", 2)])
    model, asked = load_model("builtin/reference", WORKLOAD), []
    query = model.query
    model.query = lambda request: asked.append(request.turn) or query(request)
    outcome = optimize(resume=run_dir, model=model, evaluator=StubEvaluator([1.1, 1.2]))
    assert outcome.stop_reason == "turn_limit" and outcome.turns == 3
    assert asked == [3]  # turn 2's reply came from the log, not a second (billed) call
    assert [e.turn for e in of_type(events(run_dir), "model_call")] == [1, 2, 3]


@pytest.mark.parametrize("kind, nth", [("turn_end", 2), ("stop", 1)])
def test_ctrl_c_after_a_turn_end_or_stop_is_not_logged_twice(tmp_path, kind, nth):
    from agent_helpers import StubEvaluator

    run_dir = tmp_path / "run"
    config = OptimizeConfig(workload=WORKLOAD, model="builtin/reference", no_gpu=True, turns=3, target_speedup=0)
    with pytest.raises(KeyboardInterrupt):
        optimize(config, run_dir=run_dir, evaluator=StubEvaluator([1.0, 1.1, 1.2]), listeners=[_interrupted_at(kind, nth)])
    optimize(resume=run_dir, evaluator=StubEvaluator([1.2]))
    evs = events(run_dir)
    assert [e.turn for e in of_type(evs, "turn_end")] == [1, 2, 3]
    assert len(of_type(evs, "stop")) == 1


class BrokenEvaluator:
    """The harness's own failure inside an evaluation: a ValueError that no argument of the model's brought on."""

    def __init__(self, inner):
        self.inner, self.calls = inner, 0

    def evaluate(self, workload_id, source, options):
        self.calls += 1
        if self.calls == 1:
            raise ValueError("the pool's bookkeeping broke")
        return self.inner.evaluate(workload_id, source, options)

    def close(self):
        """Nothing to release."""


def test_a_harness_failure_inside_a_tool_is_not_answered_as_the_models_malformed_call(tmp_path, evaluator):
    """Tools mode answered any ValueError, TypeError or KeyError out of a tool as the model's malformed call ("Error:
    ...", the turn going on), also one the evaluator raised: a harness failure scored as the model's. It is a harness
    failure, as in pipeline mode: recorded as one, and --resume runs the call again."""
    run_dir = tmp_path / "run"
    calls = [{"name": "test", "arguments": {"source": GOOD_PTX}}, {"name": "submit", "arguments": {"source": GOOD_PTX}}]
    with ScriptedServer([{"content": None, "tool_calls": calls}]) as server:
        config = OptimizeConfig(workload=WORKLOAD, model="openai/scripted", api_base=server.base_url, no_gpu=True,
                                mode="tools", turns=1, retry_wait_s=0.01)
        with pytest.raises(ValueError, match="bookkeeping"):
            optimize(config, run_dir=run_dir, evaluator=BrokenEvaluator(evaluator))
        assert not [e for e in events(run_dir) if e.type == "tool_result" and not e.ok]
        outcome = optimize(resume=run_dir, evaluator=evaluator)
        assert len(server.requests) == 1
    assert outcome.statuses == ["COMPILED"]
    evs = events(run_dir)
    assert [(e.name, e.ok) for e in of_type(evs, "tool_result")] == [("test", True), ("submit", True)]
    assert of_type(evs, "error")[0].infra


@pytest.mark.parametrize("field", ["max_tool_calls_per_turn", "retry_attempts", "max_output_tokens"])
@pytest.mark.parametrize("value", [0, -1])
def test_a_per_turn_tool_limit_or_attempt_count_below_one_is_refused(field, value):
    """A bench's `optimize` table took max_tool_calls_per_turn 0 (every reply's calls dropped: each turn a FORMAT_ERROR
    scored as the model's) or -1 (the reply's last call silently dropped, the rest answered "Ignored")."""
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        OptimizeConfig(workload=WORKLOAD, **{field: value})
