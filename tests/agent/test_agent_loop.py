"""The whole agent graph against a real OpenAI-compatible HTTP server through the real litellm path,
evaluated by the real LocalEvaluator in no-GPU mode (real ptxas)."""
from __future__ import annotations

import json

import pytest

from agent_helpers import BROKEN_PTX, GOOD_PTX, WORKLOAD, events, of_type, reply, request_text
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


def test_syntax_error_then_repair(tmp_path, evaluator):
    script = [reply(BROKEN_PTX, "First try."), {**reply(GOOD_PTX, "Fixed the register."), "reasoning_content": "typo"}]
    with ScriptedServer(script) as server:
        outcome = run(server, tmp_path, evaluator, turns=2)
    assert outcome.statuses == ["COMPILE_ERROR", "COMPILED"]
    assert outcome.stop_reason == "turn_limit"
    evs = events(tmp_path / "run")
    first_eval = of_type(evs, "eval_result")[0]
    assert "%rs9" in first_eval.feedback and "no GPU ran" in first_eval.feedback
    # The second prompt carries the first one's ptxas error, exactly as recorded.
    second = request_text(server.requests[1])
    assert first_eval.feedback in second and "Unknown symbol" in second
    # The fix compiled but never ran: the model is told so, and never that it passed.
    fixed = of_type(evs, "eval_result")[1].feedback
    assert fixed.startswith("## Turn 2: COMPILED (not run on a GPU") and "PASSED" not in fixed
    calls = of_type(evs, "model_call")
    assert len(calls) == 2 and calls[1].messages == server.requests[1]["messages"]
    assert calls[1].response["reasoning_content"] == "typo"
    assert calls[0].usage["total_tokens"] > 0 and calls[0].latency_s > 0
    assert [e.status for e in of_type(evs, "turn_end")] == ["COMPILE_ERROR", "COMPILED"]
    assert (tmp_path / "run" / "trajectories" / outcome.trajectory_id / "kernels" / "turn_01.ptx").read_text() == BROKEN_PTX
    assert of_type(evs, "stop")[0].reason == "turn_limit"
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["config"]["model"] == "openai/scripted" and manifest["packages"]["litellm"]


def test_no_code_block_and_empty_reply(tmp_path, evaluator):
    script = [{"content": "I would tile the matrix with wgmma."}, {"content": ""}, reply(GOOD_PTX)]
    with ScriptedServer(script) as server:
        outcome = run(server, tmp_path, evaluator, turns=3, context="last")
    assert outcome.statuses == ["FORMAT_ERROR", "FORMAT_ERROR", "COMPILED"]
    second = request_text(server.requests[1])
    assert "no code block" in second.lower() and "## Turn 1: FORMAT_ERROR" in second  # one word: table and feedback
    third = request_text(server.requests[2])
    assert "empty" in third and "no GPU ran" in third
    # context "last": the first turn's reply is gone from the third request
    assert "tile the matrix" not in third
    assert len(of_type(events(tmp_path / "run"), "eval_result")) == 1


def test_error_burst_is_retried(tmp_path, evaluator):
    script = [{"status": 429}, {"status": 500}, {"status": 429}, reply(GOOD_PTX)]
    with ScriptedServer(script) as server:
        outcome = run(server, tmp_path, evaluator, turns=1)
    assert len(server.requests) == 4
    assert outcome.statuses == ["COMPILED"]
    (call,) = of_type(events(tmp_path / "run"), "model_call")
    assert call.attempts == 4


def test_model_error_stops_and_key_never_logged(tmp_path, evaluator, monkeypatch):
    secret = "sk-test-0123456789abcdefSECRET"
    monkeypatch.setenv("PTXBENCH_TEST_API_KEY", secret)
    script = [{"status": 401, "message": f"invalid api key {secret}"}]
    with ScriptedServer(script) as server:
        outcome = run(server, tmp_path, evaluator, turns=2, api_key_env="PTXBENCH_TEST_API_KEY")
    assert outcome.stop_reason == "infra_error" and len(server.requests) == 1  # a 401 is not retried
    for path in (tmp_path / "run").rglob("*"):
        if path.is_file() and path.suffix in (".jsonl", ".json"):
            assert secret not in path.read_text(), path
    (error,) = of_type(events(tmp_path / "run"), "error")
    assert "***" in error.message


def _tool(name: str, source: str) -> dict:
    return {"name": name, "arguments": {"source": source}}


def test_tools_mode_compile_then_submit(tmp_path, evaluator):
    script = [
        {"content": "Checking it first.", "tool_calls": [_tool("compile", BROKEN_PTX)]},
        {"content": None, "tool_calls": [_tool("sass", GOOD_PTX), _tool("submit", GOOD_PTX)]},
    ]
    with ScriptedServer(script) as server:
        outcome = run(server, tmp_path, evaluator, mode="tools", turns=1)
    assert outcome.statuses == ["COMPILED"] and len(server.requests) == 2
    sent_tools = {t["function"]["name"] for t in server.requests[0]["tools"]}
    assert sent_tools == {"compile", "test", "benchmark", "profile", "sanitize", "sass", "submit"}
    # the compile tool's ptxas error went back as the tool result
    tool_msgs = [m for m in server.requests[1]["messages"] if m["role"] == "tool"]
    assert len(tool_msgs) == 1 and "Unknown symbol" in tool_msgs[0]["content"]
    evs = events(tmp_path / "run")
    assert [e.submission for e in of_type(evs, "eval_result")] == [False, False, True]
    assert [e.name for e in of_type(evs, "tool_call")] == ["compile", "sass", "submit"]
    assert "SASS opcodes" in of_type(evs, "tool_result")[1].content


def test_tools_budget_ends_a_model_that_never_stops(tmp_path, evaluator):
    forever = {"content": None, "tool_calls": [_tool("compile", GOOD_PTX)]}
    with ScriptedServer([], default=forever) as server:
        outcome = run(server, tmp_path, evaluator, mode="tools", turns=3, max_tool_calls=5, max_tool_calls_per_turn=50)
    assert outcome.stop_reason == "tool_budget"
    assert len(server.requests) == 5
    evs = events(tmp_path / "run")
    assert len(of_type(evs, "tool_result")) == 5
    assert all("no GPU ran" in e.content for e in of_type(evs, "tool_result"))
    assert [e.status for e in of_type(evs, "turn_end")] == ["FORMAT_ERROR"]


def test_the_tool_budget_holds_inside_one_reply(tmp_path, evaluator):
    """The trajectory's budget was checked only between replies: a reply of 12 calls ran all 12 against a budget of 5."""
    class Counting:
        def __init__(self):
            self.n = 0

        def evaluate(self, workload_id, source, options):
            self.n += 1
            return evaluator.evaluate(workload_id, source, options)

        def close(self):
            """The shared evaluator is the fixture's to close."""

    burst = {"content": None, "tool_calls": [_tool("compile", GOOD_PTX)] * 3 + [_tool("submit", GOOD_PTX)]}
    counting = Counting()
    with ScriptedServer([{"content": None, "tool_calls": [_tool("compile", GOOD_PTX)] * 3}], default=burst) as server:
        outcome = run(server, tmp_path, counting, mode="tools", turns=3, max_tool_calls=5, max_tool_calls_per_turn=12)
    assert outcome.stop_reason == "tool_budget" and counting.n == 5 and len(server.requests) == 2
    evs = events(tmp_path / "run")
    results = of_type(evs, "tool_result")
    assert [r.ok for r in results] == [True] * 5 + [False] * 2
    assert "trajectory's tool calls are used up" in results[-1].content
    # the submit past the budget was not evaluated
    assert [e.status for e in of_type(evs, "turn_end")] == ["FORMAT_ERROR"] and not any(e.submission for e in of_type(evs, "eval_result"))


def test_cost_is_recorded_and_budgeted(tmp_path, evaluator):
    with ScriptedServer([reply(GOOD_PTX)], default=reply(GOOD_PTX)) as server:
        config = OptimizeConfig(workload=WORKLOAD, model="openai/gpt-4o", api_base=server.base_url, no_gpu=True,
                                turns=5, max_cost_usd=1e-6)
        outcome = optimize(config, run_dir=tmp_path / "run", evaluator=evaluator)
    assert outcome.stop_reason == "cost_budget" and outcome.turns == 1 and len(server.requests) == 1
    (call,) = of_type(events(tmp_path / "run"), "model_call")
    assert call.cost_usd and call.cost_usd > 0 and outcome.cost_usd == pytest.approx(call.cost_usd)


def test_a_tools_evaluations_queue_for_a_gpu_as_their_turns_own(tmp_path, evaluator):
    """The tools' mid-turn evaluations carry the turn's turns_left (the GPU queue's priority, tools/gpu/priority.py),
    as the scored submit does: the trajectory waits on them too."""
    class Recording:
        def __init__(self, inner):
            self.inner, self.left = inner, []

        def evaluate(self, workload_id, source, options):
            self.left.append(options.turns_left)
            return self.inner.evaluate(workload_id, source, options)

        def close(self):
            """The shared evaluator is the fixture's to close."""

    script = [{"content": "Checking it first.", "tool_calls": [_tool("compile", GOOD_PTX)]},
              {"content": None, "tool_calls": [_tool("submit", GOOD_PTX)]},
              {"content": None, "tool_calls": [_tool("compile", GOOD_PTX), _tool("submit", GOOD_PTX)]}]
    recording = Recording(evaluator)
    with ScriptedServer(script) as server:
        run(server, tmp_path, recording, mode="tools", turns=2)
    assert recording.left == [1, 1, 0, 0]


# ---- a hostile server's answers: recorded as the model's turns, never the harness's failure ----
def _answer(message: dict, usage: dict | None = None, choices: bool = True) -> dict:
    return {"raw": {"id": "x", "object": "chat.completion", "created": 0, "model": "scripted",
                    "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": "stop"}]
                    if choices else [],
                    "usage": usage or {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20}}}


def _no_infra(evs) -> None:
    assert not [e for e in of_type(evs, "error") if e.infra], [e.message for e in of_type(evs, "error")]


def test_text_utf8_cannot_encode_is_recorded_repaired_and_the_turn_is_the_models(tmp_path, evaluator):
    """A lone surrogate ("\\ud800" is valid JSON) in a reply, its reasoning or a tool call's arguments once failed the
    trajectory's first write: the turn was lost as an infra failure and the trajectory left out of the score."""
    script = [{**reply(GOOD_PTX, "note \ud800"), "reasoning_content": "think \udfff"}]
    with ScriptedServer(script) as server:
        outcome = run(server, tmp_path / "p", evaluator, turns=1)
    assert outcome.statuses == ["COMPILED"] and outcome.stop_reason == "turn_limit"
    evs = events(tmp_path / "p" / "run")
    _no_infra(evs)
    (call,) = of_type(evs, "model_call")
    assert "note ?" in call.response["content"] and call.response["reasoning_content"] == "think ?"
    tools = [{"content": None, "tool_calls": [{"name": "compile", "arguments": '{"source": "\\ud800"}'},
                                              {"name": "sub\ud800mit", "arguments": {"source": GOOD_PTX}}]}]
    with ScriptedServer(tools) as server:
        outcome = run(server, tmp_path / "t", evaluator, mode="tools", turns=1)
    evs = events(tmp_path / "t" / "run")
    _no_infra(evs)
    assert [e.name for e in of_type(evs, "tool_call")] == ["compile", "sub?mit"]
    assert outcome.statuses == ["FORMAT_ERROR"]


def test_token_counts_out_of_range_neither_undo_the_budget_nor_break_the_record(tmp_path, evaluator):
    """A negative count would lower the totals the budgets compare; one past 64 bits failed the checkpoint."""
    negative = _answer({"content": reply(GOOD_PTX)["content"]},
                       {"prompt_tokens": -10**6, "completion_tokens": -10**6, "total_tokens": -2 * 10**6})
    huge = _answer({"content": reply(GOOD_PTX)["content"]},
                   {"prompt_tokens": 2**70, "completion_tokens": 1, "total_tokens": 2**70})
    with ScriptedServer([negative, huge], default=negative) as server:
        outcome = run(server, tmp_path, evaluator, turns=4, max_tokens=10**9)
    evs = events(tmp_path / "run")
    _no_infra(evs)
    calls = of_type(evs, "model_call")
    # negative counts are no counts: estimated from the text, as for a server that reports none
    assert calls[0].usage["estimated"] == 1 and calls[0].usage["total_tokens"] > 0
    assert calls[1].usage["total_tokens"] == 2**53
    assert outcome.stop_reason == "token_budget" and len(server.requests) == 2  # the huge count spent the budget
    assert all(e.tokens >= 0 for e in of_type(evs, "turn_end"))


def test_an_answer_with_no_choice_is_an_empty_reply(tmp_path, evaluator):
    """A proxy's content filter answers `"choices": []`: a FORMAT_ERROR turn, and the run goes on."""
    with ScriptedServer([_answer({}, choices=False), reply(GOOD_PTX)]) as server:
        outcome = run(server, tmp_path, evaluator, turns=2)
    assert outcome.statuses == ["FORMAT_ERROR", "COMPILED"]
    _no_infra(events(tmp_path / "run"))


def test_a_reply_cut_at_the_output_token_limit_is_recorded_and_the_model_told(tmp_path, evaluator):
    """finish_reason "length": the server cut the reply (max_tokens reached; a reasoning model can spend all of it on
    reasoning and send no text). The trajectory did not record it, so a cut reply could not be told from a malformed
    one, and the model read "empty reply" or a compile error with no word of why."""
    cut_code = {"content": f"Here.\n\n```ptx\n{GOOD_PTX[:300]}", "finish_reason": "length"}
    all_reasoning = {"content": "", "reasoning_content": "thinking " * 50, "finish_reason": "length"}
    with ScriptedServer([cut_code, all_reasoning, reply(GOOD_PTX)]) as server:
        outcome = run(server, tmp_path, evaluator, turns=3)
    assert outcome.statuses[1:] == ["FORMAT_ERROR", "COMPILED"]
    calls = of_type(events(tmp_path / "run"), "model_call")
    assert [c.response.get("finish_reason") for c in calls] == ["length", "length", "stop"]
    for later in server.requests[1:]:  # each cut turn's feedback says why
        assert "output token limit" in later["messages"][-1]["content"]


def test_tool_arguments_nested_past_the_limit_are_the_models_error(tmp_path, evaluator):
    """300 levels parse (json stops near 1000) but fail the record's writers: refused as the model's mistake."""
    deep = '{"source": ' + "[" * 300 + "]" * 300 + "}"
    script = [{"content": None, "tool_calls": [{"name": "compile", "arguments": deep}]},
              {"content": None, "tool_calls": [_tool("submit", GOOD_PTX)]}]
    with ScriptedServer(script) as server:
        outcome = run(server, tmp_path, evaluator, mode="tools", turns=1)
    evs = events(tmp_path / "run")
    _no_infra(evs)
    assert "nested too deeply" in of_type(evs, "tool_result")[0].content and outcome.statuses == ["COMPILED"]


def test_a_reply_of_thousands_of_tool_calls_is_cut_to_a_turns_limit(tmp_path, evaluator):
    """Each call past the turn's limit was answered "Ignored" with two events of its own (5,000 calls: 50 s, 10,000
    events); the calls past the limit are now dropped from the conversation and named once."""
    flood = {"content": None, "tool_calls": [{"name": "compile", "arguments": "{}"}] * 2000}
    with ScriptedServer([flood], default={"content": None, "tool_calls": [_tool("submit", GOOD_PTX)]}) as server:
        outcome = run(server, tmp_path, evaluator, mode="tools", turns=2, max_tool_calls_per_turn=12)
    evs = events(tmp_path / "run")
    _no_infra(evs)
    assert len(of_type(evs, "tool_call")) == 12 + 1
    assert any("2000 tool calls" in e.message for e in of_type(evs, "error"))
    # turn 2's request holds turn 1's assistant message with the 12 calls kept, each answered once
    (kept,) = [m for m in server.requests[1]["messages"] if m["role"] == "assistant" and m.get("tool_calls")]
    assert len(kept["tool_calls"]) == 12
    assert len([m for m in server.requests[1]["messages"] if m["role"] == "tool"]) == 12
    assert outcome.statuses == ["FORMAT_ERROR", "COMPILED"]


def test_a_huge_reply_is_recorded_once_and_kept_short_in_the_history(tmp_path, evaluator):
    """A 3 MB reply is over the reply limit (a FORMAT_ERROR) and recorded once; later calls resend only its head."""
    from ptxbench.agent.loop.graph import MAX_HISTORY_REPLY_CHARS

    huge = reply(GOOD_PTX, "x" * 3_000_000)
    with ScriptedServer([huge, reply(GOOD_PTX)]) as server:
        outcome = run(server, tmp_path, evaluator, turns=2)
    assert outcome.statuses == ["FORMAT_ERROR", "COMPILED"]
    (kept,) = [m for m in server.requests[1]["messages"] if m["role"] == "assistant"]
    assert MAX_HISTORY_REPLY_CHARS < len(kept["content"]) < MAX_HISTORY_REPLY_CHARS + 200
    assert "left out of the history" in kept["content"]
    assert len(of_type(events(tmp_path / "run"), "model_call")[0].response["content"]) > 3_000_000


def test_a_provider_outage_past_every_retry_is_an_infra_stop_not_the_models_failure(tmp_path, evaluator):
    """Rate limits and server errors through every retry: the provider's outage. The trajectory stopped as the
    model's error and was scored as its 0; it is an infra stop now (an infra error event), left out of the scores."""
    from ptxbench.agent.records.rundir import load_run
    from ptxbench.agent.scoring.turns import score_trajectory

    with ScriptedServer([{"status": 503}, {"status": 429}], default={"status": 500}) as server:
        outcome = run(server, tmp_path, evaluator, turns=2, retry_attempts=3)
    assert outcome.stop_reason == "infra_error" and len(server.requests) == 3
    (error,) = of_type(events(tmp_path / "run"), "error")
    assert error.infra and "after 3 attempts" in error.message
    (record,) = load_run(tmp_path / "run")
    assert score_trajectory(record).infra_failed


@pytest.mark.parametrize("status", [401, 403, 404, 405, 501])
def test_a_refused_key_or_unknown_model_is_the_set_ups_failure_not_the_models(tmp_path, evaluator, status):
    """A bad key, a key without access, a model name the provider does not know, an --api-base that serves no chat
    completions (405, 501: six retries took about 70 s): the model never answered. The trajectory stopped as the
    model's error and was scored as its 0 (a bench with one revoked key ranked that model last); it is an infra stop
    now, left out of the scores and resumable once the set-up is fixed. Not retried."""
    from ptxbench.agent.records.rundir import load_run
    from ptxbench.agent.scoring.turns import score_trajectory

    with ScriptedServer([], default={"status": status, "message": "no access"}) as server:
        outcome = run(server, tmp_path, evaluator, turns=2)
    assert outcome.stop_reason == "infra_error" and len(server.requests) == 1
    (error,) = of_type(events(tmp_path / "run"), "error")
    assert error.infra and "no access" in error.message
    (record,) = load_run(tmp_path / "run")
    assert score_trajectory(record).infra_failed


def test_a_403_after_the_model_answered_stays_the_models_error(tmp_path, evaluator):
    """A gateway's moderation refuses flagged input with 403 (OpenRouter), and every request after the first holds the
    model's replies: taken as a refused set-up, a model could write its way out of the scores (an infra stop, resumed
    from the same request into the same 403). The first call's 403 holds nothing the model wrote: still infra."""
    flagged = {"status": 403, "message": "Your chosen model requires moderation and your input was flagged"}
    with ScriptedServer([reply(GOOD_PTX)], default=flagged) as server:
        outcome = run(server, tmp_path, evaluator, turns=3)
    assert outcome.stop_reason == "error" and outcome.statuses == ["COMPILED"] and len(server.requests) == 2
    (error,) = of_type(events(tmp_path / "run"), "error")
    assert not error.infra and "flagged" in error.message
    with ScriptedServer([], default=flagged) as server:
        first = run(server, tmp_path / "first", evaluator, turns=3)
    assert first.stop_reason == "infra_error" and len(server.requests) == 1


def test_a_rate_limit_retry_waits_as_long_as_retry_after_says(tmp_path, evaluator):
    """A 429 with Retry-After: the back-off waits at least that long. It waited only its own short back-off, so every
    attempt landed inside the provider's window and the turn was lost to an infra stop a wait would have avoided."""
    import time

    first: list[float] = []

    def limited(body):  # rate-limited for 1.5 s from the first request
        first[:] = first or [time.monotonic()]
        return {"status": 429, "retry_after": 1} if time.monotonic() < first[0] + 1.5 else reply(GOOD_PTX)

    with ScriptedServer([], default=limited) as server:
        outcome = run(server, tmp_path, evaluator, turns=1, retry_attempts=3)
    assert outcome.statuses == ["COMPILED"] and len(server.requests) == 3
    retries = of_type(events(tmp_path / "run"), "model_retry")
    assert [r.wait_s >= 1.0 for r in retries] == [True, True]


def test_a_retry_after_of_hours_is_capped(monkeypatch):
    from ptxbench.agent.models import litellm_model

    class Limited(Exception):
        status_code = 429
        response = type("R", (), {"headers": {"retry-after": "86400"}})()

    assert litellm_model.retry_after_s(Limited()) == litellm_model.MAX_RETRY_AFTER_S
    assert litellm_model.retry_after_s(ValueError("no response")) == 0.0


def test_an_answer_the_client_cannot_read_is_said_without_the_clients_traceback(tmp_path, evaluator):
    """A proxy answering `"message": null`: litellm's error text carries its own traceback, which reached the retry
    lines, the error event and the one-line stop message on screen (and read as a harness crash to scoring)."""
    broken = {"raw": {"id": "x", "object": "chat.completion", "model": "m",
                      "choices": [{"index": 0, "message": None, "finish_reason": "stop"}]}}
    with ScriptedServer([], default=broken) as server:
        outcome = run(server, tmp_path, evaluator, turns=1, retry_attempts=2)
    assert outcome.stop_reason == "infra_error" and "Invalid response object" in outcome.stop_detail
    evs = events(tmp_path / "run")
    for text in [outcome.stop_detail, *(e.message for e in of_type(evs, "error")), *(e.reason for e in of_type(evs, "model_retry"))]:
        assert "Traceback" not in text and "\n" not in text.strip(), text


FULL_CONTEXT = {"status": 400, "message": "This model's maximum context length is 8192 tokens. However, your messages "
                                         "resulted in 9000 tokens. Please reduce the length of the messages."}
# OpenAI answers a request above the account's tokens-per-minute limit with a 429 that no wait lets through
TOO_LARGE = {"status": 429, "message": "Request too large for gpt-4o in organization org-x on tokens per min (TPM): "
                                      "Limit 30000, Requested 45000."}


@pytest.mark.parametrize("answer, said", [(FULL_CONTEXT, "context window"), (TOO_LARGE, "per-request token limit")])
def test_a_conversation_the_provider_finds_too_long_ends_the_run_as_the_models_and_says_what_helps(
        tmp_path, evaluator, answer, said):
    """The model's context is full, or one request is above the account's token rate: the turns so far stand (the
    model's run, not an outage) and the stop says how to keep the conversation shorter, instead of the provider's
    error alone. The rate refusal was retried as a rate limit and ended as an outage (an infra stop, left out of the
    scores): the request grows with the model's replies, so a model could write its way out of being scored. Neither
    is retried; on the first call (the task alone too large) it is the set-up's failure."""
    with ScriptedServer([reply(GOOD_PTX)], default=answer) as server:
        outcome = run(server, tmp_path, evaluator, turns=3)
    assert outcome.stop_reason == "error" and outcome.statuses == ["COMPILED"] and len(server.requests) == 2
    assert said in outcome.stop_detail and "--context" in outcome.stop_detail
    assert not of_type(events(tmp_path / "run"), "model_retry")
    with ScriptedServer([], default=answer) as server:
        first = run(server, tmp_path / "first", evaluator, turns=3)
    assert first.stop_reason == "infra_error" and len(server.requests) == 1


def test_a_server_that_reports_no_usage_still_has_its_token_budget_held(tmp_path, evaluator):
    """No `usage` in the answers (some local servers and proxies): every call counted 0 tokens, so --max-tokens never
    fired and the run went on as if unbudgeted. The counts are estimated from the text now, and marked so."""
    source = reply(GOOD_PTX)["content"]
    bare = _answer({"content": source})
    del bare["raw"]["usage"]
    with ScriptedServer([], default=bare) as server:
        outcome = run(server, tmp_path, evaluator, turns=3, max_tokens=2000)
    assert outcome.stop_reason == "token_budget" and len(server.requests) == 1
    (call,) = of_type(events(tmp_path / "run"), "model_call")
    assert call.usage["estimated"] == 1 and call.usage["completion_tokens"] >= len(source) // 5
    assert call.usage["total_tokens"] == call.usage["prompt_tokens"] + call.usage["completion_tokens"] > 2000


def test_a_first_call_the_server_rejects_is_the_set_ups_failure_a_later_one_the_models(tmp_path, evaluator):
    """vLLM started without tool calling answers tools mode's first request with a 400: the model never answered and
    nothing it wrote was in the request, yet the trajectory was scored as the model's 0. A later 400 may come of what
    the model wrote (its reply is in the request): that one stays the model's."""
    from ptxbench.agent.records.rundir import load_run
    from ptxbench.agent.scoring.turns import score_trajectory

    no_tools = {"status": 400, "message": '"auto" tool choice requires --enable-auto-tool-choice to be set'}
    with ScriptedServer([], default=no_tools) as server:
        outcome = run(server, tmp_path, evaluator, turns=2, mode="tools")
    assert outcome.stop_reason == "infra_error" and len(server.requests) == 1
    (record,) = load_run(tmp_path / "run")
    assert score_trajectory(record).infra_failed
    with ScriptedServer([reply(GOOD_PTX)], default={"status": 400, "message": "invalid content"}) as server:
        later = run(server, tmp_path / "later", evaluator, turns=2)
    assert later.stop_reason == "error" and later.statuses == ["COMPILED"]


def test_tool_call_ids_that_are_no_strings_or_repeat_get_ids_of_their_own(tmp_path, evaluator):
    """An id that was a number or an object failed the trajectory's first write (the run crashed); one id on two
    calls went back as two answers to one id, which providers refuse. Each call now has a string id of its own."""
    calls = [{"id": cid, "type": "function", "function": {"name": "compile", "arguments": json.dumps({"source": GOOD_PTX})}}
             for cid in (123, ["x"], "same", "same", "i" * 10_000)]
    hostile = _answer({"content": None, "tool_calls": calls})
    with ScriptedServer([hostile], default={"content": None, "tool_calls": [_tool("submit", GOOD_PTX)]}) as server:
        outcome = run(server, tmp_path, evaluator, mode="tools", turns=1)
    assert outcome.statuses == ["COMPILED"]
    evs = events(tmp_path / "run")
    _no_infra(evs)
    messages = server.requests[1]["messages"]
    (asked,) = [[c["id"] for c in m["tool_calls"]] for m in messages if m.get("tool_calls")]
    assert asked[2] == "same" and all(isinstance(i, str) and 0 < len(i) <= 128 for i in asked)
    assert len(set(asked)) == 5 and [m["tool_call_id"] for m in messages if m["role"] == "tool"] == asked
    assert [e.call_id for e in of_type(evs, "tool_call")][:5] == asked


def test_huge_tool_arguments_are_kept_short_in_the_history(tmp_path, evaluator):
    """A 3 MB `source` in a tool call was kept whole in the conversation: every later request carried it again (and
    every model_call event recorded it again), as a huge reply's text did before it was cut."""
    from ptxbench.agent.loop.graph import MAX_HISTORY_REPLY_CHARS

    huge = {"content": None, "tool_calls": [_tool("compile", GOOD_PTX + "//" + "x" * 3_000_000), _tool("compile", GOOD_PTX)]}
    with ScriptedServer([huge], default={"content": None, "tool_calls": [_tool("submit", GOOD_PTX)]}) as server:
        outcome = run(server, tmp_path, evaluator, mode="tools", turns=2)
    assert outcome.statuses == ["COMPILED", "COMPILED"]
    assert all(len(json.dumps(r)) < MAX_HISTORY_REPLY_CHARS for r in server.requests[1:])
    (cut, whole) = [c for m in server.requests[1]["messages"] if m.get("tool_calls") for c in m["tool_calls"]]
    assert "left out of the history" in json.loads(cut["function"]["arguments"])["left_out"]
    assert json.loads(whole["function"]["arguments"])["source"] == GOOD_PTX
    # the model's answer itself is recorded whole, once
    evs = events(tmp_path / "run")
    assert len(of_type(evs, "model_call")[0].response["tool_calls"][0]["function"]["arguments"]) > 3_000_000
    assert "characters long (at most" in of_type(evs, "tool_result")[0].content


def test_a_replys_calls_after_an_infra_failure_are_not_run(tmp_path, evaluator):
    """After one evaluation failed on the harness's side (a lost GPU worker) the reply's other calls, the submit
    included, still ran on the broken evaluator, for a turn that is an infra stop and is retried anyway."""
    from ptxbench.tools.results import EvalResult

    class Flaky:
        def __init__(self):
            self.n = 0

        def evaluate(self, workload_id, source, options):
            self.n += 1
            return EvalResult(workload=workload_id, status="INFRA_ERROR", message="GPU worker lost")

        def close(self):
            """Nothing to release."""

    flaky = Flaky()
    calls = [_tool("benchmark", GOOD_PTX), _tool("profile", GOOD_PTX), _tool("submit", GOOD_PTX)]
    with ScriptedServer([{"content": None, "tool_calls": calls}]) as server:
        outcome = run(server, tmp_path, flaky, mode="tools", turns=1)
    assert outcome.stop_reason == "infra_error" and flaky.n == 1
    evs = events(tmp_path / "run")
    assert [r.ok for r in of_type(evs, "tool_result")] == [False] * 3
    assert "Not run" in of_type(evs, "tool_result")[2].content and not any(e.submission for e in of_type(evs, "eval_result"))


def test_tools_mode_submit_feedback_says_the_turns_left(tmp_path, evaluator):
    """In tools mode the submit's answer is the turn's feedback, and it never said how many turns were left or how
    the kernel stood against the best before it, which pipeline mode's feedback says."""
    script = [{"content": None, "tool_calls": [_tool("submit", GOOD_PTX)]},
              {"content": None, "tool_calls": [_tool("submit", GOOD_PTX)]}]
    with ScriptedServer(script) as server:
        run(server, tmp_path, evaluator, mode="tools", turns=2)
    answer = [m for m in server.requests[1]["messages"] if m["role"] == "tool"][-1]["content"]
    assert answer.rstrip().endswith("Turns left: 1."), answer
    evs = events(tmp_path / "run")
    assert of_type(evs, "eval_result")[0].feedback == answer  # the record holds what the model read
