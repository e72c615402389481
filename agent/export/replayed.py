"""What the author of a replayed run's replies read.

`replay/<log>` resubmits a recorded trajectory's replies in order, whatever the new evaluations say (models/replay.py):
the reply of turn t+1 answered the recorded run's feedback of turn t, under the prompts that run rendered, not the
replay's (another GPU gives other numbers, or another verdict). The rows of a replay are built from the recorded run,
found through each replayed reply's tags (`replayed_from`: the log it came from), through a replay of a replay back to
the run of the model itself.
"""
from __future__ import annotations

from pathlib import Path

from ..records.rundir import read_events

MAX_REPLAYS = 16  # replays of replays followed back; a log that names itself ends there


def _source(events) -> Path | None:
    """The log a replay's replies came from, as its first model call's tags name it (None: no replay)."""
    for event in events:
        if event.type == "model_call":
            source = (event.response.get("tags") or {}).get("replayed_from")
            return Path(source) if isinstance(source, str) and source else None
    return None


def authored_events(events) -> list | None:
    """The events of the run whose model wrote these replayed replies; None when a recorded log on the way cannot be
    read (moved, deleted, on another machine), or is itself no trajectory log."""
    for _ in range(MAX_REPLAYS):
        source = _source(events)
        if source is None:
            return events
        try:
            events = read_events(source)
        except (OSError, ValueError):
            return None
        if not any(e.type == "model_call" for e in events):
            return None
    return None


def feedback_read(events) -> dict[tuple[int, str], str]:
    """(turn, kernel sha256) -> the feedback the model read about that scored kernel, in a run of the model itself."""
    return {(e.turn, e.kernel_sha256): e.feedback for e in events
            if e.type == "eval_result" and e.submission and e.result.status != "INFRA_ERROR"}
