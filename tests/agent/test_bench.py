"""The bench runner: matrix, per-provider limits, infra retry from the last good step, a CPU bench of two
scripted models on the local OpenAI-compatible server (--no-gpu), and resume after a kill."""
from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bench_fixtures import BAD, GOOD, WL, CountingModel
from openai_server import ScriptedServer
from ptxbench.agent.bench.runner import BenchError, run_bench
from ptxbench.agent.bench.matrix import BenchConfig, expand, provider
from ptxbench.agent.bench.scheduler import LimitedModel, ProviderGates
from ptxbench.agent.cli.main import app
from ptxbench.agent.loop.state import OptimizeConfig
from ptxbench.agent.models.base import ModelReply, ModelRequest
from ptxbench.agent.records.rundir import load_run
from ptxbench.agent.scoring import score_runs
from ptxbench.tools.results import EvalResult, Timing, TimingStat

ENV = {**os.environ, "OPENAI_API_KEY": "sk-local-scripted-server-0000"}


@pytest.fixture(autouse=True)
def _key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", ENV["OPENAI_API_KEY"])


def scripted(body: dict) -> dict:
    """scripted-bad fails to compile on its first turn and fixes it on the next; scripted-good always compiles."""
    earlier = sum(1 for m in body["messages"] if m["role"] == "assistant")
    return BAD if "bad" in body["model"] and earlier == 0 else GOOD


def test_matrix_expansion():
    cfg = BenchConfig(models=["openai/a", "builtin/tuner"], workloads=["w1", "w2"], prompts=["basic", "expert"], trajectories=3)
    configs = expand(cfg)
    assert len(configs) == 2 * 2 * 2 * 3
    assert len({c.trajectory_id() for c in configs}) == 24
    assert [c.index for c in configs[:8]] == [0] * 8 and configs[8].index == 1  # index-major: every cell starts early
    assert configs[0].turns == 8 and configs[0].target_speedup == 0 and configs[0].target() is None  # a bench runs every turn
    assert provider("openai/gpt-5") == "openai" and provider("hosted_vllm/Qwen/Qwen3") == "hosted_vllm"
    with pytest.raises(ValueError):
        expand(BenchConfig(models=["m", "m"], workloads=["w"]))


def test_the_model_timeout_reaches_every_trajectory_and_a_resume_may_change_it(tmp_path):
    """--model-timeout is a BenchConfig field every trajectory's config takes (both tracks), and one of the runtime
    knobs a resumed bench may change: a silent provider is resumed with a shorter wait, not a new run."""
    from ptxbench.agent.bench.runner import open_run
    from ptxbench.agent.records.rundir import write_manifest

    cfg = BenchConfig(models=["openai/a"], workloads=[WL], trajectories=2, model_timeout_s=30)
    assert {c.model_timeout_s for c in expand(cfg)} == {30}
    repair = BenchConfig(models=["builtin/reference"], workloads=["gemm_bf16_m8192_n7168_k5120"], track="repair",
                         model_timeout_s=45)
    assert {c.model_timeout_s for c in expand(repair)} == {45}
    write_manifest(tmp_path, {"command": "bench", "config": cfg.model_dump(mode="json"),
                              "trajectories": [c.trajectory_id() for c in expand(cfg)]})
    resumed = open_run(None, tmp_path, True, {"model_timeout_s": 5, "turns": 99})
    assert resumed.model_timeout_s == 5 and resumed.turns == cfg.turns  # the matrix itself stays the recorded one
    assert [c.trajectory_id() for c in expand(resumed)] == [c.trajectory_id() for c in expand(cfg)]


def test_a_model_timeout_given_through_optimize_still_holds(tmp_path):
    """Before --model-timeout a bench set the wait through its `optimize` fields (the way any OptimizeConfig field
    reaches every trajectory); the new field's default overwrote it with 600 s, in a new bench and in a recorded
    one resumed. The field, when set, wins; unset, the `optimize` entry (or OptimizeConfig's default) holds."""
    from ptxbench.agent.bench.runner import open_run
    from ptxbench.agent.records.rundir import write_manifest

    old = BenchConfig(models=["openai/a"], workloads=[WL], optimize={"model_timeout_s": 1800})
    assert {c.model_timeout_s for c in expand(old)} == {1800}
    repair = BenchConfig(models=["builtin/reference"], workloads=["gemm_bf16_m8192_n7168_k5120"], track="repair",
                         optimize={"model_timeout_s": 1800})
    assert {c.model_timeout_s for c in expand(repair)} == {1800}
    assert {c.model_timeout_s for c in expand(BenchConfig(models=["openai/a"], workloads=[WL]))} == \
        {OptimizeConfig.model_fields["model_timeout_s"].default}
    recorded = old.model_dump(mode="json")
    recorded.pop("model_timeout_s")  # a manifest written before the field existed
    write_manifest(tmp_path, {"command": "bench", "config": recorded, "trajectories": [c.trajectory_id() for c in expand(old)]})
    assert {c.model_timeout_s for c in expand(open_run(None, tmp_path, True, {}))} == {1800}
    assert {c.model_timeout_s for c in expand(open_run(None, tmp_path, True, {"model_timeout_s": 60}))} == {60}


def test_a_repair_matrix_with_repeated_ids_is_refused(tmp_path):
    """Two trajectories of one id would run into one folder and one checkpoint thread (turns counted twice): the
    repair track is checked like the optimize track, before the run folder is made."""
    repair = BenchConfig(models=["builtin/reference"], workloads=["gemm_bf16_m8192_n7168_k5120"], track="repair")
    assert len({c.trajectory_id() for c in expand(repair)}) == len(expand(repair))
    twice = repair.model_copy(update={"models": ["builtin/reference", "builtin/reference"]})
    with pytest.raises(ValueError, match="share an id"):
        expand(twice)
    with pytest.raises(BenchError, match="share an id"):
        run_bench(twice, tmp_path / "run", evaluator=FlakyEvaluator("none"))
    assert not (tmp_path / "run").exists()


def test_provider_limit_bounds_model_calls_in_flight():
    class Slow:
        name = "openai/slow"
        active = peak = 0
        lock = threading.Lock()

        def query(self, request):
            with self.lock:
                Slow.active += 1
                Slow.peak = max(Slow.peak, Slow.active)
            time.sleep(0.2)  # long enough for the other threads to queue up behind the gate
            with self.lock:
                Slow.active -= 1
            return ModelReply(content="x")

    gates = ProviderGates({"openai": 2})
    models = [LimitedModel(Slow(), gates.gate("openai/slow")) for _ in range(6)]
    threads = [threading.Thread(target=m.query, args=(ModelRequest(messages=[]),)) for m in models]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert Slow.peak == 2
    assert gates.gate("openai/other") is gates.gate("openai/slow")  # one gate per provider


def test_a_model_backing_off_leaves_its_providers_slot_to_others():
    """A rate-limited model waiting out its back-off (up to a minute, or a Retry-After) makes no call: it held its
    provider's slot all the while, so one rate-limited model stalled every other model of that provider."""
    from ptxbench.agent.models.litellm_model import LiteLLMModel

    def answer(body):
        limited = body["model"] == "limited" and sum(b["model"] == "limited" for b in server.requests) <= 2
        return {"status": 429, "retry_after": 1} if limited else {"content": "ok"}

    gates = ProviderGates({"openai": 1})
    with ScriptedServer(default=answer) as server:
        def model(name):
            return LimitedModel(LiteLLMModel(f"openai/{name}", api_base=server.base_url, max_attempts=3, retry_wait_s=0.01),
                                gates.gate("openai/any"))
        limited = threading.Thread(target=model("limited").query, args=(ModelRequest(messages=[]),))
        limited.start()
        assert server.wait_for_requests(1)
        start = time.monotonic()
        assert model("fine").query(ModelRequest(messages=[{"role": "user", "content": "hi"}])).content == "ok"
        took = time.monotonic() - start
        limited.join()
    assert took < 0.9, took  # answered during the other's first 1 s wait, not after its retries
    assert [b["model"] for b in server.requests].count("limited") == 3


class FlakyEvaluator:
    """Evaluation #2 fails as infrastructure (INFRA_ERROR, or an exception: a harness bug), unless how is "never"."""

    def __init__(self, how: str):
        self.n, self.how, self.lock = 0, how, threading.Lock()

    def evaluate(self, workload, source, options):
        with self.lock:
            self.n += 1
            n = self.n
        if n == 2 and self.how == "status":
            return EvalResult(workload=workload, status="INFRA_ERROR", message="GPU worker lost")
        if n == 2 and self.how != "never":
            raise ConnectionError("GPU pool went away")
        speedup = 0.5 + 0.1 * n
        stat = TimingStat(median_ms=1 / speedup, ci_low_ms=1 / speedup, ci_high_ms=1 / speedup, n=3)
        return EvalResult(workload=workload, status="PASSED", gpu_evaluated=True, timing=Timing(candidate=stat, speedup=speedup))

    def close(self):
        """Nothing to release: a stand-in holds no process or GPU."""


def test_the_outcome_carries_each_gpu_workers_start(tmp_path):
    """A local GPU run's outcome names where the evaluator's start went (the bench prints it; gpu_scaling.py keeps it)."""
    from types import SimpleNamespace

    started = [{"device": 0, "in_worker_s": 2.5, "ready_after_s": 6.1, "phases": {"context": 1.2, "warm_up": 0.9}}]
    evaluator = FlakyEvaluator("none")
    evaluator._pool = SimpleNamespace(startup=started)
    cfg = BenchConfig(models=["scripted/py"], workloads=[WL], trajectories=1, turns=1, no_gpu=True)
    out = run_bench(cfg, tmp_path / "run", evaluator=evaluator, model_factory=lambda c: CountingModel([]))
    assert out.worker_start == started
    assert json.loads((tmp_path / "run" / "evaluator_start.json").read_text())["workers"] == started
    assert run_bench(cfg, tmp_path / "run2", evaluator=FlakyEvaluator("none"),
                     model_factory=lambda c: CountingModel([])).worker_start == []
    assert not (tmp_path / "run2" / "evaluator_start.json").exists()


def test_a_local_gpu_run_writes_the_pools_record_of_gpu_holds(tmp_path):
    """The pool's timeline (tools/gpu/timeline.py) lands in the run folder with its summary, for gpu_scaling.py."""
    from types import SimpleNamespace

    from ptxbench.agent.records.rundir import read_gpu_timeline
    from ptxbench.tools.gpu.timeline import GpuTimeline

    timeline = GpuTimeline()
    timeline.add(0, "job", False, 0.0, 0.5, 2.5)
    timeline.add(1, "hold", True, 1.0, 1.0, 2.0)
    evaluator = FlakyEvaluator("none")
    evaluator._pool = SimpleNamespace(startup=[], timeline=timeline)
    cfg = BenchConfig(models=["scripted/py"], workloads=[WL], trajectories=1, turns=1, no_gpu=True)
    out = run_bench(cfg, tmp_path / "run", evaluator=evaluator, model_factory=lambda c: CountingModel([]))
    record = read_gpu_timeline(tmp_path / "run")
    assert len(record["entries"]) == 2 and record["summary"] == out.gpu_use
    assert out.gpu_use["devices"]["0"]["held_s"] == 2.0 and out.gpu_use["wait_s"]["job"]["total"] == 0.5


@pytest.mark.parametrize("how", ["status", "exception"])
def test_infra_failure_retried_from_last_good_step(tmp_path, how):
    calls: list[int] = []
    cfg = BenchConfig(models=["scripted/py"], workloads=[WL], trajectories=1, turns=3, no_gpu=True)
    out = run_bench(cfg, tmp_path / "run", evaluator=FlakyEvaluator(how), model_factory=lambda c: CountingModel(calls))
    (report,) = out.trajectories
    assert report.attempts == 2 and not report.infra_failed and report.stop_reason == "turn_limit"
    assert calls == [1, 2, 3]  # turn 2's model call is not repeated: only its evaluation is
    (traj,) = score_runs([tmp_path / "run"]).trajectories
    # Evaluations 1, 3, 4 passed (2 was the infra failure): speedups 0.6, 0.8, 0.9.
    assert [(t.turn, t.status, t.speedup) for t in traj.turns] == [(1, "PASSED", 0.6), (2, "PASSED", 0.8), (3, "PASSED", 0.9)]
    events = [e.type for e in load_run(tmp_path / "run")[0].events]
    assert "error" in events  # the failure stays on record


@pytest.mark.parametrize("cut", ["evaluate", "feedback"])
def test_a_crash_after_the_evaluation_is_recorded_is_retried_and_the_turn_keeps_its_evaluation(tmp_path, monkeypatch,
                                                                                                 cut):
    """A harness crash after turn 2's eval_result and before its turn_end (the evaluate step's checkpoint, the feedback
    step): the bench retries in-process from the step cut short, which takes the recorded evaluation from the log.
    The turn is scored by that evaluation, not INFRA_ERROR (the rule a --resume after a Ctrl-C there follows)."""
    from ptxbench.agent.records.trajectory import TrajectoryLog

    method = {"evaluate": "eval_result", "feedback": "turn_end"}[cut]
    logged, crashed = getattr(TrajectoryLog, method), []

    def crashing_once(self, turn, *args, **kwargs):
        if turn == 2 and not crashed and cut == "feedback":
            crashed.append(turn)
            raise RuntimeError("the worker process died")  # in the feedback step, before its turn_end
        event = logged(self, turn, *args, **kwargs)
        if turn == 2 and not crashed:
            crashed.append(turn)
            raise RuntimeError("the worker process died")  # in the evaluate step, once its result is in the log
        return event

    monkeypatch.setattr(TrajectoryLog, method, crashing_once)
    calls: list[int] = []
    cfg = BenchConfig(models=["scripted/py"], workloads=[WL], trajectories=1, turns=3, no_gpu=True)
    out = run_bench(cfg, tmp_path / "run", evaluator=FlakyEvaluator("never"), model_factory=lambda c: CountingModel(calls))
    (report,) = out.trajectories
    assert crashed and report.attempts == 2 and not report.infra_failed and report.stop_reason == "turn_limit"
    assert calls == [1, 2, 3]  # nothing the model was asked is asked again
    events = load_run(tmp_path / "run")[0].events
    assert [e.turn for e in events if e.type == "eval_result"] == [1, 2, 3]  # the retry reused turn 2's
    assert any(e.type == "error" and e.where == "graph" and e.turn == 2 for e in events)
    (traj,) = score_runs([tmp_path / "run"]).trajectories
    assert [(t.turn, t.status, t.speedup) for t in traj.turns] == [(1, "PASSED", 0.6), (2, "PASSED", 0.7),
                                                                   (3, "PASSED", 0.8)]
    assert not traj.infra_failed and not traj.unfinished


def test_infra_failure_that_persists_is_marked(tmp_path):
    class Down(FlakyEvaluator):
        def evaluate(self, workload, source, options):
            return EvalResult(workload=workload, status="INFRA_ERROR", message="no GPU")

    cfg = BenchConfig(models=["scripted/py"], workloads=[WL], trajectories=1, turns=2, no_gpu=True, infra_retries=1)
    out = run_bench(cfg, tmp_path / "run", evaluator=Down("status"), model_factory=lambda c: CountingModel([]))
    assert out.trajectories[0].infra_failed and out.trajectories[0].attempts == 2
    score = score_runs([tmp_path / "run"])
    assert score.n_infra_failed == 1 and score.model_workload[0].n_trajectories == 0
    with pytest.raises(BenchError):  # a run folder is not overwritten
        run_bench(cfg, tmp_path / "run", evaluator=Down("status"), model_factory=lambda c: CountingModel([]))


def test_a_provider_outage_is_asked_again_and_the_trajectory_scored_on_its_answers(tmp_path):
    """The server down past the model's retries on turns 1 and 2: an infra stop, so bench forks before the failed call and
    asks again (it was the model's error, the trajectory stopped and scored as such)."""
    script = [{"status": 503}, {"status": 503}, GOOD, {"status": 503}, {"status": 503}, GOOD]
    with ScriptedServer(script=script, default=GOOD) as server:
        cfg = BenchConfig(models=["openai/scripted"], workloads=[WL], trajectories=1, turns=2, no_gpu=True,
                          api_base=server.base_url, infra_retries=2, optimize={"retry_attempts": 2, "retry_wait_s": 0.01})
        out = run_bench(cfg, tmp_path / "run")
        assert len(server.requests) == 6
    (report,) = out.trajectories
    assert report.attempts == 3 and not report.infra_failed and report.stop_reason == "turn_limit"
    (traj,) = score_runs([tmp_path / "run"]).trajectories
    assert not traj.infra_failed and [t.turn for t in traj.scored_turns] == [1, 2]


def test_cpu_bench_two_scripted_models(tmp_path):
    run = tmp_path / "bench"
    with ScriptedServer(default=scripted) as server:
        result = CliRunner().invoke(app, [
            "bench", "--models", "openai/scripted-good,openai/scripted-bad", "--workloads", WL, "--trajectories", "2",
            "--turns", "2", "--prompts", "basic", "--run-dir", str(run), "--no-gpu", "--api-base", server.base_url])
        assert result.exit_code == 0, result.output
        assert len(server.requests) == 8  # 2 models x 2 trajectories x 2 turns
    from ptxbench.agent.report.tables import md_cell

    assert "| model | " + md_cell(WL) + " |" in result.output
    score = score_runs([run])
    good, bad = score.cell("openai/scripted-good", WL), score.cell("openai/scripted-bad", WL)
    assert good.n_trajectories == bad.n_trajectories == 2
    # --no-gpu: every clean kernel is COMPILED, never run, so nothing is correct; the compile fix is unverified.
    assert good.fast_p_turns["0"].value == 0.0 and good.n_compile_only == 4 and good.success_within["8"].value == 0.0
    assert bad.fast_p_turns["0"].value == 0.0 and bad.n_compile_only == 2 and bad.success_within["4"].value == 0.0
    assert bad.repair.fix_probability == {} and bad.repair.episodes_unverified == 2 and bad.repair.episodes_repaired == 0
    assert bad.repair.transitions == {"COMPILE_ERROR": {"COMPILED": 2}}
    # The report was written, and its score equals a fresh re-score of the run folder.
    saved = json.loads((run / "report" / "score.json").read_text())
    assert saved["model_workload"] == json.loads(score.model_dump_json())["model_workload"]
    assert len(list((run / "report" / "trajectories").glob("*.html"))) == 4
    # score --json and report from the CLI; re-evaluating the kernels (compile-only) gives the same verdicts.
    scored = CliRunner().invoke(app, ["score", str(run), "--json"])
    assert scored.exit_code == 0 and json.loads(scored.output)["n_trajectories"] == 4
    again = CliRunner().invoke(app, ["score", str(run), "--re-evaluate", "--no-gpu", "--out-run", str(tmp_path / "re")])
    assert again.exit_code == 0, again.output
    re_score = score_runs([tmp_path / "re"])
    assert [t.status for tr in re_score.trajectories for t in tr.turns] == [t.status for tr in score.trajectories for t in tr.turns]
    out = CliRunner().invoke(app, ["report", str(run), "--out", str(tmp_path / "rep")])
    assert out.exit_code == 0 and (tmp_path / "rep" / "index.html").exists()


def _bench_in_child(run: Path, base_url: str) -> None:
    cfg = BenchConfig(models=["openai/scripted"], workloads=[WL], trajectories=2, turns=2, no_gpu=True,
                      api_base=base_url, parallel=1)
    run_bench(cfg, run)


def test_resume_after_kill(tmp_path):
    import multiprocessing

    import litellm  # noqa: F401 - imported once here, so the forked bench below starts in a moment

    run = tmp_path / "bench"
    # parallel=1: trajectory 0 (requests 1, 2) finishes; trajectory 1 hangs in its first model call (request 3).
    with ScriptedServer(script=[GOOD, GOOD, {"hang": True}], default=GOOD) as server:
        child = multiprocessing.get_context("fork").Process(target=_bench_in_child, args=(run, server.base_url))
        child.start()
        try:
            assert server.wait_for_requests(3, timeout=90), f"the bench process ended early (exit code {child.exitcode})"
            time.sleep(0.3)
        finally:
            os.kill(child.pid, signal.SIGKILL)  # a kill at any point: here, with a model call in flight
            child.join(timeout=30)
        assert child.exitcode == -signal.SIGKILL
        first = {r.id: len(r.events) for r in load_run(run)}
        assert sorted(first) == sorted(c.trajectory_id() for c in expand(BenchConfig(
            models=["openai/scripted"], workloads=[WL], trajectories=2, turns=2)))
        out = run_bench(None, run, resume=True, overrides={"parallel": 1})
        # Only the unfinished trajectory called the model again: its turn 1 (the call in flight) and turn 2.
        assert len(server.requests) == 5
    assert [r.statuses for r in out.trajectories] == [["COMPILED", "COMPILED"], ["COMPILED", "COMPILED"]]
    records = {r.id: r for r in load_run(run)}
    done_id = out.trajectories[0].trajectory_id
    assert len(records[done_id].events) == first[done_id]  # the finished trajectory was not touched
    resumed = records[out.trajectories[1].trajectory_id]
    assert [e.turn for e in resumed.events if e.type == "model_call"] == [1, 2]
    assert sum(e.type == "trajectory_start" for e in resumed.events) == 1
    score = score_runs([run])
    assert score.n_trajectories == 2 and score.model_workload[0].n_compile_only == 4
    assert score.model_workload[0].fast_p_trajectories["0"].value == 0.0  # compile-only turns are not correct


def test_fork_before_infra_stop_on_a_small_graph():
    """The retry's LangGraph mechanics alone: the fork re-runs only the failed node, never the one before it."""
    from typing import TypedDict

    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import END, START, StateGraph

    from ptxbench.agent.bench.retry import FORKED, NOTHING_TO_RETRY, fork_before_infra_stop

    S = TypedDict("S", {"turn": int, "stop": dict, "result": str}, total=False)

    calls = {"query": 0, "evaluate": 0}

    def query(s):
        calls["query"] += 1
        return {"turn": s.get("turn", 0) + 1}

    def evaluate(s):
        calls["evaluate"] += 1
        return {"stop": {"reason": "infra_error"}} if calls["evaluate"] == 1 else {"result": "ok"}

    g = StateGraph(S)
    g.add_node("query", query)
    g.add_node("evaluate", evaluate)
    g.add_edge(START, "query")
    g.add_edge("query", "evaluate")
    g.add_edge("evaluate", END)
    graph = g.compile(checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "t"}}
    graph.invoke({}, config)
    assert fork_before_infra_stop(graph, "t") == FORKED
    graph.invoke(None, config)
    assert calls == {"query": 1, "evaluate": 2} and graph.get_state(config).values["result"] == "ok"
    assert fork_before_infra_stop(graph, "t") == ""  # finished without an infra stop: nothing to do

    # a thread that stopped on an infra error before any turn: no earlier step to go back to
    graph.update_state({"configurable": {"thread_id": "early"}}, {"stop": {"reason": "infra_error"}}, as_node="evaluate")
    assert fork_before_infra_stop(graph, "early") == NOTHING_TO_RETRY


def test_with_gpus_in_sight_the_workers_start_beside_the_first_turns(monkeypatch):
    """GPUs listed (nvidia-smi or CUDA_VISIBLE_DEVICES): the pool starts on its own thread; none in sight: the
    bench finds out before it makes a run folder (a clear BenchError on a machine without a GPU)."""
    from ptxbench.agent.bench.runner import make_evaluator
    from ptxbench.tools.evaluate import LocalEvaluator
    from ptxbench.tools.gpu.pool import NoGpuError

    started = []
    monkeypatch.setattr(LocalEvaluator, "start_in_background", lambda self: started.append(self))
    monkeypatch.setattr("ptxbench.tools.gpu.pool.visible_devices", lambda: [0, 1])
    ev = make_evaluator(BenchConfig(models=["scripted/py"], workloads=[WL]))
    assert started == [ev] and ev._pool is None  # nothing waited for here
    with pytest.raises(BenchError, match="more GPUs than the 2 in sight"):
        make_evaluator(BenchConfig(models=["scripted/py"], workloads=[WL], gpus=4))
    monkeypatch.setattr("ptxbench.tools.gpu.pool.visible_devices", lambda: None)
    monkeypatch.setattr(LocalEvaluator, "pool", property(lambda self: (_ for _ in ()).throw(NoGpuError("no GPU"))))
    with pytest.raises(BenchError, match="no GPU to evaluate on"):
        make_evaluator(BenchConfig(models=["scripted/py"], workloads=[WL]))
    assert len(started) == 1


def test_the_cli_starts_the_gpu_workers_before_the_agent_loop_imports(tmp_path):
    """`ptxbench bench` makes its evaluator (whose GPU workers start on their own thread) before LangGraph and the
    loop are imported: the first GPU job waits for the workers, so their start is moved ahead of the ~1 s import.
    Checked in a fresh interpreter, where nothing is imported yet."""
    import subprocess
    import sys

    probe = (
        "import sys\n"
        "import ptxbench.agent.bench.evaluators as ev\n"
        "def probe(config):\n"
        "    print('LOOP_LOADED=' + str(any(m in sys.modules for m in ('langgraph', 'ptxbench.agent.loop.optimize'))))\n"
        "    raise ev.BenchError('probe stop')\n"
        "ev.make_evaluator = probe\n"
        "from ptxbench.agent.cli.main import app\n"
        f"sys.argv = ['ptxbench', 'bench', '--models', 'builtin/reference', '--workloads', {WL!r}, '--run-dir', "
        f"{str(tmp_path / 'run')!r}, '--no-report']\n"
        "app()\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert "LOOP_LOADED=False" in out.stdout, out.stdout + out.stderr
    assert "probe stop" in out.stdout + out.stderr and out.returncode != 0  # said as the bench's own error
    assert not (tmp_path / "run").exists()


def test_an_evaluator_handed_over_is_closed_when_the_run_cannot_begin(tmp_path):
    class Closing(FlakyEvaluator):
        closed = 0

        def close(self):
            Closing.closed += 1

    cfg = BenchConfig(models=["scripted/py"], workloads=[WL], trajectories=1, turns=1, no_gpu=True)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "manifest.json").write_text(json.dumps({"command": "bench"}))
    with pytest.raises(BenchError, match="already holds a run"):
        run_bench(cfg, tmp_path / "run", evaluator=Closing("status"), own_evaluator=True,
                  model_factory=lambda c: CountingModel([]))
    assert Closing.closed == 1
    with pytest.raises(BenchError):  # the caller's own evaluator stays the caller's
        run_bench(cfg, tmp_path / "run", evaluator=Closing("status"), model_factory=lambda c: CountingModel([]))
    assert Closing.closed == 1


def test_optimize_starts_the_workers_beside_its_first_model_call(monkeypatch):
    from ptxbench.agent.loop.optimize import default_evaluator
    from ptxbench.agent.loop.state import OptimizeConfig
    from ptxbench.tools.evaluate import LocalEvaluator

    started = []
    monkeypatch.setattr(LocalEvaluator, "start_in_background", lambda self: started.append(self))
    monkeypatch.setattr("ptxbench.tools.gpu.pool.visible_devices", lambda: [0])
    ev = default_evaluator(OptimizeConfig(workload=WL))
    assert started == [ev]
    default_evaluator(OptimizeConfig(workload=WL, no_gpu=True))  # compile-only: no workers at all
    monkeypatch.setattr("ptxbench.tools.gpu.pool.visible_devices", lambda: None)
    default_evaluator(OptimizeConfig(workload=WL))  # no GPU in sight: the first evaluation starts them (or says why not)
    assert started == [ev]


def test_re_evaluation_reads_and_writes_kernels_only_inside_their_trajectory_folders(tmp_path):
    """A shared run whose trajectory folder is a link into the run and whose kernel_file climbs with ../ to a file of
    the run: read there, the kernel would have been copied to the same ../ below the new run, outside it."""

    from trajectory_builder import TrajectoryBuilder

    from ptxbench.agent.bench.reevaluate import reevaluate_run
    from ptxbench.agent.records.rundir import DamagedRecord

    shared, out, victim = tmp_path / "shared", tmp_path / "out", tmp_path / "payload.txt"
    victim.write_text("the user's own file\n")
    (shared / "payload.txt").parent.mkdir(parents=True)
    (shared / "payload.txt").write_text("// the run's bytes\n")
    TrajectoryBuilder(shared, "deep", "m/a", WL).turn(1, "COMPILE_ERROR").stop()
    (shared / "trajectories" / "a").mkdir()
    (shared / "trajectories" / "deep").rename(shared / "trajectories" / "a" / "b")
    os.symlink("a/b", shared / "trajectories" / "t0")  # shared/trajectories/a/b/../../../ is shared/
    log = shared / "trajectories" / "a" / "b" / "trajectory.jsonl"
    log.write_text(log.read_text().replace('"kernel_file":"kernels/turn_01.ptx"', '"kernel_file":"../../../payload.txt"'))
    assert "../../../payload.txt" in log.read_text()

    class Unused:
        def evaluate(self, workload, source, options):
            return EvalResult(workload=workload, status="COMPILED")

    with pytest.raises(DamagedRecord, match="outside|not a readable file inside"):
        reevaluate_run(shared, out, no_gpu=True, evaluator=Unused())
    assert victim.read_text() == "the user's own file\n" and not out.exists()


def test_a_run_folder_takes_one_bench_at_a_time(tmp_path):
    """A second bench on a folder in use (a --resume while the first still runs) would run its unfinished trajectories
    again beside the first: model calls paid twice, the two's events interleaved in one log. It is refused at once."""
    import os

    from ptxbench.agent.bench.runner import hold_run

    run, calls = tmp_path / "run", []
    cfg = BenchConfig(models=["scripted/py"], workloads=[WL], trajectories=1, turns=1, no_gpu=True)
    run.mkdir()
    other = hold_run(run)  # another process's bench, as far as the lock can tell (a new open file description)
    try:
        with pytest.raises(BenchError, match="in use by another bench"):
            run_bench(cfg, run, evaluator=FlakyEvaluator("none"), model_factory=lambda c: CountingModel(calls))
        assert not (run / "manifest.json").exists()
    finally:
        os.close(other)
    run_bench(cfg, run, evaluator=FlakyEvaluator("none"), model_factory=lambda c: CountingModel(calls))
    other = hold_run(run)  # released when the bench ended
    try:
        with pytest.raises(BenchError, match="in use by another bench"):
            run_bench(None, run, resume=True, evaluator=FlakyEvaluator("none"), model_factory=lambda c: CountingModel(calls))
    finally:
        os.close(other)
    assert calls == [1]
    assert run_bench(None, run, resume=True, evaluator=FlakyEvaluator("none"),
                     model_factory=lambda c: CountingModel(calls)).trajectories[0].statuses == ["PASSED"]
    assert calls == [1]


def test_re_evaluation_retries_a_harness_failure_and_never_blames_it_on_the_model(tmp_path):
    """An INFRA_ERROR is no verdict on a kernel: it is evaluated again (not reused for the kernel's copies in other turns
    and trajectories), and one that stays is recorded as the loop records it, so its trajectory is left out of the
    trajectory scores rather than counted as a model that never got a kernel right."""
    from ptxbench.agent.bench.reevaluate import INFRA_ATTEMPTS, reevaluate_run

    class Ok:
        def __init__(self, down: int = 0):
            self.n, self.down = 0, down

        def evaluate(self, workload, source, options):
            self.n += 1
            if self.n <= self.down:
                return EvalResult(workload=workload, status="INFRA_ERROR", message="GPU worker lost")
            return EvalResult(workload=workload, status="COMPILED")

    cfg = BenchConfig(models=["scripted/py"], workloads=[WL], trajectories=2, turns=2, no_gpu=True)
    run_bench(cfg, tmp_path / "run", evaluator=Ok(), model_factory=lambda c: CountingModel([]))  # one kernel text, 4 turns
    once = Ok(down=1)
    reevaluate_run(tmp_path / "run", tmp_path / "re", no_gpu=True, evaluator=once)
    score = score_runs([tmp_path / "re"])
    assert once.n == 2 and [t.status for tr in score.trajectories for t in tr.turns] == ["COMPILED"] * 4
    assert score.n_infra_failed == 0 and score.model_workload[0].n_trajectories == 2
    down = Ok(down=10 ** 6)
    reevaluate_run(tmp_path / "run", tmp_path / "down", no_gpu=True, evaluator=down)
    score = score_runs([tmp_path / "down"])
    assert down.n == 4 * INFRA_ATTEMPTS  # every copy tried afresh
    assert score.n_infra_failed == 2 and score.model_workload[0].n_trajectories == 0 and score.n_infra_turns == 4


def test_a_progress_callback_that_raises_does_not_stop_the_bench(tmp_path, capsys):
    """The CLI prints a line per finished trajectory; one that cannot be printed (a closed pipe) must not end the run
    with the trajectories not yet started never run."""
    def on_done(report):
        raise BrokenPipeError(32, "Broken pipe")

    cfg = BenchConfig(models=["scripted/py"], workloads=[WL], trajectories=3, turns=1, no_gpu=True, parallel=1)
    out = run_bench(cfg, tmp_path / "run", evaluator=FlakyEvaluator("status"), model_factory=lambda c: CountingModel([]),
                    on_done=on_done)
    assert len(out.trajectories) == 3 and len(load_run(tmp_path / "run")) == 3
    assert "on_done failed: BrokenPipeError" in capsys.readouterr().err


def test_ctrl_c_stops_the_trajectories_in_flight_at_their_next_model_call(tmp_path):
    """Ctrl-C cancels the scheduler; the trajectories in flight ran on to their last turn before the bench ended (every
    model call paid). Now each ends at its next model call, and --resume goes on from there: each call made once."""
    calls: list[int] = []
    sent = threading.Event()

    class Interrupting(CountingModel):
        def query(self, request):
            # once, at the first call to see 3 made: two threads checking `== 3` could both see 2, then 4, and never send
            if len(calls) >= 3 and not sent.is_set():
                sent.set()
                # Ctrl-C, with this call in flight, as the kernel may deliver it: to this trajectory thread, not the
                # main one (blocked in the event loop's select, it ran the handler only once a trajectory had ended)
                signal.pthread_kill(threading.get_ident(), signal.SIGINT)
            time.sleep(0.3)  # a model's latency: a trajectory lasts seconds, the handler must not wait for its end
            return super().query(request)

    cfg = BenchConfig(models=["scripted/py"], workloads=[WL], trajectories=2, turns=10, no_gpu=True, parallel=2)
    evaluator = FlakyEvaluator("status")
    evaluator.n = 10  # no infra failure here
    # asyncio.run turns Ctrl-C into a cancel only over Python's default handler; a test run started in the background
    # by a non-interactive shell inherits SIGINT ignored (Python keeps it so), and the interrupt never came
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            run_bench(cfg, tmp_path / "run", evaluator=evaluator, model_factory=lambda c: Interrupting(calls))
    finally:
        signal.signal(signal.SIGINT, previous)
    assert sent.is_set() and len(calls) <= 6  # the calls in flight finished; none started after
    run_bench(None, tmp_path / "run", resume=True, evaluator=evaluator, model_factory=lambda c: CountingModel(calls))
    assert len(calls) == 20
    for record in load_run(tmp_path / "run"):
        assert [e.turn for e in record.events if e.type == "model_call"] == list(range(1, 11))
    score = score_runs([tmp_path / "run"])
    assert score.n_infra_failed == 0 and [len(t.scored_turns) for t in score.trajectories] == [10, 10]


def test_re_evaluation_goes_on_past_an_evaluation_that_raises(tmp_path):
    """One recorded kernel whose evaluation raises ended the whole re-evaluation, its new run half written (and a second
    try refused: 'already holds trajectories'). It is a harness failure of that kernel's evaluation: tried again, and
    when it stays, that trajectory is left out as infra; every other trajectory is re-evaluated."""
    from ptxbench.agent.bench.reevaluate import reevaluate_run

    class Raises:
        def __init__(self, times: int, alike: bool = True):
            self.n, self.times, self.alike = 0, times, alike

        def evaluate(self, workload, source, options):
            self.n += 1
            if self.n <= self.times:
                raise ValueError("the evaluator cannot handle this kernel" + ("" if self.alike else f" ({self.n})"))
            return EvalResult(workload=workload, status="COMPILED")

    cfg = BenchConfig(models=["scripted/py"], workloads=[WL], trajectories=3, turns=1, no_gpu=True)
    # recorded without an infra failure: a retried turn (two evaluations) would rescue whichever trajectory it fell on
    run_bench(cfg, tmp_path / "run", evaluator=Raises(0), model_factory=lambda c: CountingModel([]))
    reevaluate_run(tmp_path / "run", tmp_path / "once", no_gpu=True, evaluator=Raises(1))
    assert [t.status for tr in score_runs([tmp_path / "once"]).trajectories for t in tr.turns] == ["COMPILED"] * 3
    reevaluate_run(tmp_path / "run", tmp_path / "stays", no_gpu=True, evaluator=Raises(3, alike=False))
    score = score_runs([tmp_path / "stays"])
    assert len(score.trajectories) == 3 and score.n_infra_failed == 1 and score.model_workload[0].n_trajectories == 2
    # The same crash on every attempt at one kernel: the kernel's doing, scored as the model's failed turn (left out
    # as infra, a kernel that crashes the harness escaped its score), as scoring reads a crash a live run repeats.
    reevaluate_run(tmp_path / "run", tmp_path / "crash", no_gpu=True, evaluator=Raises(3))
    score = score_runs([tmp_path / "crash"])
    assert score.n_infra_failed == 0 and score.model_workload[0].n_trajectories == 3
    crashed = [t for tr in score.trajectories for t in tr.turns if t.reproduced]
    assert len(crashed) == 1 and not crashed[0].correct


def test_a_bench_with_infra_failed_trajectories_says_how_to_retry_them(tmp_path):
    run = tmp_path / "bench"
    with ScriptedServer(default={"status": 401, "message": "key revoked"}) as server:
        result = CliRunner().invoke(app, ["bench", "--models", "openai/revoked", "--workloads", WL, "--trajectories", "1",
                                          "--turns", "1", "--run-dir", str(run), "--no-gpu", "--api-base", server.base_url,
                                          "--infra-retries", "0", "--no-report"])
    assert result.exit_code == 0 and "Traceback" not in result.output, result.output
    assert "1 infra-failed" in result.output and f"ptxbench bench --resume --run-dir {run}" in result.output


def test_resume_retries_an_infra_failed_trajectory_even_with_no_retries_left(tmp_path):
    """--resume's first attempt at a trajectory that stopped on an infra failure returned that stop unchanged (only
    later attempts forked it): with --infra-retries 0 no resume could ever finish it."""
    cfg = BenchConfig(models=["openai/scripted"], workloads=[WL], trajectories=1, turns=1, no_gpu=True, infra_retries=0)
    with ScriptedServer(default={"status": 401}) as server:
        cfg = cfg.model_copy(update={"api_base": server.base_url})
        first = run_bench(cfg, tmp_path / "run", evaluator=FlakyEvaluator("none"))
        assert first.trajectories[0].infra_failed
        server.default = GOOD  # the key is fixed
        again = run_bench(None, tmp_path / "run", resume=True, evaluator=FlakyEvaluator("none"))
    (report,) = again.trajectories
    assert not report.infra_failed and report.stop_reason == "turn_limit" and len(report.statuses) == 1


def test_a_stopping_bench_does_not_wait_out_a_back_off():
    """Ctrl-C while a model waits out its back-off: the trajectory stops there (resumable), not after every remaining
    retry (minutes under a long Retry-After), and no further call is made."""
    from ptxbench.agent.bench.scheduler import BenchInterrupted
    from ptxbench.agent.models.litellm_model import LiteLLMModel

    stopping, raised = threading.Event(), []
    with ScriptedServer(default={"status": 503}) as server:
        model = LimitedModel(LiteLLMModel("openai/down", api_base=server.base_url, max_attempts=6, retry_wait_s=30),
                             ProviderGates().gate("openai/down"), stopping)

        def ask():
            try:
                model.query(ModelRequest(messages=[{"role": "user", "content": "hi"}]))
            except Exception as exc:  # noqa: BLE001 - what the trajectory would see
                raised.append(exc)

        thread = threading.Thread(target=ask, daemon=True)
        thread.start()
        assert server.wait_for_requests(1)
        stopped = time.monotonic()
        stopping.set()
        thread.join(10)
        assert not thread.is_alive() and time.monotonic() - stopped < 5
    assert len(server.requests) == 1 and len(raised) == 1 and isinstance(raised[0], BenchInterrupted)


def test_a_ray_cluster_that_cannot_be_used_is_one_line_and_exit_2(tmp_path):
    """--backend ray with a cluster address nobody answers at, or a cluster without the GPUs asked for: the bench
    says so in one line (exit 2, no traceback), makes no run folder and leaves no Ray instance behind."""
    ray = pytest.importorskip("ray", reason="the 'bench' extra (ray) is not installed")
    if ray.is_initialized():  # one another test left up: this test checks that the bench starts and leaves none
        ray.shutdown()
    base = ["bench", "--models", "builtin/reference", "--workloads", WL, "--trajectories", "1", "--turns", "1",
            "--backend", "ray"]
    for extra, said in ((["--no-gpu", "--ray-address", "127.0.0.1:1"], "at 127.0.0.1:1"),
                        ([], "0 GPU")):  # a local Ray instance on this machine, which shows no GPU
        if extra == [] and os.environ.get("CUDA_VISIBLE_DEVICES", "") not in ("", "-1"):
            continue
        run = tmp_path / f"run{len(extra)}"
        result = CliRunner().invoke(app, [*base, *extra, "--run-dir", str(run)])
        assert result.exit_code == 2, result.output
        assert "no usable Ray cluster" in result.output and said in result.output, result.output
        assert "Traceback" not in result.output and not isinstance(result.exception, (RuntimeError, ConnectionError))
        assert not run.exists() and not ray.is_initialized()


def test_builtin_unchanged_on_the_optimize_track_is_refused_before_the_run(tmp_path):
    """builtin/unchanged resubmits the kernel a trajectory starts from; an optimize-track trajectory starts from none,
    so each would fail every attempt as 'infra' and ask for a --resume that can never help: refused up front."""
    cfg = BenchConfig(models=["builtin/reference", "builtin/unchanged"], workloads=[WL], trajectories=1, turns=1,
                      no_gpu=True)
    with pytest.raises(BenchError, match="--track repair"):
        run_bench(cfg, tmp_path / "run")
    assert not (tmp_path / "run").exists()
    result = CliRunner().invoke(app, ["bench", "--models", "builtin/unchanged", "--workloads", WL, "--trajectories", "1",
                                      "--turns", "1", "--no-gpu", "--run-dir", str(tmp_path / "cli")])
    assert result.exit_code == 2 and "--track repair" in result.output, result.output


def test_a_free_slot_goes_to_the_model_with_the_fewest_trajectories_running():
    """The matrix lists a model's cells together: with a global limit taken in list order, 2 slots ran model a's
    four trajectories (slow ones) before model b's first started. Slots now go to the model with the fewest running
    (then the fewest started); results stay in job order and a job's exception is its result."""
    import asyncio

    from ptxbench.agent.bench.scheduler import run_all

    starts, lock = [], threading.Lock()

    def work(job):
        model, seconds, fails = job
        with lock:
            starts.append(model)
        time.sleep(seconds)
        if fails:
            raise RuntimeError(f"{model} failed")
        return model

    jobs = [("a", 0.2, False)] * 3 + [("a", 0.2, True)] + [("b", 0.02, False)] * 2
    results = asyncio.run(run_all(jobs, work, parallel=2, share=lambda job: job[0]))
    assert starts[:2] == ["a", "b"] and starts[2] == "b", starts  # b's second takes b's freed slot, not a's queue
    assert results[:3] == ["a"] * 3 and isinstance(results[3], RuntimeError) and results[4:] == ["b", "b"]

    starts.clear()  # one slot: the models take turns
    asyncio.run(run_all([("a", 0, False)] * 3 + [("b", 0, False)] * 3, work, parallel=1, share=lambda job: job[0]))
    assert starts == ["a", "b", "a", "b", "a", "b"]
    starts.clear()  # no share given: list order, as before
    asyncio.run(run_all([("a", 0, False)] * 2 + [("b", 0, False)] * 2, work, parallel=1))
    assert starts == ["a", "a", "b", "b"]


def test_the_bench_interleaves_its_models(tmp_path):
    calls = []

    class Named(CountingModel):
        def __init__(self, name):
            super().__init__(calls)
            self.name = name

        def query(self, request):
            calls.append(self.name)
            return ModelReply(content=GOOD["content"], usage={"total_tokens": 10})

    config = BenchConfig(models=["scripted/a", "scripted/b"], workloads=[WL], prompts=["basic", "knowledge"],
                         trajectories=1, turns=1, parallel=1, no_gpu=True)
    run_bench(config, tmp_path / "run", evaluator=FlakyEvaluator("none"), model_factory=lambda cfg: Named(cfg.model))
    assert calls == ["scripted/a", "scripted/b", "scripted/a", "scripted/b"]  # was a, a, b, b


def test_a_checkpoint_file_left_in_a_new_bench_folder_is_refused(tmp_path):
    """A checkpoints.sqlite with no run beside it (another tool's, a half-deleted run): each trajectory met it, garbage
    infra-failed every one ("file is not a database") and the bench exited 0. Now the bench refuses the folder."""
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "checkpoints.sqlite").write_bytes(b"not a database")
    out = CliRunner().invoke(app, ["bench", "--models", "builtin/tuner", "--workloads", WL, "--trajectories", "1",
                                   "--turns", "1", "--no-gpu", "--run-dir", str(tmp_path / "run"), "--no-report"])
    assert out.exit_code != 0 and "holds a checkpoints.sqlite of no run" in out.output, out.output
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["checkpoints.sqlite"]


def test_bench_resume_of_an_optimize_run_names_it(tmp_path):
    """`bench --resume` on an optimize run said 'no bench manifest.json', though the folder has a manifest."""
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "manifest.json").write_text(json.dumps({"command": "optimize", "config": {}}))
    with pytest.raises(BenchError, match=r"holds an optimize run, not a bench run: continue it with ptxbench optimize "
                                         r"--resume"):
        run_bench(None, tmp_path / "run", resume=True)


def test_the_key_variable_is_registered_before_the_gpu_workers_start(monkeypatch):
    """The workers' fork server erases the variables registered when it starts (tools/gpu/keyless.py); the bench and
    `ptxbench optimize` start it (start_in_background) before a trajectory's model registers its --api-key-env, so a
    key under a name that looks like nothing stayed in the memory of every process that runs candidates."""
    from ptxbench.agent.bench.evaluators import make_evaluator
    from ptxbench.agent.loop.optimize import default_evaluator
    from ptxbench.tools import redact
    from ptxbench.tools.evaluate import LocalEvaluator

    seen = []
    monkeypatch.setattr(redact, "_REGISTERED", set())
    monkeypatch.delenv(redact.REGISTERED_ENV, raising=False)
    monkeypatch.setattr(LocalEvaluator, "start_in_background",
                        lambda self: seen.append(os.environ.get(redact.REGISTERED_ENV, "")))
    monkeypatch.setattr("ptxbench.tools.gpu.pool.visible_devices", lambda: [0])
    make_evaluator(BenchConfig(models=["scripted/py"], workloads=[WL], optimize={"api_key_env": "LLM_ENDPOINT_CRED"}))
    default_evaluator(OptimizeConfig(workload=WL, model="openai/x", api_key_env="GATEWAY_PASS"))
    assert seen == ["LLM_ENDPOINT_CRED", "GATEWAY_PASS,LLM_ENDPOINT_CRED"]


def test_storage_that_gives_out_stops_the_bench_and_a_resume_finishes_it(tmp_path, monkeypatch):
    """A full disk mid-run: every trajectory's retries met it again (each an infra failure, the cause said only in
    its line) while the model replies made meanwhile went unrecorded. The bench now stops at the first such failure,
    as on Ctrl-C (StorageGaveOut, one line naming --resume); once there is room the resume finishes the matrix."""
    import errno

    from ptxbench.agent.bench.evaluators import StorageGaveOut
    from ptxbench.agent.records import rundir

    append, written, full = rundir.TrajectoryWriter.append, [0], threading.Event()
    lock = threading.Lock()

    def filling(self, event):
        with lock:
            written[0] += 1
            if written[0] > 10 and full.is_set():
                raise OSError(errno.ENOSPC, "No space left on device", str(self.path))
        return append(self, event)

    monkeypatch.setattr(rundir.TrajectoryWriter, "append", filling)
    calls: list[int] = []
    cfg = BenchConfig(models=["scripted/py"], workloads=[WL], trajectories=8, turns=3, no_gpu=True, parallel=2)
    full.set()
    with pytest.raises(StorageGaveOut) as stopped:
        run_bench(cfg, tmp_path / "run", evaluator=FlakyEvaluator("none"), model_factory=lambda c: CountingModel(calls))
    assert "No space left on device" in str(stopped.value) and "--resume --run-dir" in str(stopped.value)
    assert len(calls) <= 6, calls  # not 8 trajectories x 3 attempts of model calls into a full disk
    assert len(trajectory_folders_of(tmp_path / "run")) <= 3  # the rest never started
    full.clear()
    out = run_bench(None, tmp_path / "run", resume=True, evaluator=FlakyEvaluator("none"),
                    model_factory=lambda c: CountingModel(calls))
    assert len(out.trajectories) == 8 and not any(r.infra_failed for r in out.trajectories)
    assert all(r.stop_reason == "turn_limit" for r in out.trajectories)


def writers_refused_after_one(monkeypatch, err: int, text: str):
    """The first trajectory's folder made, every later one refused with OSError(err): (the real __init__, folders)."""
    from ptxbench.agent.records import rundir

    make, made = rundir.TrajectoryWriter.__init__, []

    def refused_after_one(self, folder):
        made.append(folder)
        if len(made) > 1:
            raise OSError(err, text, str(folder))
        make(self, folder)

    monkeypatch.setattr(rundir.TrajectoryWriter, "__init__", refused_after_one)
    return make, made


def test_storage_that_gives_out_as_a_trajectory_begins_stops_the_bench(tmp_path, monkeypatch):
    """A file system gone read-only (or full) as a trajectory's folder was made: that failure came before the runner
    looked for storage giving out, so each trajectory left was reported infra-failed at once, the bench exited 0, and
    the cause was said only in their lines. It stops the bench as a failed write mid-trajectory does."""
    import errno

    from ptxbench.agent.bench.evaluators import StorageGaveOut
    from ptxbench.agent.records import rundir

    make, made = writers_refused_after_one(monkeypatch, errno.EROFS, "Read-only file system")
    calls: list[int] = []
    cfg = BenchConfig(models=["scripted/py"], workloads=[WL], trajectories=4, turns=1, no_gpu=True, parallel=1)
    with pytest.raises(StorageGaveOut, match="Read-only file system"):
        run_bench(cfg, tmp_path / "run", evaluator=FlakyEvaluator("none"), model_factory=lambda c: CountingModel(calls))
    assert len(made) == 2  # the trajectories after it never began
    monkeypatch.setattr(rundir.TrajectoryWriter, "__init__", make)
    out = run_bench(None, tmp_path / "run", resume=True, evaluator=FlakyEvaluator("none"),
                    model_factory=lambda c: CountingModel(calls))
    assert len(out.trajectories) == 4 and all(r.stop_reason == "turn_limit" for r in out.trajectories)


def test_a_trajectory_folder_this_user_may_not_write_stops_the_bench(tmp_path, monkeypatch):
    """A shared run folder resumed by a teammate who may not write its trajectories' folders (theirs, not this user's):
    each write's PermissionError was a harness failure, so every trajectory was retried and marked infra-failed and the
    bench exited 0. It stops the bench in one line naming the folder, as a full disk does."""
    import errno

    from ptxbench.agent.bench.evaluators import StorageGaveOut
    from ptxbench.agent.records import rundir

    def refused(self, event):
        raise PermissionError(errno.EACCES, "Permission denied", str(self.path))

    monkeypatch.setattr(rundir.TrajectoryWriter, "append", refused)
    calls: list[int] = []
    run = tmp_path / "run"
    cfg = BenchConfig(models=["scripted/py"], workloads=[WL], trajectories=4, turns=1, no_gpu=True, parallel=1)
    done = []
    with pytest.raises(StorageGaveOut) as stopped:
        run_bench(cfg, run, evaluator=FlakyEvaluator("none"), model_factory=lambda c: CountingModel(calls),
                  on_done=done.append)
    assert "Permission denied" in str(stopped.value) and str(run / "trajectories") in str(stopped.value)
    assert "--resume --run-dir" in str(stopped.value)
    assert not any(r.infra_failed for r in done)  # none reported infra-failed: the stop says why


def test_a_permission_refused_outside_the_run_folder_is_no_storage_stop():
    """Only the run folder's own files count: a tool's file elsewhere refused keeps the trajectory's infra failure."""
    import errno

    from ptxbench.agent.records.storage import storage_failure

    inside = PermissionError(errno.EACCES, "Permission denied", "/runs/r/trajectories/t/trajectory.jsonl")
    assert "Permission denied (/runs/r/trajectories/t/trajectory.jsonl)" in storage_failure(inside, "/runs/r")
    assert storage_failure(PermissionError(errno.EPERM, "Operation not permitted", "/runs/r/x"), "/runs/r")
    assert storage_failure(PermissionError(errno.EACCES, "Permission denied", "/home/u/.cache/x"), "/runs/r") is None
    assert storage_failure(PermissionError(errno.EACCES, "Permission denied", "/runs/rr/x"), "/runs/r") is None
    assert storage_failure(inside) is None  # no run folder named: not said as the run's


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through a folder's permissions")
def test_a_resume_into_a_read_only_trajectories_folder_stops_the_bench(tmp_path, monkeypatch):
    """As above with a real folder made read-only (chmod) between a stopped run and its resume."""
    import errno

    from ptxbench.agent.bench.evaluators import StorageGaveOut
    from ptxbench.agent.records import rundir

    make, made = writers_refused_after_one(monkeypatch, errno.ENOSPC, "No space left on device")
    run = tmp_path / "run"
    cfg = BenchConfig(models=["scripted/py"], workloads=[WL], trajectories=3, turns=1, no_gpu=True, parallel=1)
    with pytest.raises(StorageGaveOut):
        run_bench(cfg, run, evaluator=FlakyEvaluator("none"), model_factory=lambda c: CountingModel([]))
    monkeypatch.setattr(rundir.TrajectoryWriter, "__init__", make)
    (run / "trajectories").chmod(0o555)
    try:
        done = []
        with pytest.raises(StorageGaveOut, match="Permission denied") as stopped:
            run_bench(None, run, resume=True, evaluator=FlakyEvaluator("none"),
                      model_factory=lambda c: CountingModel([]), on_done=done.append)
        assert str(run / "trajectories") in str(stopped.value)
        assert not any(r.infra_failed for r in done)
    finally:
        (run / "trajectories").chmod(0o755)


def trajectory_folders_of(run: Path) -> list[Path]:
    return sorted(p for p in (run / "trajectories").iterdir() if p.is_dir())


def test_the_cli_says_storage_that_gave_out_in_one_line(tmp_path, monkeypatch):
    import errno

    from ptxbench.agent.records import rundir

    def full(self, event):
        raise OSError(errno.ENOSPC, "No space left on device", str(self.path))

    monkeypatch.setattr(rundir.TrajectoryWriter, "append", full)
    run = tmp_path / "run"
    result = CliRunner().invoke(app, ["bench", "--models", "builtin/reference", "--workloads", WL, "--trajectories",
                                      "2", "--turns", "1", "--no-gpu", "--run-dir", str(run)])
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output and "No space left on device" in result.output
    assert f"ptxbench bench --resume --run-dir {run}" in result.output.replace("\n", "")


def test_a_finished_runs_resume_does_not_ask_for_a_server_it_no_longer_calls(tmp_path):
    """A --resume of a finished bench only writes its report; it probed the recorded models' server first and was
    refused once that server was gone. The models with a trajectory left are still probed."""
    run = tmp_path / "bench"
    with ScriptedServer(default=scripted) as server:
        argv = ["bench", "--models", "openai/scripted", "--workloads", WL, "--trajectories", "1", "--turns", "1",
                "--run-dir", str(run), "--no-gpu", "--api-base", server.base_url]
        assert CliRunner().invoke(app, argv).exit_code == 0
    # the server is gone now
    again = CliRunner().invoke(app, ["bench", "--resume", "--run-dir", str(run)])
    assert again.exit_code == 0, again.output
    assert (run / "report" / "index.html").exists()
    log = next((run / "trajectories").glob("*/trajectory.jsonl"))
    log.write_text("\n".join(log.read_text().splitlines()[:-1]) + "\n")  # its stop gone: unfinished, the model needed
    refused = CliRunner().invoke(app, ["bench", "--resume", "--run-dir", str(run)])
    assert refused.exit_code == 1 and "error: cannot reach http://127.0.0.1:" in refused.output, refused.output
