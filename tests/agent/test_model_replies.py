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


def test_a_structured_refusal_is_recorded_and_read_back_to_the_model(tmp_path, evaluator):
    """OpenAI's structured refusal comes with content null and its text in `refusal`: the record held an empty reply
    and the model read "the reply is empty". The refusal is the reply's text: recorded, and the turn's feedback
    follows it as any reply with no kernel file."""
    refused = {"content": None, "refusal": "I can't help with writing that kernel."}
    with ScriptedServer([refused, reply(GOOD_PTX)]) as server:
        outcome = run(server, tmp_path, evaluator, turns=2)
    assert outcome.statuses == ["FORMAT_ERROR", "COMPILED"]
    (first, _) = of_type(events(tmp_path / "run"), "model_call")
    assert first.response["content"] == "I can't help with writing that kernel."
    history = server.requests[1]["messages"]
    assert any(m["role"] == "assistant" and m.get("content") == "I can't help with writing that kernel." for m in history)
    assert "empty" not in history[-1]["content"].lower()


def test_a_reply_built_with_no_text_is_an_empty_reply_not_a_crash():
    """ModelReply says it is made safe whichever adapter built it: content=None (a custom adapter passing the server's
    null on) raised a validation error, a harness crash on the model's turn."""
    from ptxbench.agent.models.base import ModelReply

    assert ModelReply(content=None).content == "" and ModelReply.model_validate({"content": None}).content == ""


def _deepseek(body: dict) -> dict:
    """DeepSeek in thinking mode (V4's default): every assistant message that made tool calls must come back with its
    reasoning_content, or the request is refused with a 400."""
    for m in body["messages"]:
        if m["role"] == "assistant" and m.get("tool_calls") and not m.get("reasoning_content"):
            return {"status": 400, "message": "The reasoning_content in the thinking mode must be passed back to the API."}
    calls = sum(1 for m in body["messages"] if m["role"] == "assistant")
    tool = "compile" if calls < 2 else "submit"
    return {"content": None, "reasoning_content": f"thinking {calls}",
            "tool_calls": [{"name": tool, "arguments": {"source": GOOD_PTX}}]}


def test_a_thinking_models_reasoning_goes_back_with_its_tool_calls(tmp_path, evaluator, monkeypatch):
    """DeepSeek's thinking mode refuses a conversation whose tool-call messages lack their reasoning_content; the
    history kept only content and tool calls, so every tools-mode trajectory of it ended at its second call, as the
    model's error."""
    monkeypatch.setenv("DEEPSEEK_API_KEY", "sk-test-deepseek-000000")
    with ScriptedServer([], default=_deepseek) as server:
        config = OptimizeConfig(workload=WORKLOAD, model="deepseek/deepseek-v4-pro", api_base=server.base_url,
                                no_gpu=True, retry_wait_s=0.01, mode="tools", turns=2)
        outcome = optimize(config, run_dir=tmp_path / "run", evaluator=evaluator)
    assert outcome.stop_reason == "turn_limit" and outcome.statuses == ["COMPILED", "COMPILED"]
    assert not of_type(events(tmp_path / "run"), "error")


def test_a_tool_calls_thought_signature_goes_back_to_gemini():
    """Gemini 3 signs its function calls (a thought signature, in the call's provider_specific_fields and appended to
    its id); the signature must come back with the call. The adapter kept only id, name and arguments, and the id
    with the signature appended is past the id limit, so it was replaced: litellm sent a placeholder signature
    instead, and the model lost its reasoning between tool calls."""
    from ptxbench.agent.models.litellm_model import _litellm, _reply  # first: it keeps litellm off the network

    from litellm.litellm_core_utils.prompt_templates.factory import convert_to_gemini_tool_call_invoke
    from litellm.types.utils import ChatCompletionMessageToolCall, Choices, Function, Message, ModelResponse

    signature = "c2lnbmF0dXJl" * 60
    call = ChatCompletionMessageToolCall(id=f"call_1__thought__{signature}", type="function",
                                         function=Function(name="compile", arguments='{"source": "x"}'),
                                         provider_specific_fields={"thought_signature": signature})
    response = ModelResponse(choices=[Choices(index=0, finish_reason="tool_calls",
                                              message=Message(role="assistant", content=None, tool_calls=[call]))])
    message = _reply(_litellm(), response, 0.1, 1).assistant_message()
    (part,) = convert_to_gemini_tool_call_invoke(message, model="gemini-3-pro-preview")
    assert part.get("thoughtSignature") == signature


def test_provider_fields_a_server_invents_are_not_kept(tmp_path, evaluator):
    """Only the signature is taken from a call's provider_specific_fields (any server can fill them), and as text the
    record can write: the turn is the model's and the run goes on."""
    call = {"id": "c1", "type": "function", "function": {"name": "submit", "arguments": __import__("json").dumps(
        {"source": GOOD_PTX})}, "provider_specific_fields": {"thought_signature": "sig \ud800", "deep": [[[[{}]]]]}}
    hostile = {"raw": {"id": "x", "object": "chat.completion", "created": 0, "model": "scripted",
                       "choices": [{"index": 0, "finish_reason": "tool_calls",
                                    "message": {"role": "assistant", "content": None, "tool_calls": [call]}}],
                       "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20}}}
    with ScriptedServer([hostile]) as server:
        outcome = run(server, tmp_path, evaluator, turns=1, mode="tools")
    assert outcome.statuses == ["COMPILED"] and outcome.stop_reason == "turn_limit"
    (recorded,) = of_type(events(tmp_path / "run"), "model_call")[0].response["tool_calls"]
    assert recorded["provider_specific_fields"] == {"thought_signature": "sig ?"}


def test_a_huge_tool_name_is_cut_not_sent_back_with_every_call(tmp_path, evaluator):
    """A degenerate model (a local server's tool parser reads the name from its text) named a tool with a megabyte:
    the name went back in the history with every later request, and in the error answering it, and into every
    model_call event, as a huge argument once did. No tool name is longer than 64 characters (OpenAI's limit)."""
    import json

    name = "compile" + "x" * 1_000_000
    huge = {"content": None, "tool_calls": [{"name": name, "arguments": {"source": GOOD_PTX}}]}
    with ScriptedServer([huge], default={"content": None, "tool_calls": [{"name": "submit",
                                                                          "arguments": {"source": GOOD_PTX}}]}) as server:
        outcome = run(server, tmp_path, evaluator, turns=1, mode="tools")
    assert outcome.statuses == ["COMPILED"]
    assert len(json.dumps(server.requests[1])) < 200_000
    (answer,) = [e for e in of_type(events(tmp_path / "run"), "tool_result") if not e.ok]
    assert "unknown tool" in answer.content and len(answer.content) < 1000


def test_tool_arguments_encoded_twice_are_read():
    """Some servers' tool parsers send the arguments object as a JSON string inside the JSON string: every call was
    answered "must be a JSON object", though the model wrote the object right, and no kernel of it was evaluated."""
    import json

    from ptxbench.agent.loop.toolset import parse_arguments

    assert parse_arguments(json.dumps(json.dumps({"source": "x"}))) == {"source": "x"}
    with pytest.raises(ValueError, match="JSON object"):
        parse_arguments(json.dumps("not an object"))
    with pytest.raises(ValueError, match="JSON object"):
        parse_arguments(json.dumps(json.dumps(json.dumps({"source": "x"}))))  # once unwrapped, no more
