"""Resume is loud and lossless: a torn trajectory line is set aside, never appended onto; a run whose
checkpoints are missing, corrupt or behind its events is refused (one line, exit 1) unless restarted."""
from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys

import pytest

from agent_helpers import StubEvaluator, WORKLOAD
from bench_fixtures import CountingModel
from ptxbench.agent.records.checkpoint_guard import CheckpointLost
from ptxbench.agent.records.events import Stop
from ptxbench.agent.loop.optimize import optimize
from ptxbench.agent.records.rundir import TrajectoryWriter, read_events
from ptxbench.agent.loop.state import OptimizeConfig


def _run(run_dir, calls, turns=2, **kw):
    config = OptimizeConfig(workload=WORKLOAD, model="builtin/tuner", no_gpu=True, turns=turns, target_speedup=None)
    return optimize(config, run_dir=run_dir, evaluator=StubEvaluator([None] * 9), model=CountingModel(calls), **kw)


def _resume(run_dir, calls, **kw):
    return optimize(resume=run_dir, evaluator=StubEvaluator([None] * 9), model=CountingModel(calls), **kw)


def _log(run_dir):
    (folder,) = (run_dir / "trajectories").iterdir()
    return folder / "trajectory.jsonl"


def test_torn_last_line_is_set_aside_and_never_appended_onto(tmp_path):
    writer = TrajectoryWriter(tmp_path / "t")
    writer.append(Stop(trajectory_id="t", turn=1, reason="turn_limit"))
    torn = b'{"type": "stop", "trajectory_id": "t", "tu'
    with open(writer.path, "ab") as f:
        f.write(torn)
    again = TrajectoryWriter(tmp_path / "t")
    assert again.torn == tmp_path / "t" / "trajectory.jsonl.torn-1" and again.torn.read_bytes() == torn
    again.append(Stop(trajectory_id="t", turn=2, reason="turn_limit"))
    lines = again.path.read_text().splitlines()
    assert len(lines) == 2 and all(json.loads(line)["type"] == "stop" for line in lines)
    assert [e.seq for e in read_events(again.path)] == [0, 1]
    with open(again.path, "ab") as f:  # a second tear gets the next side file
        f.write(b"{")
    assert TrajectoryWriter(tmp_path / "t").torn.name == "trajectory.jsonl.torn-2"
    assert TrajectoryWriter(tmp_path / "t").torn is None  # a whole file is left as it is


def test_resume_after_a_torn_line_keeps_every_event(tmp_path):
    calls: list = []
    _run(tmp_path / "run", calls, turns=1)
    log = _log(tmp_path / "run")
    with open(log, "ab") as f:
        f.write(b'{"type": "turn_')
    _resume(tmp_path / "run", calls)  # finished: nothing runs, but the writer repaired the file
    assert log.read_bytes().endswith(b"\n") and (log.parent / "trajectory.jsonl.torn-1").exists()
    assert all(json.loads(line) for line in log.read_text().splitlines())


@pytest.mark.parametrize("damage", ["missing_db", "missing_wal", "corrupt_db"])
def test_lost_checkpoints_are_refused_then_restarted_on_request(tmp_path, damage):
    calls: list = []
    run_dir = tmp_path / "run"
    config = OptimizeConfig(workload=WORKLOAD, model="builtin/tuner", no_gpu=True, turns=3, target_speedup=None)
    # A run killed mid-way: first turn done, then the checkpoints are damaged.
    optimize(config.model_copy(update={"turns": 1}), run_dir=run_dir, evaluator=StubEvaluator([None]),
             model=CountingModel(calls))
    db = run_dir / "checkpoints.sqlite"
    if damage == "missing_db":
        db.unlink()
    elif damage == "missing_wal":  # the rows lived in the WAL only; the main file is an empty WAL database
        db.unlink()
        conn = sqlite3.connect(str(db))
        conn.execute("PRAGMA journal_mode=WAL")
        conn.close()
    else:
        db.write_bytes(b"SQLite format 3\x00" + os.urandom(4000))
    before = _log(run_dir).read_text()
    with pytest.raises(CheckpointLost, match="--restart-trajectory") as caught:
        _resume(run_dir, calls)
    assert "\n" not in str(caught.value)
    assert _log(run_dir).read_text() == before and len(calls) == 1  # nothing appended, no model call
    _resume(run_dir, calls, restart=True)
    starts = [e for e in read_events(_log(run_dir)) if e.type == "trajectory_start"]
    assert len(starts) == 1  # the new trajectory has one start; the old one is kept aside, whole
    (abandoned,) = (run_dir / "abandoned").iterdir()
    assert (abandoned / "trajectory.jsonl").read_text() == before
    if damage == "corrupt_db":
        assert (run_dir / "checkpoints.sqlite.corrupt-1").exists()


def test_checkpoint_behind_its_events_is_refused(tmp_path):
    calls: list = []
    run_dir = tmp_path / "run"
    _run(run_dir, calls, turns=1)
    db = run_dir / "checkpoints.sqlite"
    snapshot = db.read_bytes()  # the checkpoints after one turn, as if the later WAL pages were lost
    _resume(run_dir, calls)
    log = _log(run_dir)
    # Two more model calls logged than checkpointed: a kill explains one, not two.
    lines = [line for line in log.read_text().splitlines() if json.loads(line)["type"] == "model_call"]
    with open(log, "a") as f:
        f.write(lines[0] + "\n" + lines[0] + "\n")
    for suffix in ("-wal", "-shm"):
        (run_dir / f"checkpoints.sqlite{suffix}").unlink(missing_ok=True)
    db.write_bytes(snapshot)
    with pytest.raises(CheckpointLost, match="3 model calls logged and 1 checkpointed"):
        _resume(run_dir, calls)


def test_a_finished_run_whose_log_lost_turns_is_refused_then_restarted(tmp_path):
    """A log that lost more than a torn tail (truncated, an older copy restored): --resume of the finished run said
    'stop: turn_limit (3 of 3 turns done); turns 0' and nothing of the loss."""
    calls: list = []
    run_dir = tmp_path / "run"
    _run(run_dir, calls, turns=3)
    log = _log(run_dir)
    log.write_text("".join(log.read_text().splitlines(keepends=True)[:3]))  # start, one model call, its result
    before = log.read_text()
    with pytest.raises(CheckpointLost) as caught:
        _resume(run_dir, calls)
    line = str(caught.value)
    assert "\n" not in line and "holds 1 model calls and 0 turns, its checkpoints 3 model calls" in line, line
    assert "the run was finished and its log lost 3 turns" in line and "--restart-trajectory" in line, line
    assert log.read_text() == before and len(calls) == 3  # nothing appended, no model call
    outcome = _resume(run_dir, calls, restart=True)
    assert outcome.turns == 3 and not outcome.resumed
    (abandoned,) = (run_dir / "abandoned").iterdir()
    assert (abandoned / "trajectory.jsonl").read_text() == before
    assert sum(e.type == "turn_end" for e in read_events(_log(run_dir))) == 3


def test_a_log_without_progress_is_set_aside_without_asking(tmp_path):
    calls: list = []
    run_dir = tmp_path / "run"
    _run(run_dir, calls, turns=1)
    log = _log(run_dir)
    log.write_text(log.read_text().splitlines()[0] + "\n")  # only trajectory_start: nothing was paid
    (run_dir / "checkpoints.sqlite").unlink()
    outcome = _resume(run_dir, calls)
    assert outcome.turns == 1 and (run_dir / "abandoned").is_dir()


def test_cli_refuses_with_one_line_and_exit_status_1(tmp_path):
    calls: list = []
    run_dir = tmp_path / "run"
    _run(run_dir, calls, turns=1)
    (run_dir / "checkpoints.sqlite").write_bytes(b"not a database at all" * 50)
    argv = [sys.executable, "-c", "from ptxbench.agent.cli.main import app; app()", "optimize", "--resume", str(run_dir), "--quiet"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and "--restart-trajectory" in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout


def test_checkpoints_of_a_trajectory_whose_folder_was_removed_are_refused_then_restarted(tmp_path):
    """A trajectory folder deleted to run it again (its checkpoints kept): --resume went on from the checkpoint into a
    new log without its trajectory_start and earlier turns (a finished one was skipped, its folder left empty and the
    trajectory out of every score), and said nothing. It is refused; --restart-trajectory starts it over."""
    import shutil

    from bench_fixtures import WL
    from ptxbench.agent.bench.matrix import BenchConfig
    from ptxbench.agent.bench.runner import run_bench

    run_dir, calls = tmp_path / "run", []
    cfg = BenchConfig(models=["scripted/py"], workloads=[WL], trajectories=2, turns=2, no_gpu=True)
    run_bench(cfg, run_dir, evaluator=StubEvaluator([None] * 9), model_factory=lambda c: CountingModel(calls))
    first, second = sorted((run_dir / "trajectories").iterdir())
    kept = (second / "trajectory.jsonl").read_text()
    shutil.rmtree(first)
    with pytest.raises(CheckpointLost, match="no log") as caught:
        run_bench(None, run_dir, resume=True, evaluator=StubEvaluator([None] * 9),
                  model_factory=lambda c: CountingModel(calls))
    assert "\n" not in str(caught.value) and len(calls) == 4  # nothing ran
    out = run_bench(None, run_dir, resume=True, restart=True, evaluator=StubEvaluator([None] * 9),
                    model_factory=lambda c: CountingModel(calls))
    assert [t.statuses for t in out.trajectories] == [["COMPILE_ERROR"] * 2] * 2 and len(calls) == 6
    events = read_events(first / "trajectory.jsonl")
    assert [e.type for e in events].count("trajectory_start") == 1 and [e.turn for e in events
                                                                         if e.type == "turn_end"] == [1, 2]
    assert (second / "trajectory.jsonl").read_text() == kept
