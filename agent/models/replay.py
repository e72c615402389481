"""`replay/<path>`: answer with the model messages of a recorded trajectory, in order.

Re-scores a recorded trajectory on new hardware or with a new evaluator: the n-th model call gets
the n-th recorded reply, whatever the feedback says now. <path> is a trajectory.jsonl (or a sealed
trajectory.jsonl.gz), a trajectory folder or a run folder (then the trajectory of the same workload, else the first one).
"""
from __future__ import annotations

from pathlib import Path

from ..records.rundir import read_events, trajectory_folders, trajectory_log
from .base import ModelExhausted, ModelReply, ModelRequest


def find_trajectory(path: str | Path, workload: str | None = None) -> Path:
    path = Path(path)
    if path.is_file():
        return path
    if (log := trajectory_log(path)) is not None:
        return log
    folders = trajectory_folders(path)
    if not folders:
        raise FileNotFoundError(f"no trajectory.jsonl at or under {path}")
    logs = [trajectory_log(folder) for folder in folders]
    for log in logs:
        start = next((e for e in read_events(log) if e.type == "trajectory_start"), None)
        if workload and start is not None and start.workload == workload:
            return log
    return logs[0]


class ReplayModel:
    def __init__(self, path: str | Path, workload: str | None = None):
        self.source = find_trajectory(path, workload)
        self.name = f"replay/{path}"
        self.calls = [e for e in read_events(self.source) if e.type == "model_call"]

    def query(self, request: ModelRequest) -> ModelReply:
        if request.call_index >= len(self.calls):
            raise ModelExhausted(f"the recorded trajectory {self.source} has only {len(self.calls)} model calls")
        recorded = self.calls[request.call_index]
        response = recorded.response
        return ModelReply(
            content=response.get("content") or "",
            reasoning_content=response.get("reasoning_content"),
            tool_calls=response.get("tool_calls") or [],
            finish_reason=response.get("finish_reason") if isinstance(response.get("finish_reason"), str) else None,
            usage=dict(recorded.usage),
            cost_usd=0.0,
            tags={"replayed_from": str(self.source), "recorded_seq": recorded.seq},
        )
