"""The Ray backend on the CPU: a local Ray instance declaring one (fake) GPU; evaluator actors ask for
num_gpus=1, evaluations run compile-only (--no-gpu). Model calls stay in the driver."""
from __future__ import annotations

import os
import time

import pytest

ray = pytest.importorskip("ray", reason="the 'bench' extra (ray) is not installed")

from ptxbench.agent.bench.runner import run_bench  # noqa: E402
from ptxbench.agent.bench.matrix import BenchConfig  # noqa: E402
from ptxbench.tools.ray_evaluator import RayEvaluator  # noqa: E402
from ptxbench.agent.scoring import score_runs  # noqa: E402
from ptxbench.tools.evaluator import EvalOptions  # noqa: E402
from bench_fixtures import NOOP, WL, CountingModel  # noqa: E402


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, num_gpus=1, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def test_actor_holds_a_gpu_and_survives_worker_loss(local_ray):
    evaluator = RayEvaluator(workers=1)
    try:
        (where,) = evaluator.where()
        assert where["gpu_ids"] == ["0"] and where["pid"] != os.getpid()  # num_gpus=1: Ray gave it the GPU
        options = EvalOptions(no_gpu=True)
        bad = evaluator.evaluate(WL, NOOP.replace("ret;", "bogus;"), options)
        assert bad.status == "COMPILE_ERROR"
        dead = evaluator.actors[0]
        ray.kill(dead)  # the worker is lost (a node going away)
        for _ in range(200):  # ray.kill is asynchronous: a call sent at once may still be served by the old process
            try:
                ray.get(dead.where.remote(), timeout=10)
            except ray.exceptions.RayActorError:
                break
            time.sleep(0.05)
        # sent to the lost actor: Ray's ActorDiedError, and the evaluation goes to its replacement (no INFRA_ERROR,
        # which cost the trajectory a retry)
        good = evaluator.evaluate(WL, NOOP, options)
        assert good.status == "COMPILED" and not good.gpu_evaluated
        assert dead not in evaluator.actors and len(evaluator.actors) == 1
    finally:
        evaluator.close()


def test_bench_on_ray(local_ray, tmp_path):
    calls: list[int] = []
    cfg = BenchConfig(models=["scripted/py"], workloads=[WL], trajectories=2, turns=2, no_gpu=True, backend="ray")
    out = run_bench(cfg, tmp_path / "run", model_factory=lambda c: CountingModel(calls))
    assert [r.statuses for r in out.trajectories] == [["COMPILED", "COMPILED"]] * 2
    assert sorted(calls) == [1, 1, 2, 2]  # every model call ran here, in the driver
    score = score_runs([tmp_path / "run"])
    assert score.n_trajectories == 2 and score.model_workload[0].n_compile_only == 4


def test_an_evaluation_that_raises_in_a_live_actor_raises_as_it_would_locally(local_ray, monkeypatch, tmp_path):
    """Not INFRA_ERROR with the actor killed and restarted: a harness exception some kernel text triggers is raised in
    the driver as the local evaluator raises it, so the loop records its traceback and retries, and the same crash
    again on the same kernel is scored as the model's turn (scoring/turns.py 'reproduced'), not left out of the
    scores as infra; the healthy actor stays."""
    import ptxbench.tools.ray_evaluator as ray_evaluator

    class Crashing(ray_evaluator.GpuEvaluatorActor):
        def evaluate(self, workload_id, source, options_json):
            raise ValueError("the evaluator cannot handle this kernel")

    monkeypatch.setattr(ray_evaluator, "GpuEvaluatorActor", Crashing)
    evaluator = RayEvaluator(workers=1)
    try:
        (actor,) = evaluator.actors
        with pytest.raises(ValueError, match="cannot handle this kernel"):
            evaluator.evaluate(WL, NOOP, EvalOptions(no_gpu=True))
        assert evaluator.actors == [actor] and evaluator.where()[0]["gpu_ids"] == ["0"]
        cfg = BenchConfig(models=["scripted/py"], workloads=[WL], trajectories=1, turns=2, no_gpu=True)
        run_bench(cfg, tmp_path / "run", evaluator=evaluator, model_factory=lambda c: CountingModel([]))
        score = score_runs([tmp_path / "run"])
        assert score.n_infra_failed == 0 and score.model_workload[0].n_trajectories == 1
        assert evaluator.actors == [actor]
    finally:
        evaluator.close()


def test_a_replacement_waiting_for_a_gpu_takes_no_evaluation(local_ray):
    """A lost actor's replacement that Ray cannot place (its node gone, the GPU taken by another job) is not handed
    evaluations meanwhile, where each would wait for ever: with no actor running an evaluation comes back INFRA_ERROR
    after placement_wait_s, and the replacement takes evaluations once it is placed."""
    import threading

    evaluator = RayEvaluator(workers=1)
    blocker_class = ray.remote(num_gpus=1)(type("GpuHolder", (), {"ping": lambda self: 1}))
    blocker = None
    try:
        evaluator.where()  # started: a busy machine takes longer than the short wait below to start the first actor
        evaluator.placement_wait_s = 2.0
        options = EvalOptions(no_gpu=True)
        assert evaluator.evaluate(WL, NOOP, options).status == "COMPILED"
        blocker = blocker_class.remote()  # waits for the GPU the actor holds, and takes it when the actor dies
        (dead,) = evaluator.actors
        ray.kill(dead)
        ray.get(blocker.ping.remote(), timeout=60)  # the GPU is the other job's now
        results = []
        runs = [threading.Thread(target=lambda: results.append(evaluator.evaluate(WL, NOOP, options)), daemon=True)
                for _ in range(2)]  # the lost actor's INFRA_ERROR, then one with no actor running
        for run in runs:
            run.start()
            run.join(timeout=60)
        assert not any(run.is_alive() for run in runs), "an evaluation waits on an actor that was never placed"
        assert [r.status for r in results] == ["INFRA_ERROR", "INFRA_ERROR"]
        assert "no Ray GPU worker is running" in results[1].message
        ray.kill(blocker)
        blocker = None
        evaluator.where()  # the replacement placed at last and started (slower than the short wait on a busy machine)
        assert evaluator.evaluate(WL, NOOP, options).status == "COMPILED"  # it takes evaluations
    finally:
        if blocker is not None:
            ray.kill(blocker)
        evaluator.close()


def test_the_placement_wait_is_the_benchs_to_set(local_ray, tmp_path):
    """A fully lost cluster cost 600 s per evaluation, fixed; `--ray-placement-wait` sets it, and a resume may change
    it (a runtime option, like the Ray address)."""
    from typer.testing import CliRunner

    from ptxbench.agent.bench.evaluators import make_evaluator
    from ptxbench.agent.bench.runner import open_run
    from ptxbench.agent.cli.main import app

    for config, wait in ((BenchConfig(models=["scripted/py"], workloads=[WL], no_gpu=True, backend="ray"), 600.0),
                         (BenchConfig(models=["scripted/py"], workloads=[WL], no_gpu=True, backend="ray",
                                      ray_placement_wait_s=2.5), 2.5)):
        evaluator = make_evaluator(config)
        try:
            assert evaluator.placement_wait_s == wait
        finally:
            evaluator.close()
    out = CliRunner().invoke(app, ["bench", "--models", "builtin/tuner", "--workloads", WL, "--trajectories", "1",
                                   "--turns", "1", "--no-gpu", "--backend", "ray", "--ray-placement-wait", "30",
                                   "--run-dir", str(tmp_path / "b"), "--no-report"])
    assert out.exit_code == 0, out.output
    recorded = open_run(None, tmp_path / "b", True)
    assert recorded.ray_placement_wait_s == 30
    assert open_run(None, tmp_path / "b", True, {"ray_placement_wait_s": 90.0}).ray_placement_wait_s == 90
