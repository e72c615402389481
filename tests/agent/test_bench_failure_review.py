"""A bench whose kernels take their GPU workers down, with trajectories of other models sharing the pool: each verdict
lands on the kernel that earned it, the others' evaluations run once each and pass, the harness's own failures are
retried, and nothing the pool started outlives the bench. Two fake GPUs (tests/tools/test_gpu_pool.py's FakeWorker,
whose job's workload names what its candidate does), parallel trajectories beyond the GPUs, no GPU."""
from __future__ import annotations

import os
import re
import sys
import threading
from collections import Counter

import pytest

from bench_fixtures import NOOP, WL
from ptxbench.agent.bench.matrix import BenchConfig
from ptxbench.agent.bench.runner import run_bench
from ptxbench.agent.models.base import ModelReply
from ptxbench.agent.scoring import score_runs
from ptxbench.tools.gpu import pool as pool_module
from ptxbench.tools.gpu.messages import GpuJob
from ptxbench.tools.gpu.pool import GpuPool, PoolConfig
from ptxbench.tools.results import EvalResult, Timing, TimingStat

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tools"))
from test_gpu_pool import FakeWorker  # noqa: E402

# what each model's kernels do on the GPU: pass, fault the context (the worker replaced), hang, take the worker down
BEHAVIOUR = {"fake/ok": "ok", "fake/fault": "fault", "fake/hang": "hang", "fake/die": "die"}
VERDICT = {"ok": "PASSED", "fault": "RUNTIME_ERROR", "hang": "TIMEOUT", "die": "RUNTIME_ERROR"}


class MarkedModel:
    """Answers every turn with the no-op kernel, marked with what it does and whose it is."""

    def __init__(self, cfg):
        self.name = cfg.model
        self.mark = f"// BEHAVE:{BEHAVIOUR[cfg.model]} OWNER:{cfg.trajectory_id()}"

    def query(self, request):
        kernel = NOOP.replace(".version 8.5", f"{self.mark} TURN:{request.turn}\n.version 8.5")
        return ModelReply(content=f"```ptx\n{kernel}```\n", usage={"total_tokens": 10})


class PoolEvaluator:
    """The bench's evaluations on a GpuPool of fake workers: the kernel's mark names the fake job."""

    def __init__(self, pool: GpuPool):
        self.pool = pool
        self.seen: Counter = Counter()  # (owner, turn) -> evaluations
        self.verdicts: dict = {}  # (owner, turn) -> (what its kernel does, the status it got)
        self.lock = threading.Lock()

    def evaluate(self, workload, source, options):
        behave, owner, turn = re.search(r"BEHAVE:(\w+) OWNER:(\S+) TURN:(\d+)", source).groups()
        out = self.pool.submit(GpuJob(workload=behave, timeout_s=0.3))
        with self.lock:
            self.seen[owner, int(turn)] += 1
            self.verdicts[owner, int(turn)] = (behave, out.status)
        stat = TimingStat(median_ms=1.0, ci_low_ms=1.0, ci_high_ms=1.0, n=3)
        return EvalResult(workload=workload, status=out.status, message=out.message, runtime_error=out.runtime_error,
                          gpu_evaluated=True, timing=Timing(candidate=stat, speedup=1.0) if out.status == "PASSED" else None)

    def close(self):
        self.pool.close()


@pytest.fixture
def pool(monkeypatch):
    monkeypatch.setattr(pool_module, "MIN_CANDIDATE_LIMIT_S", 0.1)
    FakeWorker.started = []
    pool = GpuPool(PoolConfig(devices=[0, 1], spares=1), factory=lambda d, c: FakeWorker(d, c))
    yield pool
    pool.close()


def test_each_verdict_lands_on_its_own_kernel_and_the_others_run_once_each(tmp_path, pool):
    cfg = BenchConfig(models=list(BEHAVIOUR), workloads=[WL], trajectories=2, turns=2, no_gpu=True, parallel=8)
    evaluator = PoolEvaluator(pool)
    out = run_bench(cfg, tmp_path / "run", evaluator=evaluator, own_evaluator=True,
                    model_factory=lambda c: MarkedModel(c))
    for report in out.trajectories:
        want = VERDICT[BEHAVIOUR[report.model]]
        assert report.statuses == [want, want] and not report.infra_failed and report.attempts == 1, report
    assert set(evaluator.seen.values()) == {1} and len(evaluator.seen) == 8 * 2  # no evaluation lost or run twice
    assert all(status == VERDICT[behave] for behave, status in evaluator.verdicts.values()), evaluator.verdicts
    assert [w for w in FakeWorker.started if w.alive()] == []  # the bench closed what it owned
    scored = {t.model: t for t in score_runs([tmp_path / "run"]).trajectories}
    assert not any(t.infra_failed for t in scored.values())


def test_a_referee_lost_under_a_passing_kernel_is_retried_not_scored(tmp_path, monkeypatch):
    """The first evaluation of the bench loses its worker's referee (the OOM killer's pick) while the candidate runs:
    the harness's failure, so the step is evaluated again, and the kernel's turn is its own pass."""
    from types import SimpleNamespace

    lost = {"done": False}

    class RefereeLostOnce(FakeWorker):
        def __init__(self, device, config):
            super().__init__(device, config)
            self.referee = SimpleNamespace(exitcode=None)

        def send(self, msg):
            if msg.get("type") != "evaluate" or lost["done"]:
                return super().send(msg)
            lost["done"] = True
            self.jobs += 1
            self.outbox.put({"type": "phase", "id": msg["id"], "phase": "run", "limit_s": 30})
            self.referee.exitcode = -9
            self._alive = False

        @property
        def exitcode(self):
            return None

    pool = GpuPool(PoolConfig(devices=[0], spares=1), factory=lambda d, c: RefereeLostOnce(d, c))
    evaluator = PoolEvaluator(pool)
    cfg = BenchConfig(models=["fake/ok"], workloads=[WL], trajectories=1, turns=2, no_gpu=True)
    out = run_bench(cfg, tmp_path / "run", evaluator=evaluator, own_evaluator=True,
                    model_factory=lambda c: MarkedModel(c))
    (report,) = out.trajectories
    assert report.statuses == ["PASSED", "PASSED"] and report.attempts == 2 and not report.infra_failed, report
    (traj,) = score_runs([tmp_path / "run"]).trajectories
    assert [t.status for t in traj.turns] == ["PASSED", "PASSED"] and not traj.infra_failed


def test_a_gpu_lost_for_good_stops_the_bench_resumable_instead_of_failing_every_trajectory(tmp_path, monkeypatch):
    """The machine's only GPU falls off the bus mid-run: no worker starts there any more. Every evaluation after it was
    INFRA_ERROR, so each trajectory spent its retries in seconds and the rest of the matrix ran through, every one
    infra-failed. As with a Ray cluster that lost its nodes, the bench stops at once (NoWorkerLeft, naming
    --resume), the trajectories waiting for it."""
    import ptxbench.tools.evaluate as evaluate_module
    from ptxbench.agent.bench.evaluators import NoWorkerLeft
    from ptxbench.tools.evaluate import LocalEvaluator

    monkeypatch.setattr(LocalEvaluator, "early_profiles", False)
    monkeypatch.setattr(evaluate_module, "attach", lambda result, *a, **k: result)  # no profiler on the CPU
    broken, made, calls = {"on": False}, [], []

    def factory(d, c):
        made.append(FakeWorker(d, c, fail_start=broken["on"]))
        return made[-1]

    class BreaksTheGpu:
        name = "fake/ok"

        def query(self, request):
            calls.append(request.turn)
            if len(calls) == 2:  # after the first evaluation: the GPU is gone, its workers with it
                broken["on"] = True
                for w in made:
                    w._alive = False
            return ModelReply(content=f"```ptx\n{NOOP}```\n", usage={"total_tokens": 10})

    evaluator = LocalEvaluator(GpuPool(PoolConfig(devices=[0], spares=1), factory=factory))
    cfg = BenchConfig(models=["fake/ok"], workloads=[WL], trajectories=4, turns=2, parallel=1)
    with pytest.raises(NoWorkerLeft) as stop:
        run_bench(cfg, tmp_path / "run", evaluator=evaluator, own_evaluator=True,
                  model_factory=lambda c: BreaksTheGpu())
    assert "no GPU worker can start" in str(stop.value) and "--resume" in str(stop.value)
    assert len(calls) == 2  # the trajectories not begun were not begun: no model call made for them
    assert not any(w.alive() for w in made)
