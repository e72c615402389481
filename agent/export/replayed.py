"""What the author of a replayed run's replies read.

`replay/<log>` resubmits a recorded trajectory's replies in order, whatever the new evaluations say (models/replay.py):
the reply of turn t+1 answered the recorded run's feedback of turn t, under the prompts that run rendered, not the
replay's (another GPU gives other numbers, or another verdict). The rows of a replay are built from the recorded run,
found through each replayed reply's tags (`replayed_from`: the log it came from; `recorded_seq`: its place there),
through a replay of a replay back to the run of the model itself. A log is taken only where it holds each of those
replies at its recorded place: a path written over since, or one a foreign record names, lends no text to the rows.
"""
from __future__ import annotations

from pathlib import Path

from ..records.rundir import read_events, trajectory_log

MAX_REPLAYS = 16  # replays of replays followed back; a log that names itself ends there


def tags(event) -> dict:
    """A model call's reply tags ({} for another event, or tags that are no object: a hand-edited or foreign log)."""
    found = event.response.get("tags") if event.type == "model_call" else None
    return found if isinstance(found, dict) else {}


def _source(events) -> Path | None:
    """The log a replay's replies came from, as its first model call's tags name it (None: no replay)."""
    for event in events:
        if event.type == "model_call":
            source = tags(event).get("replayed_from")
            return Path(source) if isinstance(source, str) and source else None
    return None


def _where(source: Path, near: Path) -> Path | None:
    """The log file `source` names: as written, else (a relative path, written from the folder the replay ran in)
    under a folder above `near`; a trajectory folder's sealed log where its live one was."""
    candidates = [source] if source.is_absolute() else [source, *(folder / source for folder in near.parents)]
    for path in candidates:
        if path.is_file():
            return path
        if path.name == "trajectory.jsonl" and (sealed := trajectory_log(path.parent)) is not None:
            return sealed
    return None


def _holds_the_replies(events, source_events) -> bool:
    """Whether `source_events` hold every replayed reply of `events` at the place its tags name."""
    calls = {e.seq: e for e in source_events if e.type == "model_call"}
    for event in events:
        if event.type != "model_call":
            continue
        seq = tags(event).get("recorded_seq")
        recorded = calls.get(seq) if isinstance(seq, int) else None  # a list there was a TypeError
        if recorded is None or ((recorded.response.get("content") or ""), recorded.response.get("tool_calls") or []) \
                != ((event.response.get("content") or ""), event.response.get("tool_calls") or []):
            return False
    return True


def authored_events(events, log: Path) -> list | None:
    """The events of the run whose model wrote the replayed replies of `events` (read from `log`); None when a recorded
    log on the way cannot be found or read, or does not hold the replies."""
    for _ in range(MAX_REPLAYS):
        source = _source(events)
        if source is None:
            return events
        found = _where(source, log)
        try:
            source_events = read_events(found) if found is not None else []
        except (OSError, ValueError):
            return None
        if not source_events or not _holds_the_replies(events, source_events):
            return None
        events, log = source_events, found
    return None


def feedback_read(events) -> dict[tuple[int, str], str]:
    """(turn, kernel sha256) -> the feedback the model read about that scored kernel, in a run of the model itself."""
    return {(e.turn, e.kernel_sha256): e.feedback for e in events
            if e.type == "eval_result" and e.submission and e.result.status != "INFRA_ERROR"}
