"""Before a run folder is continued: its checkpoints must hold every trajectory its events say was started.

A trajectory's events (trajectory.jsonl) and its graph checkpoints (checkpoints.sqlite, thread id =
trajectory id) are written side by side. When the checkpoints are gone (the file or its -wal deleted,
a corrupt database) but the events remain, continuing would start the trajectory again: a second
trajectory_start, and model calls repeated and paid again. So that is refused with one line
(`CheckpointLost`, exit status 1) unless the user asks to restart, in which case nothing is lost either:

    the unreadable database  -> checkpoints.sqlite.corrupt-<n> (with its -wal and -shm)
    a trajectory's old files -> abandoned/<trajectory id>-<n>/ (outside trajectories/: never scored)

Checkpoints of a trajectory whose log is gone (its folder deleted to run it again) are refused the same way: continued,
they wrote a log without its start and earlier turns (or, finished, the trajectory was skipped and left out of every
score); restarted, they are forgotten and the trajectory starts over.

A log behind its checkpoints (fewer model calls logged than checkpointed: lines lost after the fact, a log truncated
or restored from an older copy) is refused as well: a kill loses at most a torn last line, written before its
checkpoint, so this is no kill. Continued, a finished trajectory was skipped as done, with a stop line counting the
checkpoint's turns over a log holding fewer (scores count only the logged ones), and an unfinished one wrote on after
the gap; restarted, its log is set aside and it starts over.

A trajectory whose log holds no progress (only trajectory_start / error: nothing was paid) is moved
aside without asking. A log at most one model call ahead of its checkpoint is the node a kill cut
short, which LangGraph runs again: that is a resume, not a loss.
"""
from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

from ..cli.inputs import RunFailed
from .rundir import read_events, side_path, trajectory_log

DB_NAME = "checkpoints.sqlite"
RESTART_FLAG = "--restart-trajectory"
NO_PROGRESS = ("trajectory_start", "error")


class CheckpointLost(RunFailed):
    """The run's checkpoints cannot continue a trajectory its events say was started (exit status 1)."""


def _db_problem(db: Path) -> str:
    """Why the database cannot be read ('' when it can)."""
    try:
        conn = sqlite3.connect(str(db))
        try:
            row = conn.execute("PRAGMA quick_check").fetchone()
            if not row or row[0] != "ok":
                return f"integrity check: {row[0] if row else 'no answer'}"
            conn.execute("SELECT name FROM sqlite_master").fetchall()
        finally:
            conn.close()
    except sqlite3.Error as exc:
        return f"{type(exc).__name__}: {exc}"
    return ""


def _latest_values(db: Path, tid: str) -> dict | None:
    """The latest checkpoint's state of a thread; None when the thread has no checkpoint."""
    from .checkpoint_store import CompactSqliteSaver

    conn = sqlite3.connect(str(db), check_same_thread=False)
    try:
        if not conn.execute("SELECT name FROM sqlite_master WHERE name = 'checkpoints'").fetchone():
            return None
        found = CompactSqliteSaver(conn).get_tuple({"configurable": {"thread_id": tid, "checkpoint_ns": ""}})
    finally:
        conn.close()
    if found is None:
        return None
    return found.checkpoint.get("channel_values") or {}


def _log_loss(folder: Path, values: dict, calls: int) -> str:
    """What a log fewer model calls hold than its latest checkpoint (`values`) lost, in words ('' when it lost none)."""
    checkpointed = int(values.get("model_calls") or 0)
    if calls >= checkpointed:
        return ""
    path = trajectory_log(folder)
    turns = sum(e.type == "turn_end" for e in read_events(path)) if path is not None else 0
    lost = max(len(values.get("done_turns") or []) - turns, 0)
    state = "was finished" if values.get("stop") else "was not finished"
    return (f"{path} holds {calls} model calls and {turns} turns, its checkpoints {checkpointed} model calls: the run "
            f"{state} and its log lost {lost} turn{'' if lost == 1 else 's'} (truncated, or an older copy restored?)")


def _forget_thread(db: Path, tid: str) -> None:
    from .checkpoint_store import CompactSqliteSaver

    if db.exists():
        conn = sqlite3.connect(str(db), check_same_thread=False)
        try:
            CompactSqliteSaver(conn).delete_thread(tid)
        finally:
            conn.close()


def _logged(folder: Path) -> tuple[bool, int]:
    """(whether the log holds progress, its model calls)."""
    path = trajectory_log(folder)
    events = read_events(path) if path is not None else []
    return any(e.type not in NO_PROGRESS for e in events), sum(e.type == "model_call" for e in events)


def _abandon(run_dir: Path, folder: Path) -> Path:
    n = 1
    while (target := run_dir / "abandoned" / f"{folder.name}-{n}").exists():
        n += 1
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(folder), str(target))
    return target


def _set_db_aside(db: Path) -> Path:
    side = side_path(db, "corrupt")
    for suffix in ("-wal", "-shm"):
        extra = db.with_name(db.name + suffix)
        if extra.exists():
            extra.rename(side.with_name(side.name + suffix))
    db.rename(side)
    return side


def check_run(run_dir: Path, trajectory_ids: list[str], restart: bool = False) -> list[str]:
    """Make run_dir safe to continue: raise CheckpointLost, or (restart / no progress) set the lost parts
    aside. Returns what was set aside, one line each."""
    run_dir, db = Path(run_dir), Path(run_dir) / DB_NAME
    moved: list[str] = []
    if db.exists() and (problem := _db_problem(db)):
        if not restart:
            raise CheckpointLost(f"{db} cannot be read ({problem}): continuing would start its trajectories again; "
                                 f"pass {RESTART_FLAG} to set it aside and start them over")
        moved.append(f"unreadable checkpoints moved to {_set_db_aside(db)}")
    lost: list[tuple[Path, str]] = []
    unlogged: list[Path] = []
    behind: list[tuple[Path, str]] = []
    for tid in trajectory_ids:
        folder = run_dir / "trajectories" / tid
        values = _latest_values(db, tid) if db.exists() else None  # read once: the checks below all use it
        if trajectory_log(folder) is None:
            if values is not None:
                unlogged.append(folder)
            continue
        progress, calls = _logged(folder)
        checkpointed = None if values is None else int(values.get("model_calls") or 0)
        if checkpointed is None and not progress:
            moved.append(f"{tid}: a log without progress moved to {_abandon(run_dir, folder)}")
        elif checkpointed is None:
            lost.append((folder, f"{tid} has {calls} model calls logged and no checkpoint"))
        elif calls > checkpointed + 1:
            lost.append((folder, f"{tid} has {calls} model calls logged and {checkpointed} checkpointed"))
        elif loss := _log_loss(folder, values, calls):
            behind.append((folder, loss))
    if unlogged and not restart:
        more = f", and {len(unlogged) - 1} more" if len(unlogged) > 1 else ""
        raise CheckpointLost(f"{unlogged[0]} has checkpoints and no log (its folder or log removed?){more}: continuing "
                             "would write a log without its start and earlier turns, or skip it as finished; pass "
                             f"{RESTART_FLAG} to start it over")
    for folder in unlogged:
        _forget_thread(db, folder.name)
        if folder.is_dir() and any(folder.iterdir()):  # its old kernel files are kept, not written over
            moved.append(f"{folder.name}: checkpoints without a log forgotten, its folder moved to "
                         f"{_abandon(run_dir, folder)}; it starts over")
        else:
            moved.append(f"{folder.name}: checkpoints without a log forgotten; it starts over")
    if behind and not restart:
        more = f", and {len(behind) - 1} more" if len(behind) > 1 else ""
        raise CheckpointLost(f"{behind[0][1]}{more}: continuing would go on from the checkpoint over a log without "
                             f"those turns; pass {RESTART_FLAG} to set the log aside and start over")
    if lost and not restart:
        where = "missing" if not db.exists() else "behind its events"
        raise CheckpointLost(f"{db} is {where} ({lost[0][1]}{f', and {len(lost) - 1} more' if len(lost) > 1 else ''}): "
                             f"continuing would start again and pay for its model calls again; pass {RESTART_FLAG} "
                             "to set the old trajectory aside and start over")
    for folder, why in lost + behind:
        _forget_thread(db, folder.name)  # a stale head would be resumed from: the restart starts clean
        moved.append(f"{why}: moved to {_abandon(run_dir, folder)}")
    return moved
