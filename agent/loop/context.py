"""Context policies: which messages the model sees on its next call.

    full     system + task + every earlier turn + the turn in progress
    last     system + task + the last completed turn + the turn in progress
    summary  system + task + one line per older turn + the last completed turn + the turn in progress
A turn's messages stay together, so a tool call is never separated from its result.
"""
from __future__ import annotations

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
