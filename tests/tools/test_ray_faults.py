"""RayEvaluator's handling of a cluster that fails under it, without Ray: a fake `ray` module whose calls fail the way
Ray's do. Only an exception the evaluation raised inside a live actor (RayTaskError) is the evaluation's; anything
else Ray's calls raise is the infrastructure's: INFRA_ERROR, retried by the bench, never a verdict on the kernel."""
from __future__ import annotations

import sys
import threading
import types

import pytest

from ptxbench.tools.evaluator import EvalOptions
from ptxbench.tools.ray_evaluator import GpuEvaluatorActor as REAL_ACTOR
from ptxbench.tools.results import EvalResult

WL = "smoke_gemm_bf16_m256_n256_k512"


class RayError(Exception):
    """Ray's base exception (ray.exceptions.RayError): an actor that died, a lost object, a failed placement."""


class RayTaskError(RayError):
    def __init__(self, cause):
        super().__init__(str(cause))
        self.cause = cause


class _Ref:
    def __init__(self, call):
        self.call = call


class _Method:
    def __init__(self, fn):
        self.fn = fn

    def remote(self, *args):
        return _Ref(lambda: self.fn(*args))


class FakeRay(types.ModuleType):
    """Actors run in the calling thread; `fail_get` (an exception) is what every ray.get raises meanwhile."""

    def __init__(self, gpus: int = 1):
        super().__init__("ray")
        self.exceptions = types.SimpleNamespace(RayError=RayError, RayTaskError=RayTaskError)
        self.gpus, self.fail_get, self.fail_remote = gpus, None, None
        self.started = 0
        self.killed: list = []  # the actor handles ray.kill was given, in order
        self.lock = threading.Lock()

    def is_initialized(self):
        return True

    def cluster_resources(self):
        return {"GPU": self.gpus}

    def remote(self, **_):
        fake = self

        def wrap(cls):
            class Handle:
                def __init__(self):
                    self.obj = cls()
                    self.evaluate, self.where, self.close = (_Method(self.obj.evaluate), _Method(lambda: {}),
                                                             _Method(lambda: None))

            class ActorClass:
                @staticmethod
                def remote():
                    if fake.fail_remote is not None:
                        raise fake.fail_remote
                    with fake.lock:
                        fake.started += 1
                    return Handle()

            return ActorClass
        return wrap

    def get(self, refs, timeout=None):
        if self.fail_get is not None:
            raise self.fail_get
        if isinstance(refs, list):
            return [r.call() for r in refs]
        return refs.call()

    def kill(self, actor):
        self.killed.append(actor)


class Compiles:
    def evaluate(self, workload_id, source, options_json):
        return EvalResult(workload=workload_id, status="COMPILED").model_dump()


@pytest.fixture
def fake_ray(monkeypatch):
    import ptxbench.tools.ray_evaluator as ray_evaluator

    fake = FakeRay()
    monkeypatch.setitem(sys.modules, "ray", fake)
    monkeypatch.setattr(ray_evaluator, "GpuEvaluatorActor", Compiles)
    return fake


def _evaluator(**kw):
    from ptxbench.tools.ray_evaluator import RayEvaluator

    evaluator = RayEvaluator(workers=1, **kw)
    for _ in range(200):  # admitted on its own thread
        if evaluator._running:
            break
        threading.Event().wait(0.01)
    return evaluator


def test_a_ray_client_cut_off_is_an_infra_error_not_the_kernels_exception(fake_ray):
    """A Ray client (ray://) whose connection is gone raises ConnectionError from ray.get and from every .remote():
    that was raised through the loop as the evaluation's own exception, logged alike on each retry of the turn, which
    scoring reads as a crash the kernel brings on (the model's failed turn)."""
    evaluator = _evaluator(placement_wait_s=1.0)
    assert evaluator.evaluate(WL, "k", EvalOptions(no_gpu=True)).status == "COMPILED"
    fake_ray.fail_get = fake_ray.fail_remote = ConnectionError("GRPC connection failed: Socket closed")
    lost = evaluator.evaluate(WL, "k", EvalOptions(no_gpu=True))
    assert lost.status == "INFRA_ERROR" and "ConnectionError" in lost.message + lost.runtime_error
    assert len(fake_ray.killed) == 1  # the actor it could not reach is given up, once
    again = evaluator.evaluate(WL, "k", EvalOptions(no_gpu=True))  # no actor left to ask, and none can be started
    assert again.status == "INFRA_ERROR"


def test_an_actor_whose_answer_cannot_be_read_is_infra(fake_ray):
    """An actor on a node with another ptxbench version answers with a result this one cannot read: the harness's
    fault, the same for every kernel, not an exception of this kernel's evaluation."""
    class Skewed:
        def evaluate(self, workload_id, source, options_json):
            return {"workload": 1}

    import ptxbench.tools.ray_evaluator as ray_evaluator

    ray_evaluator.GpuEvaluatorActor = Skewed  # the fixture's monkeypatch restores it
    evaluator = _evaluator()
    assert evaluator.evaluate(WL, "k", EvalOptions(no_gpu=True)).status == "INFRA_ERROR"


def test_an_exception_raised_inside_a_live_actor_is_still_the_evaluations(fake_ray):
    import ptxbench.tools.ray_evaluator as ray_evaluator

    class Raises:
        def evaluate(self, workload_id, source, options_json):
            raise RayTaskError(ValueError("the evaluator cannot handle this kernel"))

    ray_evaluator.GpuEvaluatorActor = Raises
    evaluator = _evaluator()
    with pytest.raises(ValueError, match="cannot handle"):
        evaluator.evaluate(WL, "k", EvalOptions(no_gpu=True))
    assert fake_ray.started == 1 and fake_ray.killed == []  # the actor is kept


def test_an_evaluation_waiting_while_the_last_actor_is_replaced_waits_for_the_replacement(fake_ray):
    """The lost actor left the list before its replacement joined it (the kill between them takes a round trip): an
    evaluation waiting then saw no actor at all and came back INFRA_ERROR at once ('every one failed to start')."""
    import time

    evaluator = _evaluator(placement_wait_s=30.0)
    killed = threading.Event()

    def slow_kill(actor):
        killed.set()
        time.sleep(1.5)

    fake_ray.kill = slow_kill
    fake_ray.fail_get = RayError("the actor died")
    results = []
    first = threading.Thread(target=lambda: results.append(evaluator.evaluate(WL, "k", EvalOptions(no_gpu=True))))
    first.start()
    assert killed.wait(5)
    fake_ray.fail_get = None
    waiting = threading.Thread(target=lambda: results.append(evaluator.evaluate(WL, "k", EvalOptions(no_gpu=True))))
    waiting.start()
    first.join(10)
    waiting.join(10)
    assert sorted(r.status for r in results) == ["COMPILED", "INFRA_ERROR"]


def test_an_actor_compiles_one_evaluation_while_its_gpu_runs_another(fake_ray):
    """Each actor took one evaluation at a time, compile included: its GPU sat idle while a kernel compiled (a tools-mode
    compile or sass call never needs the GPU at all) and every other evaluation waited. Its evaluator compiles beside
    the GPU job and gives the GPU one job at a time, as the local one does."""
    import time

    import ptxbench.tools.ray_evaluator as ray_evaluator

    class Slow(Compiles):
        def evaluate(self, workload_id, source, options_json):
            time.sleep(0.6)
            return super().evaluate(workload_id, source, options_json)

    ray_evaluator.GpuEvaluatorActor = Slow
    evaluator = _evaluator()
    results = []
    runs = [threading.Thread(target=lambda: results.append(evaluator.evaluate(WL, "k", EvalOptions(no_gpu=True))))
            for _ in range(2)]
    start = time.monotonic()
    for run in runs:
        run.start()
    for run in runs:
        run.join(10)
    assert [r.status for r in results] == ["COMPILED", "COMPILED"] and time.monotonic() - start < 1.1


def test_a_lost_actor_is_replaced_once_however_many_evaluations_it_held(fake_ray):
    """Two evaluations on an actor that dies both come back INFRA_ERROR; one replacement is started, and no later
    evaluation is handed to the lost actor."""
    import time

    import ptxbench.tools.ray_evaluator as ray_evaluator

    class Dies(Compiles):
        def evaluate(self, workload_id, source, options_json):
            time.sleep(0.3)
            raise RayError("the actor died")

    ray_evaluator.GpuEvaluatorActor = Dies
    evaluator = _evaluator(placement_wait_s=5.0)
    results = []
    runs = [threading.Thread(target=lambda: results.append(evaluator.evaluate(WL, "k", EvalOptions(no_gpu=True))))
            for _ in range(2)]
    for run in runs:
        run.start()
    for run in runs:
        run.join(10)
    assert [r.status for r in results] == ["INFRA_ERROR", "INFRA_ERROR"]
    assert fake_ray.started == 2 and len(evaluator.actors) == 1  # the first actor, and one replacement


def test_evaluations_go_to_the_least_busy_actor(fake_ray):
    """Two evaluations with two actors idle: one each, not both to the first actor (one on its GPU, one waiting for
    it) while the other GPU sits idle."""
    import time

    import ptxbench.tools.ray_evaluator as ray_evaluator

    used = []

    class Slow(Compiles):
        def evaluate(self, workload_id, source, options_json):
            used.append(id(self))
            time.sleep(0.3)
            return super().evaluate(workload_id, source, options_json)

    ray_evaluator.GpuEvaluatorActor = Slow
    fake_ray.gpus = 2
    from ptxbench.tools.ray_evaluator import RayEvaluator

    evaluator = RayEvaluator(workers=2)
    for _ in range(200):
        if len(evaluator._running) == 2:
            break
        time.sleep(0.01)
    runs = [threading.Thread(target=lambda: evaluator.evaluate(WL, "k", EvalOptions(no_gpu=True))) for _ in range(2)]
    for run in runs:
        run.start()
    for run in runs:
        run.join(10)
    assert len(set(used)) == 2


def test_an_actors_result_reaches_the_driver_as_the_local_evaluator_returns_it(fake_ray, monkeypatch):
    """The result crossed as JSON, where a float that is NaN or infinite (a profile counter, a measured ceiling) is
    written null, which a field that must be a number then refused: the kernel's verdict became the Ray worker's
    failure (INFRA_ERROR, its actor replaced, the turn retried and left out of the scores)."""
    import math

    import ptxbench.tools.ray_evaluator as ray_evaluator
    from ptxbench.tools.evaluate import LocalEvaluator
    from ptxbench.tools.results import Timing, TimingStat

    stat = TimingStat(median_ms=1.0, ci_low_ms=0.9, ci_high_ms=1.1, n=10)
    verdict = EvalResult(workload=WL, status="INCORRECT_NUMERICAL",
                         timing=Timing(candidate=stat, ceilings={"hbm_gbps": float("nan")}))
    monkeypatch.setattr(LocalEvaluator, "evaluate", lambda self, workload, source, options: verdict)
    monkeypatch.setattr(ray_evaluator, "GpuEvaluatorActor", REAL_ACTOR)
    evaluator = _evaluator()
    result = evaluator.evaluate(WL, "k", EvalOptions(no_gpu=True))
    assert result.status == "INCORRECT_NUMERICAL" and math.isnan(result.timing.ceilings["hbm_gbps"])
