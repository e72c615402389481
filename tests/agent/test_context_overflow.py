"""A conversation that outgrows the model's context window is sent again smaller, not ended on the provider's refusal.

Tools mode with 20 KB kernels grew the prompt by about 63k tokens a call under the default `full` policy: a model with
a 128k window ended its run as the model's `error` by its third turn, and even `last` keeps the turn in progress whole.
"""
from __future__ import annotations

import json
import threading

import pytest

from agent_helpers import GOOD_PTX, WORKLOAD, events, of_type
from openai_server import ScriptedServer
from ptxbench.agent.loop.context import STUBBED, context_views, with_stubs
from ptxbench.agent.loop.optimize import optimize
from ptxbench.agent.loop.state import OptimizeConfig
from ptxbench.tools.evaluate import LocalEvaluator

PAD = 20_000  # characters of comment in each kernel: the review's 20 KB kernels
OVERFLOW = {"status": 400, "message": "This model's maximum context length is 128000 tokens. However, your messages "
            "resulted in 190000 tokens. Please reduce the length of the messages. (context_length_exceeded)"}


@pytest.fixture(scope="module")
def evaluator():
    ev = LocalEvaluator()
    yield ev
    ev.close()


def kernel(tag: str) -> str:
    return GOOD_PTX + f"// kernel {tag}\n// " + "x" * PAD + "\n"


def tools_replies(turns: int, compiles: int) -> list[dict]:
    """Each turn: `compiles` compile calls of fresh 20 KB kernels, one a reply, then a submit of the last one."""
    out = []
    for t in range(1, turns + 1):
        for c in range(1, compiles + 1):
            out.append({"content": None, "tool_calls": [{"name": "compile", "arguments": {"source": kernel(f"{t}.{c}")}}]})
        out.append({"content": None, "tool_calls": [{"name": "submit", "arguments": {"source": kernel(f"{t}.{compiles}")}}]})
    return out


class Window:
    """A provider whose window takes `limit` characters of messages: a larger request gets OpenAI's 400
    context_length_exceeded; the others take the next scripted reply. `accepted` keeps the requests it answered."""

    def __init__(self, replies: list[dict], limit: int):
        self.replies, self.limit, self.accepted, self.refused = list(replies), limit, [], 0
        self.lock = threading.Lock()

    def __call__(self, body: dict) -> dict:
        with self.lock:
            if len(json.dumps(body["messages"])) > self.limit:
                self.refused += 1
                return OVERFLOW
            self.accepted.append(body)
            return self.replies.pop(0) if self.replies else {"content": "done"}


def run(server, tmp_path, evaluator, **overrides):
    config = OptimizeConfig(workload=WORKLOAD, model="openai/scripted", api_base=server.base_url, no_gpu=True,
                            retry_wait_s=0.01, mode="tools", **overrides)
    return optimize(config, run_dir=tmp_path / "run", evaluator=evaluator)


def test_a_run_past_its_window_trims_and_plays_every_turn(tmp_path, evaluator):
    window = Window(tools_replies(turns=3, compiles=3), limit=75_000)
    with ScriptedServer(default=window) as server:
        outcome = run(server, tmp_path, evaluator, turns=3)
    assert outcome.stop_reason == "turn_limit" and outcome.statuses == ["COMPILED"] * 3
    assert window.refused >= 1  # the window was outgrown, and the run went on
    evs = events(tmp_path / "run")
    trims = of_type(evs, "context_trimmed")
    assert trims and all(t.reason == "window_exceeded" and t.policy == "full" for t in trims)
    assert "context_length_exceeded" in trims[0].detail and trims[0].chars_after < trims[0].chars_before
    assert STUBBED in [t.view for t in trims]  # the turn in progress itself outgrew it: its older exchanges stubbed
    # the record is the conversation the model saw: each model_call holds the very messages of a request answered
    calls = of_type(evs, "model_call")
    assert len(calls) == len(window.accepted) == 12
    for call, body in zip(calls, window.accepted):
        assert [(m["role"], m.get("content") or "") for m in call.messages] == \
               [(m["role"], m.get("content") or "") for m in body["messages"]]
    # every request answered kept the latest kernel whole, and each stub names what it dropped
    for body in window.accepted[1:]:
        sources = [json.loads(c["function"]["arguments"]).get("source") for m in body["messages"]
                   for c in m.get("tool_calls") or []]
        assert any(isinstance(s, str) and len(s) > PAD for s in sources)
    stubs = [m["content"] for b in window.accepted for m in b["messages"]
             if m["role"] == "tool" and m["content"].startswith("[dropped to fit")]
    assert stubs and all(" answer of " in s and "which began: ## Turn" in s for s in stubs)


def test_a_run_killed_after_a_trimmed_call_takes_its_recorded_reply_on_resume(tmp_path, evaluator):
    """The reply to a trimmed request is found on resume among the smaller views: a paid model is not asked again."""
    seen = []

    def kill_after_the_first_trimmed_call(event):
        seen.append(event.type)
        if event.type == "model_call" and "context_trimmed" in seen:
            raise KeyboardInterrupt("killed")

    window = Window(tools_replies(turns=2, compiles=3), limit=75_000)
    with ScriptedServer(default=window) as server:
        config = OptimizeConfig(workload=WORKLOAD, model="openai/scripted", api_base=server.base_url, no_gpu=True,
                                retry_wait_s=0.01, mode="tools", turns=2)
        with pytest.raises(KeyboardInterrupt):
            optimize(config, run_dir=tmp_path / "run", evaluator=evaluator, listeners=[kill_after_the_first_trimmed_call])
        outcome = optimize(resume=tmp_path / "run", evaluator=evaluator)
    assert outcome.stop_reason == "turn_limit" and outcome.statuses == ["COMPILED"] * 2
    calls = of_type(events(tmp_path / "run"), "model_call")
    assert len(calls) == len(window.accepted) == 8
    sent = [json.dumps(c.messages) for c in calls]
    assert len(set(sent)) == len(sent)  # no request asked twice
    assert window.refused == 1  # nor the larger view again after the resume


def test_the_run_ends_as_today_when_even_the_smallest_view_does_not_fit(tmp_path, evaluator):
    replies = tools_replies(turns=1, compiles=3)
    window = Window(replies, limit=10**9)
    calls = {"n": 0}

    def provider(body):  # the third request and every one after it: no view fits
        calls["n"] += 1
        return OVERFLOW if calls["n"] >= 3 else window(body)

    with ScriptedServer(default=provider) as server:
        outcome = run(server, tmp_path, evaluator, turns=1)
        sizes = [len(json.dumps(b["messages"])) for b in server.requests[2:]]
    assert outcome.stop_reason == "error"
    assert sizes == sorted(sizes, reverse=True) and len(sizes) >= 2  # sent again smaller before it gave up
    (stop,) = of_type(events(tmp_path / "run"), "stop")
    assert "context window even as small as the loop trims it" in stop.detail and "maximum context length" in stop.detail


def test_a_model_whose_window_litellm_knows_is_trimmed_before_sending(tmp_path, evaluator, monkeypatch):
    import litellm

    monkeypatch.setitem(litellm.model_cost, "scripted", {"max_input_tokens": 20_000})  # the table knows the model
    monkeypatch.setattr(litellm, "get_model_info", lambda model, **kw: {"max_input_tokens": 20_000})
    window = Window(tools_replies(turns=2, compiles=3), limit=10**9)  # the provider would take anything
    with ScriptedServer(default=window) as server:
        outcome = run(server, tmp_path, evaluator, turns=2)
    assert outcome.statuses == ["COMPILED"] * 2 and window.refused == 0
    assert max(len(json.dumps(b["messages"])) for b in window.accepted) < 20_000 * 3.5  # no request past the window
    trims = of_type(events(tmp_path / "run"), "context_trimmed")
    assert trims and {t.reason for t in trims} == {"window_estimate"}


def test_a_window_is_read_from_litellms_table_only():
    from ptxbench.agent.models.litellm_model import LiteLLMModel

    assert LiteLLMModel("openai/gpt-4o").input_limit == 128_000
    assert LiteLLMModel("openai/gpt-4o", max_tokens=8_000).input_limit == 120_000  # the reply's tokens share it
    assert LiteLLMModel("openai/a-local-server-model", api_base="http://127.0.0.1:1/v1").fits([]) is None
    assert LiteLLMModel("ollama/llama3").input_limit is None  # litellm would ask an Ollama server for it


def _exchange(call_id: str, source: str, answer: str) -> list[dict]:
    args = json.dumps({"source": source})
    return [{"role": "assistant", "content": "", "tool_calls": [
                {"id": call_id, "type": "function", "function": {"name": "compile", "arguments": args}}]},
            {"role": "tool", "tool_call_id": call_id, "content": answer}]


def test_stubs_keep_the_latest_kernel_and_its_feedback_and_every_call_paired():
    messages = [*_exchange("a", "old kernel " * 100, "## compile: COMPILED\nold feedback" + " ..." * 100),
                *_exchange("b", "new kernel " * 100, "## compile: COMPILE_ERROR\nnew feedback" + " ..." * 100)]
    out = with_stubs(messages)
    assert out[2:] == messages[2:]  # the latest kernel and its answer, whole
    assert json.loads(out[0]["tool_calls"][0]["function"]["arguments"])["left_out"].startswith("the source of this compile")
    assert out[1]["content"].startswith("[dropped to fit") and "## compile: COMPILED" in out[1]["content"]
    assert [c["id"] for m in out for c in m.get("tool_calls") or []] == ["a", "b"]
    assert [m.get("tool_call_id") for m in out if m["role"] == "tool"] == ["a", "b"]
    assert messages[0]["tool_calls"][0]["function"]["arguments"].startswith('{"source"')  # the state is not changed


def test_the_views_run_from_the_policy_down_to_stubs():
    done = [{"turn": t, "messages": _exchange(f"c{t}", f"kernel {t} " * 50, f"answer {t}"),
             "outcome": {"turn": t, "status": "COMPILED", "message": f"turn {t}"}} for t in (1, 2)]
    state = {"system": "sys", "task": "task", "done_turns": done, "current": _exchange("c3a", "k3a " * 50, "x")
             + _exchange("c3b", "k3b " * 50, "y")}
    assert [name for name, _ in context_views(state, "full")] == ["full", "summary", "last", STUBBED]
    assert [name for name, _ in context_views(state, "last")] == ["last", STUBBED]
    sizes = [len(json.dumps(m)) for _, m in context_views(state, "full")]
    assert sizes == sorted(sizes, reverse=True)
