"""Context policies: which messages the model sees on its next call.

    full     system + task + every earlier turn + the turn in progress
    last     system + task + the last completed turn + the turn in progress
    summary  system + task + one line per older turn + the last completed turn + the turn in progress
A turn's messages stay together, so a tool call is never separated from its result.

context_views gives the smaller views the loop falls back to when a request outgrows the model's context window.
"""
from __future__ import annotations

import json
from typing import Any

from .state import AgentState

POLICIES = ("full", "last", "summary")


def summary_line(done_turn: dict[str, Any], fastest: bool = False) -> str:
    """One older turn in a line: its status, speedup and own time, and the first line of its message. `fastest`: the
    turn's kernel is the fastest that passed, whose code this context no longer holds (the model's way back to it)."""
    outcome = done_turn.get("outcome", {})
    speedup = outcome.get("speedup")
    text = f"- turn {done_turn['turn']}: {outcome.get('status', '?')}"
    if speedup is not None:
        text += f", speedup {speedup:.3f}x"
    if (ms := _kernel_ms(outcome)) is not None:
        text += f", {ms:.4f} ms"
    if fastest:
        text += " (your fastest passing kernel so far; its code is not shown here)"
    message = (outcome.get("message") or "").strip().splitlines()
    if message:
        text += f": {message[0][:200]}"
    return text


def _kernel_ms(outcome: dict[str, Any]) -> float | None:
    """A passing turn's own median time (its evidence), else None."""
    if outcome.get("status") != "PASSED":
        return None
    return (outcome.get("evidence") or {}).get("kernel_ms")


def _fastest_turn(done: list[dict[str, Any]]) -> int | None:
    timed = [(ms, t["turn"]) for t in done if (ms := _kernel_ms(t.get("outcome", {}))) is not None]
    return min(timed)[1] if timed else None


def build_messages(state: AgentState, policy: str = "full") -> list[dict[str, Any]]:
    if policy not in POLICIES:
        raise ValueError(f"unknown context policy {policy!r}; valid: {', '.join(POLICIES)}")
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": state["system"]},
        {"role": "user", "content": state["task"]},
    ]
    done = state.get("done_turns", [])
    if policy == "full":
        for turn in done:
            messages += turn["messages"]
    elif done:
        older = done[:-1]
        if policy == "summary" and older:
            fastest = _fastest_turn(done)
            lines = "\n".join(summary_line(t, t["turn"] == fastest) for t in older)
            messages[1] = {"role": "user", "content": f"{state['task']}\n## Your earlier turns (summary)\n{lines}\n"}
        messages += done[-1]["messages"]
    return messages + list(state.get("current", []))


# A request the model's context window cannot take is sent again smaller, down this ladder (largest first), before the
# run ends on it: the summary policy's view, then the last policy's, then the last one with the older tool exchanges
# of the last turn and the turn in progress cut to one-line stubs. Under `full` a tools-mode run of 20 KB kernels
# passed 128k tokens by its fourth call and ended there as the model's error.
STUBBED = "last+stubs"
LADDER = ("full", "summary", "last", STUBBED)  # the views, largest first


def context_views(state: AgentState, policy: str = "full") -> list[tuple[str, list[dict[str, Any]]]]:
    """(name, messages) of each view the loop may send, largest first; views that come out the same are given once."""
    views: list[tuple[str, list[dict[str, Any]]]] = []
    for name in LADDER[LADDER.index(policy):LADDER.index("last") + 1]:  # the policies' views; the stubbed one below
        messages = build_messages(state, name)
        if not views or messages != views[-1][1]:
            views.append((name, messages))
    stubbed = with_stubs(messages)  # the loop ends on the last policy's view
    if stubbed != views[-1][1]:
        views.append((STUBBED, stubbed))
    return views


def _arguments(call: dict[str, Any]) -> dict[str, Any]:
    try:
        value = json.loads(call.get("function", {}).get("arguments") or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def with_stubs(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`messages` (a copy) with each tool exchange older than the latest kernel's cut to one-line stubs that name what
    was dropped: the call's source argument and the tool's answer. Kept whole: the latest call that carried a source
    and its answer (the kernel the model works on and its feedback), every call of the last reply that made calls,
    and everything that is no tool exchange. A call keeps its id and each answer its place, so every provider still
    pairs them."""
    calls = [(i, c) for i, m in enumerate(messages) if m.get("role") == "assistant" for c in m.get("tool_calls") or []]
    if not calls:
        return list(messages)
    keep = {c.get("id") for i, c in calls if i == calls[-1][0]}  # the last reply's calls wait on their answers
    with_source = [c for _, c in calls if isinstance(_arguments(c).get("source"), str)]
    if with_source:
        keep.add(with_source[-1].get("id"))
    names = {c.get("id"): c.get("function", {}).get("name", "") for _, c in calls}
    out = []
    for message in messages:
        if message.get("role") == "assistant" and message.get("tool_calls"):
            message = {**message, "tool_calls": [c if c.get("id") in keep else _stub_call(c)
                                                 for c in message["tool_calls"]]}
        elif message.get("role") == "tool" and message.get("tool_call_id") not in keep:
            message = {**message, "content": _stub_answer(names.get(message.get("tool_call_id"), ""),
                                                          str(message.get("content") or ""))}
        out.append(message)
    return out


def _stub_call(call: dict[str, Any]) -> dict[str, Any]:
    source = _arguments(call).get("source")
    if not isinstance(source, str):
        return call
    note = (f"the source of this {call.get('function', {}).get('name', '')} call ({len(source)} characters) was "
            "dropped to fit the model's context window; your latest kernel is kept")
    return {**call, "function": {**call.get("function", {}), "arguments": json.dumps({"left_out": note})}}


STUB_ANSWERS_FROM = 300  # characters: a shorter answer is about as long as its stub, and stays


def _stub_answer(name: str, content: str) -> str:
    if len(content) < STUB_ANSWERS_FROM:
        return content
    first = next((line.strip() for line in content.splitlines() if line.strip()), "")[:120]
    return f"[dropped to fit the model's context window: this {name} answer of {len(content)} characters, which began: {first}]"
