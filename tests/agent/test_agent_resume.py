"""A trajectory killed mid-run resumes from its last completed step without repeating a model call."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from agent_helpers import BROKEN_PTX, GOOD_PTX, WORKLOAD, events, of_type, reply
from openai_server import ScriptedServer
from ptxbench.agent.loop.optimize import optimize
from ptxbench.agent.loop.state import OptimizeConfig
from ptxbench.tools.evaluate import LocalEvaluator


@pytest.fixture(scope="module")
def evaluator():
    ev = LocalEvaluator()
    yield ev
    ev.close()


class FailsOnce:
    """The evaluator dies on its first call (as a crashed harness would), then works."""

    def __init__(self, inner):
        self.inner, self.calls = inner, 0

    def evaluate(self, workload_id, source, options):
        self.calls += 1
        if self.calls == 1:
            raise RuntimeError("evaluator died")
        return self.inner.evaluate(workload_id, source, options)

    def close(self):
        """Nothing to release: a stand-in holds no process or GPU."""


def test_resume_after_a_crash_does_not_repeat_the_model_call(tmp_path, evaluator):
    run_dir = tmp_path / "run"
    flaky = FailsOnce(evaluator)
    with ScriptedServer([reply(BROKEN_PTX), reply(GOOD_PTX)]) as server:
        config = OptimizeConfig(workload=WORKLOAD, model="openai/scripted", api_base=server.base_url, no_gpu=True, turns=2)
        with pytest.raises(RuntimeError, match="evaluator died"):
            optimize(config, run_dir=run_dir, evaluator=flaky)
        assert len(server.requests) == 1
        outcome = optimize(resume=run_dir, evaluator=flaky)
    assert outcome.resumed and outcome.statuses == ["COMPILE_ERROR", "COMPILED"]
    assert len(server.requests) == 2  # the first reply was taken from the checkpoint, not asked again
    evs = events(run_dir)
    assert len(of_type(evs, "trajectory_start")) == 1 and len(of_type(evs, "model_call")) == 2
    assert "evaluator died" in of_type(evs, "error")[0].message
    assert [e.turn for e in of_type(evs, "eval_result")] == [1, 2]
    # resuming a finished trajectory changes nothing
    again = optimize(resume=run_dir, evaluator=flaky)
    assert again.statuses == outcome.statuses and len(server.requests) == 2


def test_killed_process_resumes(tmp_path, evaluator):
    run_dir = tmp_path / "run"
    script = [reply(BROKEN_PTX), {"hang": True}, reply(GOOD_PTX)]
    with ScriptedServer(script) as server:
        argv = [sys.executable, "-c", "from ptxbench.agent.cli.main import app; app()", "optimize", WORKLOAD,
                "--model", "openai/scripted", "--api-base", server.base_url, "--no-gpu", "--turns", "2",
                "--run-dir", str(run_dir), "--quiet"]
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            # The second request arrives only after turn 1 was evaluated and checkpointed.
            assert server.wait_for_requests(2, timeout=180), proc.stdout.read1().decode(errors="replace")
        finally:
            proc.kill()
            proc.wait(30)
        outcome = optimize(resume=run_dir, evaluator=evaluator)
    assert len(server.requests) == 3
    assert server.requests[2]["messages"] == server.requests[1]["messages"]  # only the call in flight was asked again
    assert outcome.statuses == ["COMPILE_ERROR", "COMPILED"] and outcome.stop_reason == "turn_limit"
    evs = events(run_dir)
    assert [e.turn for e in of_type(evs, "model_call")] == [1, 2]
    assert [e.status for e in of_type(evs, "turn_end")] == ["COMPILE_ERROR", "COMPILED"]
    assert len(of_type(evs, "trajectory_start")) == 1 and len(of_type(evs, "stop")) == 1


class Counting:
    """Counts evaluations; the `die_at`-th raises KeyboardInterrupt, as a kill in the middle of it would."""

    def __init__(self, inner, die_at: int = 0):
        self.inner, self.calls, self.die_at = inner, 0, die_at

    def evaluate(self, workload_id, source, options):
        self.calls += 1
        if self.calls == self.die_at:
            raise KeyboardInterrupt("killed")
        return self.inner.evaluate(workload_id, source, options)

    def close(self):
        """Nothing to release."""


def _killed_at(kind: str, name: str = ""):
    """A listener that kills the run once an event of `kind` (of tool `name`) is on disk, before the checkpoint."""
    def listener(event):
        if event.type == kind and getattr(event, "name", name) == name:
            raise KeyboardInterrupt("killed")
    return listener


def _tool(name: str, source: str = GOOD_PTX) -> dict:
    return {"name": name, "arguments": {"source": source}}


def _tools_config(server, turns: int = 2) -> OptimizeConfig:
    return OptimizeConfig(workload=WORKLOAD, model="openai/scripted", api_base=server.base_url, no_gpu=True,
                          mode="tools", turns=turns, retry_wait_s=0.01)


@pytest.mark.parametrize("kill", ["third_evaluation", "after_submit_recorded"])
def test_resume_mid_reply_reuses_the_recorded_tool_calls(tmp_path, evaluator, kill):
    """A kill inside one reply's [benchmark, profile, submit]: on resume the calls answered before it are not run or
    recorded again, the model gets the recorded answers, and the scored submission stays the one recorded."""
    run_dir = tmp_path / "run"
    first = [_tool("benchmark"), _tool("profile", BROKEN_PTX), _tool("submit")]
    with ScriptedServer([{"content": None, "tool_calls": first}, reply(GOOD_PTX)]) as server:
        dying = Counting(evaluator, die_at=3 if kill == "third_evaluation" else 0)
        listeners = [_killed_at("tool_result", "submit")] if kill == "after_submit_recorded" else None
        with pytest.raises(KeyboardInterrupt):
            optimize(_tools_config(server), run_dir=run_dir, evaluator=dying, listeners=listeners)
        resumed = Counting(evaluator)
        outcome = optimize(resume=run_dir, evaluator=resumed)
        assert len(server.requests) == 2
        answers = [m for m in server.requests[1]["messages"] if m["role"] == "tool"]
    # the submit left to run (or none), then turn 2's reply
    assert resumed.calls == (2 if kill == "third_evaluation" else 1)
    assert outcome.statuses == ["COMPILED", "COMPILED"]
    evs = events(run_dir)
    calls, results = of_type(evs, "tool_call"), of_type(evs, "tool_result")
    assert [(e.call_id, e.name) for e in calls] == [(e.call_id, e.name) for e in results]
    assert [e.name for e in calls] == ["benchmark", "profile", "submit"] and len({e.call_id for e in calls}) == 3
    assert [e.content for e in results] == [m["content"] for m in answers]  # what the model got is what was recorded
    assert [e.submission for e in of_type(evs, "eval_result")] == [False, False, True, True]
    assert [e.turn for e in of_type(evs, "turn_end")] == [1, 2]


def test_resume_after_the_evaluation_was_recorded_does_not_evaluate_again(tmp_path, evaluator):
    run_dir = tmp_path / "run"
    with ScriptedServer([reply(BROKEN_PTX)]) as server:
        config = OptimizeConfig(workload=WORKLOAD, model="openai/scripted", api_base=server.base_url, no_gpu=True, turns=1)
        with pytest.raises(KeyboardInterrupt):
            optimize(config, run_dir=run_dir, evaluator=evaluator, listeners=[_killed_at("eval_result")])
        resumed = Counting(evaluator)
        outcome = optimize(resume=run_dir, evaluator=resumed)
    assert resumed.calls == 0 and outcome.statuses == ["COMPILE_ERROR"]
    evs = events(run_dir)
    assert len(of_type(evs, "eval_result")) == 1 and [e.status for e in of_type(evs, "turn_end")] == ["COMPILE_ERROR"]


def test_resume_after_a_provider_outage_asks_again_and_finishes(tmp_path, evaluator):
    """An outage past every retry stops the run as an infra failure; --resume, once the provider is back, asks the
    model again from the step that failed (it returned the infra stop as a finished run, so no optimize run an
    outage ended could ever be finished)."""
    from ptxbench.agent.records.rundir import load_run
    from ptxbench.agent.scoring.turns import score_trajectory

    run_dir = tmp_path / "run"
    with ScriptedServer([{"status": 503}, {"status": 503}], default=reply(GOOD_PTX)) as server:
        config = OptimizeConfig(workload=WORKLOAD, model="openai/scripted", api_base=server.base_url, no_gpu=True,
                                turns=2, retry_attempts=2, retry_wait_s=0.01)
        first = optimize(config, run_dir=run_dir, evaluator=evaluator)
        assert first.stop_reason == "infra_error" and first.statuses == []
        outcome = optimize(resume=run_dir, evaluator=evaluator)
    assert outcome.stop_reason == "turn_limit" and outcome.statuses == ["COMPILED", "COMPILED"]
    assert len(server.requests) == 4  # two failed attempts, then one call per turn
    (record,) = load_run(run_dir)
    score = score_trajectory(record)
    assert not score.infra_failed and [t.status for t in score.turns] == ["COMPILED", "COMPILED"]


def test_the_cli_says_how_to_go_on_after_an_outage(tmp_path):
    from typer.testing import CliRunner

    from ptxbench.agent.cli.main import app

    run_dir = tmp_path / "run"
    with ScriptedServer([], default={"status": 503}) as server:
        result = CliRunner().invoke(app, ["optimize", WORKLOAD, "--model", "openai/scripted", "--api-base",
                                          server.base_url, "--no-gpu", "--quiet", "--retry-wait", "0.01",
                                          "--run-dir", str(run_dir)])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert f"resume with: ptxbench optimize --resume {run_dir}" in result.output


# A child that runs a trajectory (builtin/reference, answers without compiling) and dies as a SIGKILL leaves it, with
# no handler run, right after the NTH event of a kind is on disk: before the node that wrote it is checkpointed.
DIES_AFTER = """
import os, sys
from agent_helpers import StubEvaluator, WORKLOAD
from ptxbench.agent.loop.optimize import optimize
from ptxbench.agent.loop.state import OptimizeConfig
run, kind, nth = sys.argv[1], sys.argv[2], int(sys.argv[3])
seen = []
def die(event):
    if event.type == kind:
        seen.append(event)
        if len(seen) == nth:
            os._exit(9)
config = OptimizeConfig(workload=WORKLOAD, model="builtin/reference", no_gpu=True, turns=3, target_speedup=0)
optimize(config, run_dir=run, evaluator=StubEvaluator([1.0, 1.1, 1.2]), listeners=[die])
"""


def _killed_after(run_dir, kind: str, nth: int) -> None:
    import os
    from pathlib import Path

    tests = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([tests, os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", DIES_AFTER, str(run_dir), kind, str(nth)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 9, done.stderr


@pytest.mark.parametrize("kind, nth", [("turn_end", 2), ("turn_end", 3), ("stop", 1)])
def test_a_kill_after_a_turn_end_or_stop_is_not_logged_twice(tmp_path, kind, nth):
    """The feedback node logs turn_end, the finish node stop; a kill before their checkpoints runs them again on
    resume, which logged a second turn_end (turn 2 twice) or a second stop."""
    from agent_helpers import StubEvaluator

    run_dir = tmp_path / "run"
    _killed_after(run_dir, kind, nth)
    outcome = optimize(resume=run_dir, evaluator=StubEvaluator([1.0, 1.1, 1.2][nth:] if kind == "turn_end" else []))
    assert outcome.stop_reason == "turn_limit" and outcome.turns == 3
    evs = events(run_dir)
    assert [e.turn for e in of_type(evs, "turn_end")] == [1, 2, 3]
    assert len(of_type(evs, "stop")) == 1 and evs[-1].type == "stop"
    assert len(of_type(evs, "trajectory_start")) == 1 and [e.seq for e in evs] == list(range(len(evs)))


def test_a_kill_before_the_first_node_is_checkpointed_resumes_the_trajectory(tmp_path):
    """A kill after the input's checkpoint and its writes, before the first node's checkpoint, left a thread with a
    state and nothing next: --resume called that trajectory finished (stop reason '', exit status 0) with no turn run."""
    import sqlite3

    from agent_helpers import StubEvaluator

    run_dir = tmp_path / "run"
    _killed_after(run_dir, "stop", 1)
    db = sqlite3.connect(run_dir / "checkpoints.sqlite")  # back to what the kill would have left: the input's checkpoint
    with db:
        db.execute("DELETE FROM checkpoints WHERE json_extract(CAST(metadata AS TEXT), '$.step') >= 0")
        db.execute("DELETE FROM writes WHERE checkpoint_id NOT IN (SELECT checkpoint_id FROM checkpoints)")
    db.close()
    log = next((run_dir / "trajectories").iterdir()) / "trajectory.jsonl"
    log.write_text(log.read_text().splitlines(keepends=True)[0])  # the trajectory_start alone
    outcome = optimize(resume=run_dir, evaluator=StubEvaluator([1.0, 1.1, 1.2]))
    assert outcome.stop_reason == "turn_limit" and outcome.turns == 3
    evs = events(run_dir)
    assert len(of_type(evs, "trajectory_start")) == 1 and [e.turn for e in of_type(evs, "turn_end")] == [1, 2, 3]


# A child that runs a trajectory and dies as a SIGKILL leaves it once the stop deciding node's writes are stored: before
# the checkpoint after that node, and the finish node, are.
DIES_AT_STOP_CHECKPOINT = """
import os, sys
from agent_helpers import StubEvaluator, WORKLOAD
from ptxbench.agent.loop.optimize import optimize
from ptxbench.agent.loop.state import OptimizeConfig
from ptxbench.agent.records.checkpoint_store import CompactSqliteSaver
put_writes = CompactSqliteSaver.put_writes
def dies(self, config, writes, task_id, task_path=""):
    put_writes(self, config, writes, task_id, task_path)
    if any(channel == "stop" and value for channel, value in writes):
        os._exit(9)
CompactSqliteSaver.put_writes = dies
config = OptimizeConfig(workload=WORKLOAD, model="builtin/reference", no_gpu=True, turns=2, target_speedup=0)
optimize(config, run_dir=sys.argv[1], evaluator=StubEvaluator([1.0, 1.1]))
"""


def test_a_kill_after_the_stop_decision_is_stored_logs_the_stop_on_resume(tmp_path):
    """A kill between the stop deciding node's writes and its checkpoint (with trajectories running in parallel, a
    SIGKILL finds one there) left a thread whose state read stopped with nothing next: --resume called it finished
    without running the finish node, so its log never got its stop and it stayed unfinished (left out of the scores,
    'resume the run') through every resume."""
    import os
    from pathlib import Path

    from agent_helpers import StubEvaluator
    from ptxbench.agent.records.rundir import load_run
    from ptxbench.agent.scoring.turns import score_trajectory

    run_dir = tmp_path / "run"
    tests = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([tests, os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", DIES_AT_STOP_CHECKPOINT, str(run_dir)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 9, done.stderr
    assert of_type(events(run_dir), "stop") == []
    outcome = optimize(resume=run_dir, evaluator=StubEvaluator([]))
    assert outcome.stop_reason == "turn_limit" and outcome.turns == 2
    evs = events(run_dir)
    assert [e.turn for e in of_type(evs, "turn_end")] == [1, 2]
    assert len(of_type(evs, "stop")) == 1 and evs[-1].type == "stop"
    assert [e.seq for e in evs] == list(range(len(evs)))
    assert not score_trajectory(load_run(run_dir)[0]).unfinished


def test_a_kill_after_a_model_call_is_recorded_takes_the_recorded_reply(tmp_path):
    """The query node logs the model's reply before its checkpoint: a kill between them asked the model again on
    resume (a paid model billed twice, two model_call events for the turn). The recorded reply to the same request is
    taken instead; the next turn's call is a new one."""
    from agent_helpers import StubEvaluator
    from ptxbench.agent.models import load_model

    run_dir = tmp_path / "run"
    _killed_after(run_dir, "model_call", 2)
    model, asked = load_model("builtin/reference", WORKLOAD), []
    query = model.query
    model.query = lambda request: asked.append(request.turn) or query(request)
    outcome = optimize(resume=run_dir, model=model, evaluator=StubEvaluator([1.1, 1.2]))
    assert outcome.stop_reason == "turn_limit" and outcome.turns == 3
    evs = events(run_dir)
    assert [e.turn for e in of_type(evs, "model_call")] == [1, 2, 3]
    assert asked == [3]  # turn 2's reply came from the log
    assert [e.turn for e in of_type(evs, "turn_end")] == [1, 2, 3] and [e.seq for e in evs] == list(range(len(evs)))


def test_a_resume_that_sets_an_empty_log_aside_keeps_holding_the_trajectory(tmp_path):
    """A kill before anything was checkpointed leaves a log of its trajectory_start alone, which --resume moves to
    abandoned/ before starting the trajectory over. The hold (a flock on the trajectory's folder) went with the moved
    folder: the run went on in a new folder nobody held, and a second --resume ran the same trajectory beside it."""
    from agent_helpers import StubEvaluator
    from ptxbench.agent.loop.optimize import RunFolderInUse, hold_trajectory
    from ptxbench.agent.models import load_model

    run_dir = tmp_path / "run"
    _killed_after(run_dir, "trajectory_start", 1)
    folder = next((run_dir / "trajectories").iterdir())
    model, second = load_model("builtin/reference", WORKLOAD), []
    query = model.query

    def query_with_a_second_resume(request):
        try:
            fd = hold_trajectory(folder)
        except RunFolderInUse:
            second.append("refused")
        else:
            second.append("held")
            if fd is not None:
                import os

                os.close(fd)
        return query(request)

    model.query = query_with_a_second_resume
    outcome = optimize(resume=run_dir, model=model, evaluator=StubEvaluator([1.0, 1.1, 1.2]))
    assert outcome.stop_reason == "turn_limit" and (run_dir / "abandoned").is_dir()
    assert second == ["refused"] * 3


def test_a_resume_that_loses_the_new_folder_to_another_is_refused_once(tmp_path, monkeypatch):
    """Another --resume that takes the trajectory's new folder between check_run setting the old one aside and this
    one holding it again: this one is refused in one line (RunFolderInUse), its old hold let go once."""
    import fcntl
    import os

    from agent_helpers import StubEvaluator
    from ptxbench.agent.loop import optimize as loop

    run_dir = tmp_path / "run"
    _killed_after(run_dir, "trajectory_start", 1)
    folder = next((run_dir / "trajectories").iterdir())
    checked, other = loop.check_run, []

    def then_another_resume(*args, **kwargs):
        moved = checked(*args, **kwargs)
        folder.mkdir()
        other.append(os.open(folder, os.O_RDONLY | os.O_DIRECTORY))
        fcntl.flock(other[0], fcntl.LOCK_EX | fcntl.LOCK_NB)
        return moved

    monkeypatch.setattr(loop, "check_run", then_another_resume)
    try:
        with pytest.raises(loop.RunFolderInUse):
            loop.optimize(resume=run_dir, evaluator=StubEvaluator([1.0]))
    finally:
        for fd in other:
            os.close(fd)


def test_a_tool_argument_json_cannot_record_is_refused_so_a_resume_reuses_its_answer(tmp_path, evaluator):
    """NaN, Infinity and 1e999 parse (Python's json takes them) but are no JSON: the record wrote them as null, so on
    resume the call no longer matched its record, and every recorded call of the reply was run (GPU time) and recorded
    again. They are now the model's malformed arguments, answered as such, and the resume reuses that answer."""
    run_dir = tmp_path / "run"
    source = json.dumps(GOOD_PTX)
    odd = [{"name": "benchmark", "arguments": '{"source": %s, "n": %s}' % (source, v)} for v in ("NaN", "Infinity", "1e999")]
    first = [*odd, _tool("test"), _tool("submit")]
    with ScriptedServer([{"content": None, "tool_calls": first}, reply(GOOD_PTX)]) as server:
        with pytest.raises(KeyboardInterrupt):
            optimize(_tools_config(server), run_dir=run_dir, evaluator=Counting(evaluator),
                     listeners=[_killed_at("tool_result", "submit")])
        resumed = Counting(evaluator)
        outcome = optimize(resume=run_dir, evaluator=resumed)
        answers = [m["content"] for m in server.requests[1]["messages"] if m["role"] == "tool"]
    assert resumed.calls == 1 and outcome.statuses == ["COMPILED", "COMPILED"]  # turn 2's reply only
    evs = events(run_dir)
    results = of_type(evs, "tool_result")
    assert [e.name for e in of_type(evs, "tool_call")] == ["benchmark"] * 3 + ["test", "submit"]
    assert [e.ok for e in results] == [False, False, False, True, True]
    assert all("not a JSON number" in a for a in answers[:3]) and answers == [e.content for e in results]
