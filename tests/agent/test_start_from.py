"""`optimize --start-from FILE`: the handed-in kernel is evaluated as turn 0 and shown to the model first.

The real litellm path against the scripted OpenAI-compatible server, the real LocalEvaluator in no-GPU
mode (real ptxas), so the verdict in the first request is the compiler's own."""
from __future__ import annotations

import pytest
from typer.testing import CliRunner

from agent_helpers import BROKEN_PTX, GOOD_PTX, WORKLOAD, events, of_type, reply, request_text
from openai_server import ScriptedServer
from ptxbench.agent.cli.main import app
from ptxbench.agent.loop.optimize import optimize
from ptxbench.agent.records.rundir import load_run
from ptxbench.agent.scoring.turns import score_trajectory
from ptxbench.agent.loop.state import OptimizeConfig
from ptxbench.tools.evaluate import LocalEvaluator


@pytest.fixture(scope="module")
def evaluator():
    ev = LocalEvaluator()
    yield ev
    ev.close()


@pytest.fixture
def start_file(tmp_path):
    path = tmp_path / "handed_in.ptx"
    path.write_text(BROKEN_PTX)
    return path


def test_cli_start_from_shows_the_kernel_and_its_verdict(tmp_path, start_file):
    run_dir = tmp_path / "run"
    with ScriptedServer([reply(GOOD_PTX, "Fixed the register.")]) as server:
        result = CliRunner().invoke(app, [
            "optimize", WORKLOAD, "--start-from", str(start_file), "--model", "openai/scripted", "--api-base",
            server.base_url, "--no-gpu", "--turns", "1", "--run-dir", str(run_dir), "--quiet"])
        assert result.exit_code == 0, result.output
        first = request_text(server.requests[0])
    # The first request carries the handed-in kernel and the verdict ptxas gave it.
    assert "mov.b32 %r2, %rs9;" in first and "COMPILE_ERROR" in first and "Unknown symbol" in first
    evs = events(run_dir)
    zero = [e for e in of_type(evs, "eval_result") if e.turn == 0]
    assert len(zero) == 1 and zero[0].result.status == "COMPILE_ERROR" and zero[0].feedback in first
    (record,) = load_run(run_dir)
    assert (record.folder / zero[0].kernel_file).read_text() == BROKEN_PTX
    assert [(e.turn, e.status) for e in of_type(evs, "turn_end")] == [(0, "COMPILE_ERROR"), (1, "COMPILED")]
    # Turn 0 is not the model's: it is kept apart from the scored turns, and the turn budget was all the model's.
    score = score_trajectory(record)
    assert score.start.status == "COMPILE_ERROR" and [t.turn for t in score.turns] == [1]
    assert of_type(evs, "trajectory_start")[0].config["start_from"] == str(start_file.resolve())


def test_cli_start_from_missing_file_is_a_usage_error(tmp_path):
    result = CliRunner().invoke(app, ["optimize", WORKLOAD, "--start-from", str(tmp_path / "nope.cu"), "--no-gpu"])
    assert result.exit_code == 2 and "no such file" in result.output


def test_tools_mode_start_from(tmp_path, evaluator, start_file):
    script = [{"content": None, "tool_calls": [{"name": "submit", "arguments": {"source": GOOD_PTX}}]}]
    with ScriptedServer(script) as server:
        config = OptimizeConfig(workload=WORKLOAD, model="openai/scripted", api_base=server.base_url, no_gpu=True,
                                mode="tools", turns=1, start_from=str(start_file), retry_wait_s=0.01)
        outcome = optimize(config, run_dir=tmp_path / "run", evaluator=evaluator)
        assert "mov.b32 %r2, %rs9;" in request_text(server.requests[0])
    assert outcome.statuses == ["COMPILED"]
    assert [(e.turn, e.submission) for e in of_type(events(tmp_path / "run"), "eval_result")] == [(0, True), (1, True)]


class CountsThenFails:
    """Counts evaluations; the second one dies (a crashed harness), later ones work."""

    def __init__(self, inner):
        self.inner, self.calls = inner, 0

    def evaluate(self, workload_id, source, options):
        self.calls += 1
        if self.calls == 2:
            raise RuntimeError("evaluator died")
        return self.inner.evaluate(workload_id, source, options)

    def close(self):
        """Nothing to release: a stand-in holds no process or GPU."""


def test_resume_does_not_evaluate_turn_zero_again(tmp_path, evaluator, start_file):
    run_dir = tmp_path / "run"
    flaky = CountsThenFails(evaluator)
    with ScriptedServer([reply(GOOD_PTX), reply(GOOD_PTX)]) as server:
        config = OptimizeConfig(workload=WORKLOAD, model="openai/scripted", api_base=server.base_url, no_gpu=True,
                                turns=2, start_from=str(start_file), target_speedup=None)
        with pytest.raises(RuntimeError, match="evaluator died"):
            optimize(config, run_dir=run_dir, evaluator=flaky)
        start_file.unlink()  # the kernel lives in the checkpoint: resuming needs no file
        outcome = optimize(resume=run_dir, evaluator=flaky)
        second = request_text(server.requests[1])
    assert outcome.resumed and outcome.statuses == ["COMPILED", "COMPILED"] and flaky.calls == 4
    assert "mov.b32 %r2, %rs9;" in second  # the start section stays in the task after resume
    assert [e.turn for e in of_type(events(run_dir), "eval_result")] == [0, 1, 2]


def test_unchanged_model_resubmits_the_start_kernel(tmp_path, evaluator, start_file):
    config = OptimizeConfig(workload=WORKLOAD, model="builtin/unchanged", no_gpu=True, turns=2, start_from=str(start_file))
    outcome = optimize(config, run_dir=tmp_path / "run", evaluator=evaluator)
    assert outcome.statuses == ["COMPILE_ERROR", "COMPILE_ERROR"]
    kernels = [e for e in of_type(events(tmp_path / "run"), "eval_result")]
    assert {e.kernel_sha256 for e in kernels} == {kernels[0].kernel_sha256} and len(kernels) == 3


def test_cli_start_from_a_folder_says_it_is_a_folder(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    result = CliRunner().invoke(app, ["optimize", WORKLOAD, "--start-from", str(folder), "--no-gpu"])
    assert result.exit_code == 2 and "is a folder" in result.output and "no such file" not in result.output, result.output
