"""The cost budget against what a provider reports (a real OpenAI-compatible server through the real litellm path,
the real LocalEvaluator in no-GPU mode): a budget the harness cannot count must not be a budget it silently ignores."""
from __future__ import annotations

import pytest

from agent_helpers import GOOD_PTX, WORKLOAD, events, of_type, reply
from openai_server import ScriptedServer
from ptxbench.agent.loop.optimize import optimize
from ptxbench.agent.loop.state import OptimizeConfig
from ptxbench.tools.evaluate import LocalEvaluator


@pytest.fixture(scope="module")
def evaluator():
    ev = LocalEvaluator()
    yield ev
    ev.close()


def run(server: ScriptedServer, tmp_path, evaluator, model: str, **overrides):
    config = OptimizeConfig(workload=WORKLOAD, model=model, api_base=server.base_url, no_gpu=True,
                            retry_wait_s=0.01, **overrides)
    return optimize(config, run_dir=tmp_path / "run", evaluator=evaluator)


def test_a_cost_budget_for_a_model_with_no_known_price_stops_and_says_so(tmp_path, evaluator):
    """litellm has no price for the model (a local server, a model newer than its bundled table): every call cost
    None, counted as $0, so --max-cost never fired and the run spent without a limit, with no word said. The first
    unpriced reply's turn is finished; then the run stops on the cost budget, saying it cannot be counted."""
    with ScriptedServer([], default=reply(GOOD_PTX)) as server:
        outcome = run(server, tmp_path, evaluator, "openai/no-such-priced-model", turns=4, max_cost_usd=1e-6)
    assert len(server.requests) == 1 and outcome.statuses == ["COMPILED"]
    assert outcome.stop_reason == "cost_budget" and "price" in outcome.stop_detail
    (stop,) = of_type(events(tmp_path / "run"), "stop")
    assert stop.reason == "cost_budget" and "--max-tokens" in stop.detail


def test_an_unpriced_model_without_a_cost_budget_runs_on(tmp_path, evaluator):
    with ScriptedServer([], default=reply(GOOD_PTX)) as server:
        outcome = run(server, tmp_path, evaluator, "openai/no-such-priced-model", turns=2)
    assert outcome.stop_reason == "turn_limit" and len(server.requests) == 2


def test_a_priced_model_whose_server_reports_no_usage_is_charged_for_the_estimate(tmp_path, evaluator):
    """No `usage` in the answer: the tokens were estimated from the text, but the cost was priced from litellm's zero
    counts, $0, so the cost budget of a priced model never fired either. The estimate is priced now."""
    bare = {"raw": {"id": "x", "object": "chat.completion", "created": 0, "model": "gpt-4o",
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": reply(GOOD_PTX)["content"]},
                                 "finish_reason": "stop"}]}}
    with ScriptedServer([], default=bare) as server:
        outcome = run(server, tmp_path, evaluator, "openai/gpt-4o", turns=3, max_cost_usd=0.01)
    (call,) = of_type(events(tmp_path / "run"), "model_call")
    assert call.usage["estimated"] == 1 and call.cost_usd and call.cost_usd > 0.01
    assert outcome.stop_reason == "cost_budget" and len(server.requests) == 1


def test_a_hung_provider_is_cut_at_the_wall_time_budget(tmp_path, evaluator):
    """A model call ignored --max-wall: the rules are checked between calls, so a provider that never answers held a
    2 s budget for the call's 600 s timeout, six times over (an hour). The budget left bounds the call now, and the
    run stops on it, said as the time budget, not an outage."""
    import time

    with ScriptedServer([], default={"hang": True}) as server:
        start = time.monotonic()
        outcome = run(server, tmp_path, evaluator, "openai/x", turns=2, max_wall_s=2.0)
        took = time.monotonic() - start
    assert took < 60 and outcome.stop_reason == "time_budget" and "wall-time budget" in outcome.stop_detail
    evs = events(tmp_path / "run")
    assert not [e for e in of_type(evs, "error") if e.infra] and of_type(evs, "stop")[0].reason == "time_budget"


def test_back_offs_end_at_the_budget_left():
    """Retries of a failing provider stop when the wall-time budget left is spent, however long the back-off."""
    import time

    from ptxbench.agent.models.base import ModelRequest, OutOfTime
    from ptxbench.agent.models.litellm_model import LiteLLMModel

    with ScriptedServer([], default={"status": 500}) as server:
        model = LiteLLMModel("openai/x", api_base=server.base_url, retry_wait_s=30.0)
        start = time.monotonic()
        with pytest.raises(OutOfTime, match="wall-time budget"):
            model.query(ModelRequest(messages=[{"role": "user", "content": "hi"}], time_left_s=1.5))
        assert time.monotonic() - start < 10 and len(server.requests) >= 1


def test_an_estimated_prompt_counts_the_tool_calls_it_sends_back():
    """Tools mode sends each kernel back as a tool call's arguments (the message's content is empty): the estimate of
    a server that reports no usage counted only contents, so a tools conversation read as a fraction of its size."""
    from ptxbench.agent.models.base import ModelReply
    from ptxbench.agent.models.litellm_model import estimated_usage

    call = {"id": "c1", "type": "function", "function": {"name": "compile", "arguments": "x" * 40_000}}
    messages = [{"role": "user", "content": "task"}, {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "c1", "content": "ok"}]
    assert estimated_usage(messages, ModelReply())["prompt_tokens"] >= 10_000


def test_a_request_a_proxy_finds_too_large_says_what_helps(tmp_path, evaluator):
    """A 413 from a proxy in front of the server (nginx takes 1 MB by default; a long tools conversation outgrows it)
    carries no "request too large" text: the stop gave the proxy's page alone, not that a shorter context helps."""
    page = {"status": 413, "message": "<html><center><h1>413 Request Entity Too Large</h1></center></html>"}
    with ScriptedServer([reply(GOOD_PTX)], default=page) as server:
        outcome = run(server, tmp_path, evaluator, "openai/x", turns=3)
    assert outcome.stop_reason == "error" and outcome.statuses == ["COMPILED"] and len(server.requests) == 2
    assert "--context" in outcome.stop_detail
