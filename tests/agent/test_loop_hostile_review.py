"""The loop's word to a model about its budgets, against a model that takes it at its word: an in-process scripted
model and the StubEvaluator (tests/agent/test_loop_hostile.py's), no HTTP, compiler or GPU."""
from __future__ import annotations

from agent_helpers import GOOD_PTX, StubEvaluator, of_type
from test_loop_hostile import run, tool

SOURCE = {"source": GOOD_PTX}


def test_the_calls_left_in_a_turn_count_the_submit_and_a_late_submit_is_named(tmp_path):
    """With 3 calls a turn, two compiles were answered "Tool calls left: 1 in this turn before you must submit": a
    model that made that one call and then submitted, as told, had its submit ignored and the turn lost as a
    FORMAT_ERROR saying it never called submit. The count says the submit is among the calls left, and a submit past
    them is named as such."""
    script = [{"content": "", "tool_calls": [tool("compile", SOURCE), tool("compile", SOURCE)]},
              {"content": "", "tool_calls": [tool("compile", SOURCE), tool("submit", SOURCE)]}]
    outcome, evs, model = run(tmp_path, script, mode="tools", turns=1, max_tool_calls_per_turn=3)
    answers = [m["content"] for m in model.requests[1].messages if m["role"] == "tool"]
    assert answers[1].rstrip().endswith("Tool calls left: 1 in this turn, your submit among them; 38 in the whole run.")
    assert outcome.statuses == ["FORMAT_ERROR"] and not [e for e in of_type(evs, "eval_result") if e.submission]
    (submit,) = [r for r in of_type(evs, "tool_result") if r.name == "submit"]
    assert not submit.ok and "used up" in submit.content


def test_a_submit_past_the_turns_calls_is_told_apart_from_no_submit(tmp_path):
    """The turn's FORMAT_ERROR says what happened: the submit came too late, not "without calling submit"."""
    script = [{"content": "", "tool_calls": [tool("compile", SOURCE), tool("compile", SOURCE)]},
              {"content": "", "tool_calls": [tool("compile", SOURCE), tool("submit", SOURCE)]},
              {"content": "done"}]
    outcome, _, model = run(tmp_path, script, mode="tools", turns=2, max_tool_calls_per_turn=3)
    feedback = model.requests[2].messages[-1]["content"]
    assert outcome.statuses[0] == "FORMAT_ERROR"
    assert "Your submit came after this turn's 3 tool calls" in feedback and "without calling submit" not in feedback


def test_a_reply_cut_inside_an_unclosed_think_block_submits_no_draft(tmp_path):
    """A server without a reasoning parser sends R1-style thinking inline; cut at the output token limit before its
    </think>, the reply's draft in the thinking was evaluated as the submission, where the same reply through a server
    that parses reasoning out is a reply of only reasoning (a FORMAT_ERROR). Nothing before a </think> is an answer."""
    thinking = f"<think>\nA first draft:\n```ptx\n{GOOD_PTX}```\nBut the tile is too small, so instead"
    closed = f"<think>\nA draft:\n```ptx\n{GOOD_PTX}```\n</think>\nThe kernel:\n```ptx\n{GOOD_PTX}```\n"
    evaluator = StubEvaluator([1.0] * 5)
    outcome, _, model = run(tmp_path, [{"content": thinking, "finish_reason": "length"}, {"content": closed}],
                            evaluator, turns=2)
    assert outcome.statuses == ["FORMAT_ERROR", "PASSED"] and len(evaluator.sources) == 1
    feedback = model.requests[1].messages[-1]["content"]
    assert "only reasoning" in feedback and "never closed" in feedback and "output token limit" in feedback


def test_a_pipeline_replys_tool_calls_are_named_as_not_run_beside_its_text(tmp_path):
    """A pipeline run offers no tools, so a reply's tool calls are dropped unrun; with text beside them ("let me compile
    it first") the feedback said only that no code block was found, or nothing at all about them when the text held a
    kernel: the model was never told its calls went nowhere."""
    call = tool("compile", SOURCE)
    script = [{"content": "Let me compile it first.", "tool_calls": [call]},
              {"content": f"```ptx\n{GOOD_PTX}```", "tool_calls": [call, call]}, {"content": "done"}]
    outcome, _, model = run(tmp_path, script, turns=3)
    assert outcome.statuses[:2] == ["FORMAT_ERROR", "PASSED"]
    first, second = (r.messages[-1]["content"] for r in model.requests[1:3])
    assert "No code block found" in first and "1 tool call(s) were not run: this run offers no tools" in first
    assert "2 tool call(s) were not run: this run offers no tools" in second.split("About your reply:", 1)[1]
