"""What the conversation sends back of the model's own replies: every provider must take it again."""
from __future__ import annotations

import json

import pytest

from agent_helpers import GOOD_PTX, WORKLOAD, reply
from openai_server import ScriptedServer
from ptxbench.agent.loop.optimize import optimize
from ptxbench.agent.loop.state import OptimizeConfig
from ptxbench.tools.evaluate import LocalEvaluator


@pytest.fixture(scope="module")
def evaluator():
    ev = LocalEvaluator()
    yield ev
    ev.close()


@pytest.mark.parametrize("arguments", ['{"source": "cut sho', "not json", "[1, 2]", '{"x": NaN}',
                                       json.dumps(json.dumps({"source": GOOD_PTX}))])
def test_a_malformed_tool_call_is_sent_back_as_a_json_object(tmp_path, evaluator, arguments):
    """Anthropic's and Gemini's converters in litellm parse each tool call's arguments of the history as a JSON object:
    one the model wrote malformed failed every later request (a 400, the trajectory's end as the model's error; for
    Gemini a 500 retried to an outage, out of the scores), though the run had answered it as the model's mistake."""
    script = [{"content": None, "tool_calls": [{"name": "compile", "arguments": arguments}]},
              {"content": None, "tool_calls": [{"name": "submit", "arguments": {"source": GOOD_PTX}}]}]
    with ScriptedServer(script) as server:
        config = OptimizeConfig(workload=WORKLOAD, model="openai/scripted", api_base=server.base_url, no_gpu=True,
                                mode="tools", turns=1, retry_wait_s=0.01)
        outcome = optimize(config, run_dir=tmp_path / "run", evaluator=evaluator)
        second = server.requests[1]["messages"]
    assert outcome.statuses == ["COMPILED"]
    (call,) = [c for m in second if m["role"] == "assistant" for c in m.get("tool_calls") or []]
    assert isinstance(json.loads(call["function"]["arguments"], parse_constant=lambda c: 1 / 0), dict)
