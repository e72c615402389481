"""Retry after an infra failure: roll a trajectory's checkpoints back to the last step before it.

When the evaluator reports INFRA_ERROR the graph records it and stops with reason infra_error. To
retry, the checkpoints written after the last state without a stop are deleted (with their pending
writes), so the next run_trajectory resumes right before the failed step: the same submission is
evaluated again and no finished model call is repeated. The events of the failed attempt stay in
trajectory.jsonl; scoring lets the retried turn replace the infra one.
"""
from __future__ import annotations


def _values(tuple_) -> dict:
    return (tuple_.checkpoint or {}).get("channel_values") or {}


def rollback_infra_stop(checkpointer, thread_id: str) -> bool:
    """Drop the checkpoints after the last one without a stop; False when there is nothing to roll back to."""
    history = list(checkpointer.list({"configurable": {"thread_id": thread_id}}))  # newest first
    target = next((t for t in history if _values(t).get("turn") and not _values(t).get("stop")), None)
    if target is None or target is history[0]:
        return False
    ns = target.config["configurable"].get("checkpoint_ns", "")
    cid = target.config["configurable"]["checkpoint_id"]
    with checkpointer.lock:
        cur = checkpointer.conn.cursor()
        cur.execute("DELETE FROM checkpoints WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id > ?",
                    (thread_id, ns, cid))
        # The failed step's own writes hang on the target checkpoint: without them the step runs again.
        cur.execute("DELETE FROM writes WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id >= ?",
                    (thread_id, ns, cid))
        checkpointer.conn.commit()
    return True
