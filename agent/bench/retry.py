"""Retry after an infra failure: fork the trajectory's thread from the last step before it.

When the evaluator reports INFRA_ERROR the graph records it and stops with reason infra_error. To
retry, LangGraph's time travel forks the thread at the last checkpoint that has a turn and no stop
(`update_state` on that checkpoint's config): the fork becomes the thread's head, its next node is
the step that failed, so the next invoke evaluates the same submission again and no finished model
call is repeated. The failed branch stays in the checkpoint history, its events in trajectory.jsonl;
scoring lets the retried turn replace the infra one.
"""
from __future__ import annotations

FORKED, NOTHING_TO_RETRY = "forked", "nothing_to_retry"


def _stop_reason(values: dict) -> str:
    return ((values or {}).get("stop") or {}).get("reason", "")


def fork_before_infra_stop(graph, thread_id: str) -> str:
    """'' when the thread did not stop on an infra error; FORKED, or NOTHING_TO_RETRY (it failed before any turn)."""
    config = {"configurable": {"thread_id": thread_id}}
    if _stop_reason(graph.get_state(config).values) != "infra_error":
        return ""
    history = graph.get_state_history(config)  # newest first
    target = next((s for s in history if s.values.get("turn") and not s.values.get("stop")), None)
    if target is None:
        return NOTHING_TO_RETRY
    graph.update_state(target.config, None)  # a new head branching from target; the node after it runs again
    return FORKED
