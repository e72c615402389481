"""Replies of unusual shape from a real OpenAI-compatible server through the real litellm path, evaluated by the real
LocalEvaluator in no-GPU mode: each ends in a recorded turn the model is told about, and the run goes on."""
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


def run(server: ScriptedServer, tmp_path, evaluator, **overrides):
    config = OptimizeConfig(workload=WORKLOAD, model="openai/scripted", api_base=server.base_url, no_gpu=True,
                            retry_wait_s=0.01, **overrides)
    return optimize(config, run_dir=tmp_path / "run", evaluator=evaluator)


@pytest.mark.parametrize("mode", ["pipeline", "tools"])
def test_a_reply_the_content_filter_withheld_is_named_to_the_model(tmp_path, evaluator, mode):
    """finish_reason content_filter (the provider withheld or cut the reply): the model read "The reply is empty" and
    could not tell that its text was filtered, not lost."""
    filtered = {"content": None, "finish_reason": "content_filter"}
    with ScriptedServer([filtered, reply(GOOD_PTX)]) as server:
        outcome = run(server, tmp_path, evaluator, turns=2, mode=mode)
    assert outcome.statuses == ["FORMAT_ERROR", "COMPILED"]
    assert "content filter" in server.requests[1]["messages"][-1]["content"]
    (first, _) = of_type(events(tmp_path / "run"), "model_call")
    assert first.response.get("finish_reason") == "content_filter"
