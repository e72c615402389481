"""`replay/<path>`: answer with the model messages of a recorded trajectory, in order.

Re-scores a recorded trajectory on new hardware or with a new evaluator: the n-th model call gets
the n-th recorded reply, whatever the feedback says now. <path> is a trajectory.jsonl (or a sealed
trajectory.jsonl.gz), a trajectory folder or a run folder (then the trajectory of the same workload). A log of
another workload or mode, or a file that is no trajectory log, is refused at the first call (a set-up failure,
left out of the scores), and by `ptxbench optimize` and `bench` before a run is made (replay_mismatch). Each
replayed reply's tags name the log, its event and the model that wrote it.
"""
from __future__ import annotations

from pathlib import Path

from ..records.rundir import read_events, trajectory_folders, trajectory_log
from .base import ModelError, ModelExhausted, ModelReply, ModelRequest


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


def replay_choice(path: str | Path, workload: str) -> str | None:
    """A note when `path` is a run folder holding several trajectories of `workload`: find_trajectory replays the
    first, which the user may not have meant (a bench's twelve trajectories of one cell look alike by name)."""
    path = Path(path)
    if path.is_file() or trajectory_log(path) is not None:
        return None
    try:
        folders = trajectory_folders(path)
    except (OSError, ValueError):
        return None
    same = [f for f in folders if (start := next((e for e in read_events(trajectory_log(f))
                                                 if e.type == "trajectory_start"), None)) is not None
            and start.workload == workload]
    if len(same) < 2:
        return None
    return (f"note: {path} holds {len(same)} trajectories of {workload}; replaying the first, {same[0].name} (give its "
            f"folder, replay/{same[0]}, or another's to choose)")


def replay_mismatch(path: str | Path, workload: str, mode: str) -> str | None:
    """Why replay/<path> cannot answer `workload` in `mode`, or None: the first call would refuse it as an infra stop,
    after a run was made whose --resume can only fail the same way."""
    return ReplayModel(path, workload).refusal(mode)


class ReplayModel:
    def __init__(self, path: str | Path, workload: str | None = None):
        self.source = find_trajectory(path, workload)
        self.name = f"replay/{path}"
        self.workload = workload
        events = read_events(self.source)
        self.start = next((e for e in events if e.type == "trajectory_start"), None)
        self.calls = [e for e in events if e.type == "model_call"]

    def refusal(self, mode: str) -> str | None:
        """Why these recorded replies cannot answer this trajectory, in `mode` (pipeline | tools): they were written for
        another task (workload) or protocol (mode), or the file is no trajectory log at all. Said at the first call, a
        set-up failure; `ptxbench optimize` asks before a run is made (replay_mismatch)."""
        if self.start is None or not self.calls:
            return f"{self.source} is no recorded trajectory with model calls (no trajectory_start or no model_call)"
        if self.workload and self.start.workload != self.workload:
            return (f"{self.source} recorded workload {self.start.workload}, not {self.workload}: its replies answer "
                    f"another task; replay it on {self.start.workload}")
        if self.start.mode != mode:
            return (f"{self.source} was recorded in {self.start.mode} mode, this run is in {mode} mode: its replies "
                    f"follow the other protocol; replay it with --mode {self.start.mode}")
        return None

    def query(self, request: ModelRequest) -> ModelReply:
        if request.call_index == 0 and (problem := self.refusal("tools" if request.tools is not None else "pipeline")):
            raise ModelError(problem)
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
            # the model that wrote the reply (through a replay of a replay, the first one)
            tags={"replayed_from": str(self.source), "recorded_seq": recorded.seq,
                  "recorded_model": (response.get("tags") or {}).get("recorded_model") or recorded.model},
        )
