"""Ctrl-C on `optimize` and `bench`: one line on stderr saying how to go on, exit status 130, the interrupt logged as
'interrupted by the user' (kept out of the model's scores), and the run folder continued by --resume. SIGTERM (a
scheduler's stop, sent to the whole process group as Slurm does, or `kill`) takes the same path, with exit status
143: it used to end the process at once, with no line and no error event in the log."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

WORKLOAD = "smoke_gemm_bf16_m256_n256_k512"
# faulthandler: a run that never ends is sent SIGABRT, and its threads' stacks come back in the failure (_stacks)
CLI = [sys.executable, "-X", "faulthandler", "-m", "ptxbench.agent"]


# Long enough that the run is still going when its first turn has ended (a no-GPU turn is one compile, seconds), short
# enough that each resume to the end stays cheap on a CI machine; the resume-while-running test needs the first run
# to outlast a second process's start-up
TURNS = 12
TURNS_WHILE_RUNNING = 30

STOPS = {"SIGINT": (signal.SIGINT, 130, ""), "SIGTERM": (signal.SIGTERM, 143, " by SIGTERM")}


def _stacks(proc: subprocess.Popen) -> str:
    """What a run that did not end was doing: every thread's stack, as faulthandler prints them on SIGABRT."""
    os.killpg(proc.pid, signal.SIGABRT)
    try:
        _, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        return "(no stacks: it did not end on SIGABRT either)"
    return (err or b"").decode(errors="replace")[-8000:]


def _interrupt(argv, cwd: Path, log_glob: str, sig=signal.SIGINT) -> subprocess.CompletedProcess:
    """Run argv, send `sig` to its process group once a turn is logged under cwd, and wait for it."""
    # SIGINT as a terminal leaves it: a shell's background job (a CI script's `&`) starts its children with SIGINT
    # ignored, and a Python started so never raises KeyboardInterrupt
    proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 300
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if any('"turn_end"' in p.read_text() for p in cwd.glob(log_glob)):
                break
            time.sleep(0.05)
        assert proc.poll() is None, "the run ended before it could be interrupted"
        assert time.monotonic() < deadline, f"no turn ended within 300 s; its threads:\n{_stacks(proc)}"
        os.killpg(proc.pid, sig)
        try:
            out, err = proc.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the run did not end within 300 s of {signal.Signals(sig).name}; its threads:\n{_stacks(proc)}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    return subprocess.CompletedProcess(argv, proc.returncode, out.decode(), err.decode())


def _events(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("stop", list(STOPS))
def test_ctrl_c_on_optimize_says_how_to_resume(tmp_path, stop):
    sig, status, by = STOPS[stop]
    argv = [*CLI, "optimize", WORKLOAD, "--no-gpu", "--turns", str(TURNS), "--run-dir", "ci4", "--quiet"]
    done = _interrupt(argv, tmp_path, "ci4/trajectories/*/trajectory.jsonl", sig)
    assert done.returncode == status, done.stderr
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("interrupted at turn ") and f" of {TURNS}{by}; " in lines[0]
    assert lines[0].endswith("resume with: ptxbench optimize --resume ci4")
    log = next((tmp_path / "ci4" / "trajectories").glob("*/trajectory.jsonl"))
    last = _events(log)[-1]
    assert last["type"] == "error" and last["message"].startswith("interrupted by the user") and last["infra"]
    assert ("(SIGTERM)" in last["message"]) == (stop == "SIGTERM")
    assert f"turn {last['turn']} of {TURNS}" in lines[0]

    from ptxbench.agent.records.rundir import TrajectoryRecord, read_events
    from ptxbench.agent.scoring.turns import score_trajectory

    cut = score_trajectory(TrajectoryRecord(log.parent, read_events(log)))
    assert all(t.status != "INFRA_ERROR" or t.turn == last["turn"] for t in cut.turns)  # only the cut-short turn

    again = subprocess.run([*CLI, "optimize", "--resume", "ci4", "--quiet"], cwd=tmp_path, capture_output=True,
                           text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    assert "stop: turn_limit" in again.stdout
    scored = score_trajectory(TrajectoryRecord(log.parent, read_events(log)))
    assert not scored.infra_failed and len(scored.turns) == TURNS
    assert all(t.status != "INFRA_ERROR" for t in scored.turns)



@pytest.mark.parametrize("cut", ["evaluate", "feedback"])
def test_a_ctrl_c_after_the_evaluation_is_recorded_scores_the_resumed_turn(tmp_path, monkeypatch, cut):
    """A Ctrl-C after a turn's eval_result and before its turn_end (the evaluate step's checkpoint, the feedback step):
    --resume runs the step cut short again, takes the recorded evaluation from the log (nothing evaluated or recorded
    twice) and ends the turn, but the turn was scored INFRA_ERROR, as if the interruption had cut it short (seen as a
    rare failure of the Ctrl-C test above on a loaded machine, which widens that window). It keeps its evaluation."""
    from ptxbench.agent.loop.optimize import optimize
    from ptxbench.agent.loop.state import OptimizeConfig
    from ptxbench.agent.records.rundir import TrajectoryRecord, read_events
    from ptxbench.agent.records.trajectory import TrajectoryLog
    from ptxbench.agent.scoring.turns import score_trajectory

    method = {"evaluate": "eval_result", "feedback": "turn_end"}[cut]
    logged = getattr(TrajectoryLog, method)

    def interrupted(self, turn, *args, **kwargs):
        if turn == 2 and cut == "feedback":
            raise KeyboardInterrupt()  # in the feedback step, before its turn_end
        event = logged(self, turn, *args, **kwargs)
        if turn == 2:
            raise KeyboardInterrupt()  # in the evaluate step, once its result is in the log
        return event

    monkeypatch.setattr(TrajectoryLog, method, interrupted)
    config = OptimizeConfig(workload=WORKLOAD, model="builtin/tuner", no_gpu=True, turns=3)
    with pytest.raises(KeyboardInterrupt):
        optimize(config, run_dir=tmp_path / "run")
    monkeypatch.setattr(TrajectoryLog, method, logged)
    assert optimize(resume=tmp_path / "run").stop_reason == "turn_limit"
    log = next((tmp_path / "run" / "trajectories").glob("*/trajectory.jsonl"))
    events = read_events(log)
    assert [e.turn for e in events if e.type == "eval_result"] == [1, 2, 3]  # the resume reused turn 2's
    assert any(e.type == "error" and e.turn == 2 and e.message.startswith("interrupted by the user") for e in events)
    scored = score_trajectory(TrajectoryRecord(log.parent, events))
    assert [(t.turn, t.status) for t in scored.turns] == [(1, "COMPILED"), (2, "COMPILED"), (3, "COMPILED")]
    assert not scored.infra_failed and not scored.unfinished

@pytest.mark.parametrize("stop", list(STOPS))
def test_ctrl_c_on_bench_says_how_to_resume(tmp_path, stop):
    sig, status, by = STOPS[stop]
    argv = [*CLI, "bench", "--models", "builtin/tuner", "--workloads", WORKLOAD, "--trajectories", "1", "--turns", str(TURNS),
            "--no-gpu", "--run-dir", "b1"]
    done = _interrupt(argv, tmp_path, "b1/trajectories/*/trajectory.jsonl", sig)
    assert done.returncode == status, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith(f"interrupted{by} (")]
    assert lines and lines[-1].endswith("resume with: ptxbench bench --resume --run-dir b1"), done.stderr
    again = subprocess.run([*CLI, "bench", "--resume", "--run-dir", "b1"], cwd=tmp_path, capture_output=True,
                           text=True, timeout=600)
    assert again.returncode == 0, again.stderr


def test_a_resume_while_the_run_still_goes_is_refused(tmp_path):
    """`optimize --resume` of a trajectory another process is running repaired the log under it, ran the same turns
    again (model calls paid twice) and interleaved both runs' events. The running process holds its trajectory's
    folder: the second is one line, exit status 2, and nothing of the first run changes; once it stopped, the resume
    goes on."""
    argv = [*CLI, "optimize", WORKLOAD, "--no-gpu", "--turns", str(TURNS_WHILE_RUNNING), "--run-dir", "r",
            "--quiet"]
    proc = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not any('"turn_end"' in p.read_text()
                                                      for p in tmp_path.glob("r/trajectories/*/trajectory.jsonl")):
            assert proc.poll() is None, "the run ended before the resume"
            time.sleep(0.05)
        # held still (its folder's lock kept) while the second process starts: with a warm compile cache its 30 turns
        # could end before the second one's imports did, and the resume then ran instead of being refused
        os.killpg(proc.pid, signal.SIGSTOP)
        second = subprocess.run([*CLI, "optimize", "--resume", "r", "--quiet"], cwd=tmp_path, capture_output=True,
                                text=True, timeout=300)
        assert proc.poll() is None, "the run ended before the resume was refused"
        assert second.returncode == 2, second.stderr
        assert "is being run by another process" in second.stderr and "Traceback" not in second.stderr
        os.killpg(proc.pid, signal.SIGINT)  # delivered as it goes on
        os.killpg(proc.pid, signal.SIGCONT)
        try:
            proc.wait(300)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the run did not end within 300 s of SIGINT; its threads:\n{_stacks(proc)}")
        assert proc.returncode == 130, proc.stderr.read().decode(errors="replace")[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    log = next((tmp_path / "r" / "trajectories").glob("*/trajectory.jsonl"))
    events = _events(log)
    assert [e["type"] for e in events].count("trajectory_start") == 1
    assert [e["seq"] for e in events] == list(range(len(events)))  # one writer: no event of a second run in between
    again = subprocess.run([*CLI, "optimize", "--resume", "r", "--quiet"], cwd=tmp_path, capture_output=True, text=True,
                           timeout=600)
    assert again.returncode == 0 and "stop: turn_limit" in again.stdout, again.stderr


@pytest.mark.parametrize("stop", ["SIGINT", "SIGTERM"])
def test_a_stop_while_the_bench_starts_its_workers_is_one_line(tmp_path, monkeypatch, stop):
    """Ctrl-C (or SIGTERM) while the CLI was still starting the GPU workers, before the bench began, ended in a
    traceback out of the pool's start; now the interrupt line, its exit status and no run folder."""
    from typer.testing import CliRunner

    from ptxbench.agent.bench import evaluators
    from ptxbench.agent.cli.main import app
    from ptxbench.agent.cli.sigterm import Terminated

    def stopped(config):
        raise KeyboardInterrupt() if stop == "SIGINT" else Terminated()

    monkeypatch.setattr(evaluators, "make_evaluator", stopped)
    res = CliRunner().invoke(app, ["bench", "--models", "builtin/reference", "--workloads", WORKLOAD, "--trajectories",
                                   "1", "--turns", "1", "--no-gpu", "--run-dir", str(tmp_path / "run")])
    assert res.exit_code == STOPS[stop][1] and "Traceback" not in res.output, res.output
    assert f"interrupted{STOPS[stop][2]} while the GPU workers started; no run was recorded" in res.output
    assert not (tmp_path / "run" / "manifest.json").exists()
