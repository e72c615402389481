"""A bench whose model cannot be reached at all (agent/bench/unreached.py): on a machine offline each trajectory's
first call failed in seconds (agent/models/reach.py), so the bench spent every trajectory's infra retries at once and
marked them all infra-failed, exiting as if it had run. The bench now stops that model's trajectories at their first
call, runs the matrix's other models, and stops in one line naming the host and --resume; the resume runs them with no
infra failure counted. A model that answered in this bench keeps its retries. Nothing here leaves this machine: the
names end in .invalid (never resolved), the ports and proxies are closed local ones."""
from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent_helpers import offline_without_proxies
from bench_fixtures import GOOD, WL, CountingModel
from openai_server import ScriptedServer
from ptxbench.agent.bench.evaluators import HostUnreached
from ptxbench.agent.bench.matrix import BenchConfig
from ptxbench.agent.bench.runner import run_bench
from ptxbench.agent.bench.unreached import ModelUnreached, ReachWatch
from ptxbench.agent.cli.main import app
from ptxbench.agent.loop.optimize import make_model
from ptxbench.agent.models.base import ModelReply, ModelRequest, ModelUnavailable
from ptxbench.agent.models.reach import cannot_connect
from ptxbench.agent.scoring import score_runs
from ptxbench.tools.results import EvalResult, Timing, TimingStat



@pytest.fixture(autouse=True)
def _no_proxy_and_a_key(monkeypatch):
    offline_without_proxies(monkeypatch)


class Passing:
    """Every evaluation passes (a stand-in: no GPU, no compiler)."""

    def evaluate(self, workload, source, options):
        stat = TimingStat(median_ms=1.0, ci_low_ms=1.0, ci_high_ms=1.0, n=3)
        return EvalResult(workload=workload, status="PASSED", gpu_evaluated=True,
                          timing=Timing(candidate=stat, speedup=1.0))

    def close(self):
        """Nothing to release."""


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def folders(run: Path) -> list[Path]:
    return sorted(p for p in (run / "trajectories").iterdir() if p.is_dir()) if (run / "trajectories").exists() else []


def test_a_host_never_reached_stops_the_bench_and_a_resume_runs_every_trajectory(tmp_path):
    run = tmp_path / "run"
    cfg = BenchConfig(models=["openai/far"], workloads=[WL], trajectories=6, turns=1, no_gpu=True, parallel=2,
                      api_base="http://x.invalid/v1", infra_retries=2)
    start = time.monotonic()
    with pytest.raises(HostUnreached) as stop:
        run_bench(cfg, run, evaluator=Passing())
    took, line = time.monotonic() - start, str(stop.value)
    assert line.startswith("openai/far: cannot reach x.invalid (its name does not resolve"), line
    assert f"ptxbench bench --resume --run-dir {run}" in line and "\n" not in line and took < 20
    reports = stop.value.trajectories
    assert len(reports) == 6 and {r.stop_reason for r in reports} == {"unreached"}
    assert not any(r.infra_failed for r in reports) and {r.attempts for r in reports} == {0}
    assert len(folders(run)) <= 2  # those in flight began; the rest were not started into the same failure
    with ScriptedServer(default=GOOD) as server:
        out = run_bench(None, run, resume=True, overrides={"api_base": server.base_url}, evaluator=Passing())
        assert len(server.requests) == 6  # each first call, made once
    assert {r.stop_reason for r in out.trajectories} == {"turn_limit"}
    assert not any(r.infra_failed for r in out.trajectories) and {r.attempts for r in out.trajectories} == {1}
    score = score_runs([run])
    assert score.n_infra_failed == 0 and len(score.trajectories) == 6
    assert not any(t.left_out for t in score.trajectories)


def test_the_other_models_run_on_and_the_resume_runs_only_the_one_not_reached(tmp_path):
    """A local model and one whose server refuses every connection: the local one's trajectories all run; the bench
    then stops on the other, and the resume asks the local one nothing again."""
    run, calls = tmp_path / "run", []
    cfg = BenchConfig(models=["scripted/py", "openai/far"], workloads=[WL], trajectories=3, turns=2, no_gpu=True,
                      parallel=2, api_base=f"http://127.0.0.1:{closed_port()}/v1")
    factory = lambda c: CountingModel(calls) if c.model == "scripted/py" else make_model(c)  # noqa: E731
    with pytest.raises(HostUnreached) as stop:
        run_bench(cfg, run, evaluator=Passing(), model_factory=factory)
    line = str(stop.value)
    assert line.startswith("openai/far: cannot reach 127.0.0.1 (connection refused"), line
    assert "3 trajectories of openai/far wait, not counted as infra-failed (the other 3 ran)" in line, line
    local = [r for r in stop.value.trajectories if r.model == "scripted/py"]
    assert [r.stop_reason for r in local] == ["turn_limit"] * 3 and len(calls) == 6
    with ScriptedServer(default=GOOD) as server:
        out = run_bench(None, run, resume=True, overrides={"api_base": server.base_url}, evaluator=Passing(),
                        model_factory=factory)
        assert len(server.requests) == 6  # openai/far: 3 trajectories x 2 turns
    assert len(calls) == 6 and {r.stop_reason for r in out.trajectories} == {"turn_limit"}
    assert score_runs([run]).n_infra_failed == 0


def test_a_resume_offline_counts_only_the_trajectories_left_and_reports_the_finished_as_finished(tmp_path):
    """A resumed run offline: its finished trajectories after the one the host stopped are finished, not waiting; the
    stop line counts the one left."""
    run, calls = tmp_path / "run", []

    class Down:
        name = "openai/far"

        def query(self, request):
            raise ModelUnavailable("the provider's outage after 6 attempts")

    cfg = BenchConfig(models=["openai/far"], workloads=[WL], trajectories=3, turns=1, no_gpu=True, parallel=1,
                      infra_retries=0)
    run_bench(cfg, run, evaluator=Passing(), model_factory=lambda c: Down() if c.index == 1 else CountingModel(calls))
    with pytest.raises(HostUnreached) as stop:
        run_bench(None, run, resume=True, overrides={"api_base": "http://x.invalid/v1"}, evaluator=Passing())
    assert [r.stop_reason for r in stop.value.trajectories] == ["turn_limit", "unreached", "turn_limit"]
    assert "The bench stopped: 1 trajectory of openai/far waits, not counted as infra-failed (the other 2 ran)" \
        in str(stop.value), str(stop.value)
    assert len(calls) == 2


def test_a_model_that_answered_and_then_went_away_keeps_its_retries(tmp_path):
    """Its host answered in this bench, then went away (a restart, a blip): retried, infra-failed as before, and the
    bench goes on."""
    server = ScriptedServer(default=GOOD).__enter__()
    made: list[int] = []

    def factory(c):
        made.append(c.index)
        if len(made) == 2:  # the first trajectory finished: the server goes
            server.__exit__(None, None, None)
        return make_model(c)

    cfg = BenchConfig(models=["openai/near"], workloads=[WL], trajectories=2, turns=1, no_gpu=True, parallel=1,
                      api_base=server.base_url, infra_retries=1, optimize={"retry_attempts": 2, "retry_wait_s": 0.01})
    out = run_bench(cfg, tmp_path / "run", evaluator=Passing(), model_factory=factory)
    first, second = out.trajectories
    assert first.stop_reason == "turn_limit" and second.infra_failed and second.attempts == 2
    assert "after 2 attempts" in second.error, second.error


def test_a_model_that_answered_in_this_bench_is_not_taken_for_unreached():
    """The watch's own rule, whatever reach.py's memory of the host: a model one call of which answered in this bench
    is out of reach only for a while; its failure stays the model's ModelUnavailable, retried by the bench."""
    line = cannot_connect(socket.gaierror(-2, "Name or service not known"), "y.invalid")

    class Flaky:
        name = "openai/flaky"
        answers = [ModelReply(content="hi"), ModelUnavailable(line)]

        def query(self, request):
            answer = self.answers.pop(0)
            if isinstance(answer, Exception):
                raise answer
            return answer

    request = ModelRequest(messages=[{"role": "user", "content": "hi"}])
    watch = ReachWatch()
    answered = watch.watch(Flaky(), "openai/flaky")
    assert answered.query(request).content == "hi"
    with pytest.raises(ModelUnavailable) as failed:
        answered.query(request)
    assert not isinstance(failed.value, ModelUnreached) and watch.line("openai/flaky") is None
    never = watch.watch(type("Never", (Flaky,), {"answers": [ModelUnavailable(line)]})(), "openai/never")
    with pytest.raises(ModelUnreached):
        never.query(request)
    assert watch.line("openai/never") == line


def test_bench_offline_behind_a_proxy_out_of_reach_stops_in_one_line_and_resumes(tmp_path, monkeypatch):
    """The command: exit 1, the proxy and --resume named, no infra-failed trajectory and no traceback; the resume,
    once the model can be reached, finishes the run."""
    run = tmp_path / "run"
    port = closed_port()
    monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{port}")
    start = time.monotonic()
    result = CliRunner().invoke(app, ["bench", "--models", "openai/gpt-4o", "--workloads", WL, "--trajectories", "3",
                                      "--turns", "1", "--no-gpu", "--infra-retries", "2", "--run-dir", str(run)])
    text = " ".join(result.output.split())
    assert result.exit_code == 1, result.output
    assert f"cannot reach the proxy 127.0.0.1:{port} that $HTTPS_PROXY names, to call api.openai.com" in text
    assert f"ptxbench bench --resume --run-dir {run}" in text and time.monotonic() - start < 30
    assert "infra-failed]" not in result.output and "Traceback" not in result.output
    assert "attempt 1/6 failed" not in text
    monkeypatch.delenv("HTTPS_PROXY")
    with ScriptedServer(default=GOOD) as server:
        again = CliRunner().invoke(app, ["bench", "--resume", "--run-dir", str(run), "--api-base", server.base_url])
        assert again.exit_code == 0, again.output
        assert len(server.requests) == 3
    assert "0 infra-failed" in again.output and score_runs([run]).n_infra_failed == 0


def test_bench_says_once_that_a_model_is_out_of_reach_while_the_others_run(tmp_path, monkeypatch):
    """A local model and a hosted one on a machine offline: the local one's trajectories run and are listed; the hosted
    one is said once, as it happens (the others may run for hours), not once per trajectory."""
    port = closed_port()
    monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{port}")
    result = CliRunner().invoke(app, ["bench", "--models", "openai/gpt-4o,builtin/reference", "--workloads", WL,
                                      "--trajectories", "3", "--turns", "1", "--no-gpu", "--run-dir",
                                      str(tmp_path / "run")])
    assert result.exit_code == 1, result.output
    text = " ".join(result.output.split())
    assert text.count("Its trajectories wait for --resume; the other models run on") == 1, result.output
    assert text.count("builtin-reference__knowledge") == 3 and "infra-failed]" not in result.output
    assert "The bench stopped: 3 trajectories of openai/gpt-4o wait, not counted as infra-failed (the other 3 ran)" \
        in text, result.output
