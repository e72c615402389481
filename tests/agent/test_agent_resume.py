"""A trajectory killed mid-run resumes from its last completed step without repeating a model call."""
from __future__ import annotations

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
